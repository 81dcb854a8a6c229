package store_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// benchSizes: the default layout (objects of 256 KiB and more in data
// files), and for the larger sizes the same with every object in Pebble
// (DataFileThreshold -1), which is what the threshold is chosen against.
var benchSizes = []struct {
	name      string
	size      int
	threshold int
}{
	{"4KiB", 4 << 10, 0},
	{"64KiB", 64 << 10, 0},
	{"64KiB-files", 64 << 10, 1},
	{"256KiB", 256 << 10, 0},
	{"256KiB-pebble", 256 << 10, -1},
	{"1MiB", 1 << 20, 0},
	{"1MiB-pebble", 1 << 20, -1},
	{"4MiB", 4 << 20, 0},
	{"4MiB-pebble", 4 << 20, -1},
}

// BenchmarkApplyPut measures a synced put, overwriting 16 keys in turn so
// the store stays small and the old-data delete path is included.
func BenchmarkApplyPut(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			e := newEnv(b, store.Options{DataFileThreshold: sz.threshold})
			e.createBucket(0, "b")
			body := randBytes(rand.New(rand.NewPCG(1, 1)), sz.size)
			meta := &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body)}
			keys := make([]string, 16)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%02d", i)
			}
			seq := uint64(1)
			b.SetBytes(int64(sz.size))
			b.ReportAllocs()
			for b.Loop() {
				seq++
				le := &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: seq}, Req: &osdpb.ReqID{Client: 1, Tid: seq},
					Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: keys[seq%16], Meta: meta}
				if err := e.s.Apply(e.ctx, 0, le, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadRange measures reading a whole object of each size into a
// reused buffer (every chunk's CRC32C and the object's are checked).
func BenchmarkReadRange(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			e := newEnv(b, store.Options{DataFileThreshold: sz.threshold})
			e.createBucket(0, "b")
			body := randBytes(rand.New(rand.NewPCG(2, 2)), sz.size)
			e.put(0, "b", "obj", body)
			buf := make([]byte, 0, sz.size)
			b.SetBytes(int64(sz.size))
			b.ReportAllocs()
			for b.Loop() {
				_, out, err := e.s.ReadRange(e.ctx, "b", "obj", 0, -1, buf[:0])
				if err != nil || len(out) != sz.size {
					b.Fatal(err, len(out))
				}
			}
		})
	}
}

// BenchmarkApplyPutParallel measures synced 4 KiB puts from 16 goroutines,
// each on its own PG, as an OSD's shards issue them: Pebble's group commit
// should let one WAL sync serve many of them.
func BenchmarkApplyPutParallel(b *testing.B) {
	parallelPuts(b, store.Options{}, 4<<10, false, func(e *env, pg uint32, le *osdpb.LogEntry, body []byte) error {
		return e.s.Apply(e.ctx, pg, le, body)
	})
}

// BenchmarkCheckApplyPutParallel is a primary's side of 4 KiB puts of
// fresh keys, as `osprey bench obj` makes them: Check, then ApplyChecked,
// from 16 goroutines on their own PGs.
func BenchmarkCheckApplyPutParallel(b *testing.B) {
	parallelPuts(b, store.Options{}, 4<<10, true, func(e *env, pg uint32, le *osdpb.LogEntry, body []byte) error {
		ck, err := e.s.Check(e.ctx, le, body, store.CheckOptions{})
		if err != nil {
			return err
		}
		return e.s.ApplyChecked(e.ctx, pg, le, body, ck)
	})
}

// parallelPuts runs put from 16 goroutines, each on its own PG, with
// objects of size bytes: over 16 keys per PG in turn, or each to a fresh
// key. It reports the process's CPU per put beside the usual.
func parallelPuts(b *testing.B, opts store.Options, size int, fresh bool, put func(e *env, pg uint32, le *osdpb.LogEntry, body []byte) error) {
	e := newEnv(b, opts)
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(1, 1)), size)
	meta := &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body)}
	var pgs atomic.Uint32
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.SetParallelism(8) // 16 writers on 2 CPUs
	cpu0 := osdtest.ProcessCPU()
	b.ResetTimer()
	defer osdtest.ReportCPU(b, cpu0)
	b.RunParallel(func(pb *testing.PB) {
		pg := pgs.Add(1)
		seq := uint64(1)
		for pb.Next() {
			seq++
			key := seq % 16
			if fresh {
				key = seq
			}
			le := &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: seq}, Req: &osdpb.ReqID{Client: uint64(pg), Tid: seq},
				Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: fmt.Sprintf("pg%d-key-%02d", pg, key), Meta: meta}
			if err := put(e, pg, le, body); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkApplyPutParallelSizes is BenchmarkApplyPutParallel for the
// larger sizes, in data files and in Pebble: with 16 writers the disk's
// bandwidth, not a sync's latency, bounds the store, and writing the bytes
// once instead of twice (WAL, then flush) is what data files are for.
func BenchmarkApplyPutParallelSizes(b *testing.B) {
	for _, sz := range benchSizes[1:] {
		b.Run(sz.name, func(b *testing.B) {
			parallelPuts(b, store.Options{DataFileThreshold: sz.threshold}, sz.size, false, func(e *env, pg uint32, le *osdpb.LogEntry, body []byte) error {
				return e.s.Apply(e.ctx, pg, le, body)
			})
		})
	}
}

// BenchmarkReadShared measures a get's read of a whole 4 MiB object from
// the cache of verified extents (hit: no copy, no CRC pass) and, with the
// cache emptied before each read, from the disk (miss: O_DIRECT, one CRC
// pass); BenchmarkReadRange/4MiB is the copying read beside it.
func BenchmarkReadShared(b *testing.B) {
	const size = 4 << 20
	e := newEnv(b, store.Options{})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(2, 2)), size)
	e.put(0, "b", "obj", body)
	b.Run("hit", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			_, sh, err := e.s.ReadShared(e.ctx, "b", "obj", 0, -1, store.ReadOptions{})
			if err != nil || len(sh.B) != size {
				b.Fatal(err, len(sh.B))
			}
			sh.Release()
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			e.s.DropReadCacheForTest()
			_, sh, err := e.s.ReadShared(e.ctx, "b", "obj", 0, -1, store.ReadOptions{})
			if err != nil || len(sh.B) != size {
				b.Fatal(err, len(sh.B))
			}
			sh.Release()
		}
	})
}
