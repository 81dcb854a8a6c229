package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestPutGetOverwriteDelete(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 1000})
	e.createBucket(1, "b")
	r := rand.New(rand.NewPCG(1, 2))

	v1 := randBytes(r, 2500)
	e.put(7, "b", "k", v1)
	e.mustRead("b", "k", v1)
	meta, err := e.s.Head(e.ctx, "b", "k")
	must(t, err)
	if meta.Etag != "etag" || meta.ContentType != "application/octet-stream" || meta.UserMeta["k"] != "v" {
		t.Fatalf("head meta %v", meta)
	}

	v2 := randBytes(r, 10) // shrinks: the old chunks must go
	e.put(7, "b", "k", v2)
	e.mustRead("b", "k", v2)
	e.checkIntegrity()
	if st := e.s.Stats(); st.Objects != 1 || st.Bytes != 10 {
		t.Fatalf("stats objects %d bytes %d, want 1 10", st.Objects, st.Bytes)
	}

	e.del(7, "b", "k")
	_, err = e.s.Head(e.ctx, "b", "k")
	wantErr(t, err, store.ErrNoSuchKey)
	_, _, err = e.read("b", "k")
	wantErr(t, err, store.ErrNoSuchKey)
	e.del(7, "b", "k") // S3: deleting a missing key succeeds, and is logged
	last, _, err := e.s.PGInfo(e.ctx, 7)
	must(t, err)
	if last.Seq != 4 {
		t.Fatalf("pg last %v, want seq 4", last)
	}
	_, err = e.s.Head(e.ctx, "nob", "k")
	wantErr(t, err, store.ErrNoSuchBucket)
	e.checkIntegrity()
	if st := e.s.Stats(); st.Objects != 0 || st.Bytes != 0 || st.Puts != 2 || st.Deletes != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestChunkBoundaries(t *testing.T) {
	const mib = 1 << 20
	for _, cs := range []int{0, 4096} {
		t.Run(fmt.Sprintf("chunk=%d", cs), func(t *testing.T) {
			e := newEnv(t, store.Options{ChunkSize: cs})
			chunk := cs
			if chunk == 0 {
				chunk = store.MaxChunkSize
			}
			e.createBucket(0, "b")
			r := rand.New(rand.NewPCG(3, 4))
			sizes := []int{0, 1, chunk - 1, chunk, chunk + 1, 3*chunk + chunk/2, 3*mib + mib/2}
			bodies := map[string][]byte{}
			for _, n := range sizes {
				key := fmt.Sprintf("size-%d", n)
				bodies[key] = randBytes(r, n)
				e.put(0, "b", key, bodies[key])
			}
			e.checkIntegrity()
			for key, body := range bodies {
				e.mustRead("b", key, body)
				n := int64(len(body))
				// Ranges around every chunk boundary and random ones.
				var ranges [][2]int64
				for i, b := 0, int64(chunk); b < n; i, b = i+1, b+int64(chunk) {
					if i > 2 && b+2*int64(chunk) < n {
						continue // the first boundaries and the last ones
					}
					ranges = append(ranges, [2]int64{b - 1, 2}, [2]int64{b - 1, 1}, [2]int64{b, 1}, [2]int64{b, -1})
				}
				for range 5 {
					if n > 0 {
						off := r.Int64N(n)
						ranges = append(ranges, [2]int64{off, r.Int64N(n-off) + 1})
					}
				}
				if n > 0 {
					ranges = append(ranges, [2]int64{n - 1, 1}, [2]int64{0, n + 100}, [2]int64{n - 1, -1}, [2]int64{0, 0})
				}
				for _, rg := range ranges {
					prefix := []byte("prefix")
					meta, got, err := e.s.ReadRange(e.ctx, "b", key, rg[0], rg[1], prefix)
					if err != nil {
						t.Fatalf("%s range %v: %v", key, rg, err)
					}
					end := n
					if rg[1] >= 0 && rg[0]+rg[1] < n {
						end = rg[0] + rg[1]
					}
					want := append([]byte("prefix"), body[rg[0]:end]...)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s range %v: got %d bytes, want %d", key, rg, len(got), len(want))
					}
					if meta.Size != uint64(n) {
						t.Fatalf("%s: meta size %d", key, meta.Size)
					}
				}
			}
		})
	}
}

func TestInvalidRanges(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	e.put(0, "b", "ten", []byte("0123456789"))
	e.put(0, "b", "empty", nil)

	for _, rg := range [][2]int64{{10, 1}, {10, -1}, {11, 0}, {-1, 1}, {0, -2}} {
		_, _, err := e.s.ReadRange(e.ctx, "b", "ten", rg[0], rg[1], nil)
		wantErr(t, err, store.ErrInvalidRange)
	}
	_, got, err := e.s.ReadRange(e.ctx, "b", "empty", 0, -1, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty object at 0: %q, %v", got, err)
	}
	_, _, err = e.s.ReadRange(e.ctx, "b", "empty", 1, -1, nil)
	wantErr(t, err, store.ErrInvalidRange)
	_, got, err = e.s.ReadRange(e.ctx, "b", "ten", 9, 5, nil)
	if err != nil || string(got) != "9" {
		t.Fatalf("range past the end: %q, %v", got, err)
	}
}

func TestPutRejects(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	body := []byte("hello")
	before, _, err := e.s.PGInfo(e.ctx, 3)
	must(t, err)

	le := putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "b", "k"), body)
	le.Meta.Crc32C++
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrBadDigest)

	le = putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "b", "k"), body)
	wantErr(t, e.s.Apply(e.ctx, 3, le, body[:4]), store.ErrBadDigest)

	le = putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "nob", "k"), body)
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrNoSuchBucket)

	le = putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "b", "a\x00b"), body)
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrInvalidKey)
	le = putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "b\x00", "k"), body)
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrInvalidKey)
	le = putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "b", "bad\xff"), body)
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrInvalidKey)
	le = putEntry(e.entry(3, osdpb.OpKind_OP_PUT, "b", ""), body)
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrInvalidKey)

	le = e.entry(3, osdpb.OpKind_OP_PUT, "b", "k")
	wantErr(t, e.s.Apply(e.ctx, 3, le, body), store.ErrInvalidArgument) // no meta
	le = e.entry(3, osdpb.OpKind_OP_NONE, "b", "k")
	wantErr(t, e.s.Apply(e.ctx, 3, le, nil), store.ErrInvalidArgument)
	wantErr(t, e.s.Apply(e.ctx, 3, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE}, nil), store.ErrInvalidArgument)

	_, err = e.s.Head(e.ctx, "b", "k")
	wantErr(t, err, store.ErrNoSuchKey)
	_, err = e.s.Head(e.ctx, "b", "a\x00b")
	wantErr(t, err, store.ErrInvalidKey)
	after, _, err := e.s.PGInfo(e.ctx, 3)
	must(t, err)
	if after.Seq != before.Seq {
		t.Fatalf("rejected ops moved the PG from %v to %v", before, after)
	}
	entries, _, err := e.s.LogAfter(e.ctx, 3, nil, 0)
	must(t, err)
	if len(entries) != 0 {
		t.Fatalf("rejected ops logged %d entries", len(entries))
	}
	e.checkIntegrity()
}

func TestManifest(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	le := e.entry(0, osdpb.OpKind_OP_PUT, "b", "big")
	le.Meta = &osdpb.ObjectMeta{Size: 10 << 20, Etag: "x-2", Parts: []*osdpb.PartRef{
		{Number: 1, Key: ".parts/1", Size: 5 << 20}, {Number: 2, Key: ".parts/2", Size: 5 << 20},
	}}
	wantErr(t, e.s.Apply(e.ctx, 0, le, []byte("body")), store.ErrInvalidArgument)
	e.mustApply(0, le, nil)
	meta, got, err := e.s.ReadRange(e.ctx, "b", "big", 0, -1, []byte("dst"))
	must(t, err)
	if len(meta.Parts) != 2 || string(got) != "dst" {
		t.Fatalf("manifest read: %v %q", meta, got)
	}
	if st := e.s.Stats(); st.Objects != 1 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
	e.checkIntegrity()
}

func TestCorruptionDetected(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 100})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(5, 6)), 350)
	e.put(0, "b", "k", body)
	must(t, e.s.CorruptChunkForTest("b", "k", 1))

	_, got, err := e.s.ReadRange(e.ctx, "b", "k", 0, 100, nil)
	if err != nil || !bytes.Equal(got, body[:100]) {
		t.Fatalf("clean chunk: %v", err)
	}
	e.wantCorrupt("b", "k", 1, [2]int64{0, -1}, [2]int64{150, 1}, [2]int64{99, 2}, [2]int64{199, 10})

	// A corrupt head is reported too, and a new put makes the key whole.
	e.put(0, "b", "h", []byte("head"))
	must(t, e.s.CorruptHeadForTest("b", "h"))
	_, err = e.s.Head(e.ctx, "b", "h")
	wantErr(t, err, store.ErrCorrupt)
	_, err = e.s.List(e.ctx, "b", store.ListOptions{})
	wantErr(t, err, store.ErrCorrupt)
	e.put(0, "b", "h", []byte("again"))
	e.mustRead("b", "h", []byte("again"))
}

func TestBucketLifecycle(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 64})
	names := []string{"zeta", "alpha", "mid", "b2", "b10"}
	for _, n := range names {
		e.createBucket(0, n)
	}
	le := e.entry(0, osdpb.OpKind_OP_CREATE_BUCKET, "alpha", "")
	wantErr(t, e.s.Apply(e.ctx, 0, le, nil), store.ErrBucketExists)
	info, err := e.s.HeadBucket(e.ctx, "alpha")
	must(t, err)
	if info.Name != "alpha" || info.CreatedUnixNano != 1234 {
		t.Fatalf("bucket info %v", info)
	}
	_, err = e.s.HeadBucket(e.ctx, "nope")
	wantErr(t, err, store.ErrNoSuchBucket)

	var got []string
	for b, err := range e.s.Buckets(e.ctx) {
		must(t, err)
		got = append(got, b.Name)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}

	empty, err := e.s.BucketEmpty(e.ctx, "mid")
	must(t, err)
	if !empty {
		t.Fatal("new bucket not empty")
	}
	// Objects of "mid" in several PGs, and a neighbour bucket that must survive.
	restore := store.SetPurgePageForTest(3)
	defer restore()
	for i := range 10 {
		e.put(uint32(i%3), "mid", fmt.Sprintf("k%d", i), bytes.Repeat([]byte{byte(i)}, 100+i))
	}
	e.put(1, "b2", "keep", []byte("keep"))
	empty, err = e.s.BucketEmpty(e.ctx, "mid")
	must(t, err)
	if empty {
		t.Fatal("bucket with objects reported empty")
	}
	_, err = e.s.BucketEmpty(e.ctx, "nope")
	wantErr(t, err, store.ErrNoSuchBucket)

	e.mustApply(5, e.entry(5, osdpb.OpKind_OP_DELETE_BUCKET, "mid", ""), nil)
	_, err = e.s.HeadBucket(e.ctx, "mid")
	wantErr(t, err, store.ErrNoSuchBucket)
	_, err = e.s.Head(e.ctx, "mid", "k1")
	wantErr(t, err, store.ErrNoSuchBucket)
	for pg := range uint32(3) {
		for o, err := range e.s.PGObjects(e.ctx, pg, "", "") {
			must(t, err)
			if o.Bucket == "mid" {
				t.Fatalf("purged object %q left in pg %d index", o.Key, pg)
			}
		}
	}
	e.mustRead("b2", "keep", []byte("keep"))
	if st := e.s.Stats(); st.Objects != 1 || st.Bytes != 4 {
		t.Fatalf("stats after purge %+v", st)
	}
	e.checkIntegrity()

	le = e.entry(5, osdpb.OpKind_OP_DELETE_BUCKET, "mid", "")
	wantErr(t, e.s.Apply(e.ctx, 5, le, nil), store.ErrNoSuchBucket)
	le = putEntry(e.entry(0, osdpb.OpKind_OP_PUT, "mid", "k1"), []byte("x"))
	wantErr(t, e.s.Apply(e.ctx, 0, le, []byte("x")), store.ErrNoSuchBucket)
	le = e.entry(0, osdpb.OpKind_OP_DELETE, "mid", "k1")
	wantErr(t, e.s.Apply(e.ctx, 0, le, nil), store.ErrNoSuchBucket)

	e.createBucket(0, "mid")
	empty, err = e.s.BucketEmpty(e.ctx, "mid")
	must(t, err)
	if !empty {
		t.Fatal("recreated bucket not empty")
	}
}

func TestReopenPersists(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 1 << 10})
	e.createBucket(0, "b")
	bodies := map[string][]byte{}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 20 {
		k := fmt.Sprintf("obj/%02d", i)
		bodies[k] = randBytes(r, r.IntN(5000))
		e.put(uint32(i%4), "b", k, bodies[k])
	}
	e.del(1, "b", "obj/01")
	delete(bodies, "obj/01")
	lastBefore, _, err := e.s.PGInfo(e.ctx, 1)
	must(t, err)
	e.reopen()
	for k, b := range bodies {
		e.mustRead("b", k, b)
	}
	last, _, err := e.s.PGInfo(e.ctx, 1)
	must(t, err)
	if last.Seq != lastBefore.Seq {
		t.Fatalf("pg last %v after reopen, want %v", last, lastBefore)
	}
	var n int64
	for _, b := range bodies {
		n += int64(len(b))
	}
	if st := e.s.Stats(); st.Objects != int64(len(bodies)) || st.Bytes != n {
		t.Fatalf("stats after reopen: %d objects %d bytes, want %d %d", st.Objects, st.Bytes, len(bodies), n)
	}
	// Data ids keep growing across opens: a new put must not reuse one.
	e.put(0, "b", "after", randBytes(r, 3000))
	e.checkIntegrity()
}

func TestPendingChunksCollected(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 512})
	e.createBucket(0, "b")
	e.put(0, "b", "k", randBytes(rand.New(rand.NewPCG(1, 1)), 2000))
	_, err := e.s.WritePendingForTest(e.ctx, 5000)
	must(t, err)
	if err := e.s.CheckIntegrityForTest(); err == nil {
		t.Fatal("integrity check missed the pending chunks")
	}
	e.reopen()
	e.checkIntegrity()
	if st := e.s.Stats(); st.GarbageCollected != 1 {
		t.Fatalf("garbage collected %d, want 1", st.GarbageCollected)
	}
}

func TestCanceledPutLeavesNothing(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 512})
	e.createBucket(0, "b")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	body := []byte("some bytes")
	err := e.s.Apply(ctx, 0, putEntry(e.entry(0, osdpb.OpKind_OP_PUT, "b", "k"), body), body)
	wantErr(t, err, context.Canceled)
	e.checkIntegrity()
}

func TestThroughSSTablesAndBlobFiles(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 64 << 10})
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(9, 9))
	bodies := map[string][]byte{}
	for i := range 8 {
		k := fmt.Sprintf("k%d", i)
		bodies[k] = randBytes(r, 100<<10+i*1000)
		e.put(0, "b", k, bodies[k])
	}
	must(t, e.s.FlushForTest(e.ctx))
	for k, b := range bodies {
		e.mustRead("b", k, b)
	}
	for i := range 4 {
		k := fmt.Sprintf("k%d", i)
		bodies[k] = randBytes(r, 70<<10)
		e.put(0, "b", k, bodies[k])
	}
	must(t, e.s.FlushForTest(e.ctx))
	e.reopen()
	for k, b := range bodies {
		e.mustRead("b", k, b)
	}
	e.checkIntegrity()
	if st := e.s.Stats(); st.DiskBytes == 0 || st.BlobFileBytes == 0 {
		t.Fatalf("chunks did not go to blob files: %+v", st)
	}
}

func TestCloseIdempotent(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	must(t, e.s.Close())
	wantErr(t, e.s.Close(), store.ErrClosed)
	_, err := e.s.Head(e.ctx, "b", "k")
	wantErr(t, err, store.ErrClosed)
	wantErr(t, e.s.Apply(e.ctx, 0, e.entry(0, osdpb.OpKind_OP_CREATE_BUCKET, "c", ""), nil), store.ErrClosed)
	for _, err := range e.s.Buckets(e.ctx) {
		wantErr(t, err, store.ErrClosed)
	}
	if st := e.s.Stats(); !reflect.DeepEqual(st, store.Stats{}) {
		t.Fatalf("stats of a closed store %+v", st)
	}
	_, err = store.Open(e.ctx, store.Options{})
	wantErr(t, err, store.ErrInvalidArgument)
	_, err = store.Open(e.ctx, store.Options{Dir: t.TempDir(), ChunkSize: store.MaxChunkSize + 1})
	wantErr(t, err, store.ErrInvalidArgument)
}

func TestConcurrentApplies(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 700})
	e.createBucket(0, "b")
	const pgs, rounds = 6, 15
	var wg sync.WaitGroup
	final := make([]map[string][]byte, pgs)
	errs := make(chan error, pgs*2)
	for pg := range pgs {
		final[pg] = map[string][]byte{}
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(pg), 1))
			for i := range rounds {
				key := fmt.Sprintf("pg%d/k%d", pg, i%4)
				body := randBytes(r, r.IntN(3000))
				le := putEntry(&osdpb.LogEntry{
					Version: &osdpb.Version{Epoch: 1, Seq: uint64(i + 1)},
					Kind:    osdpb.OpKind_OP_PUT, Bucket: "b", Key: key,
				}, body)
				if err := e.s.Apply(e.ctx, uint32(10+pg), le, body); err != nil {
					errs <- err
					return
				}
				final[pg][key] = body
			}
		})
		// Readers race the writers: every read is a whole version.
		wg.Go(func() {
			for i := range rounds * 2 {
				meta, got, err := e.s.ReadRange(e.ctx, "b", fmt.Sprintf("pg%d/k%d", pg, i%4), 0, -1, nil)
				if errors.Is(err, store.ErrNoSuchKey) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if uint64(len(got)) != meta.Size || crc(got) != meta.Crc32C {
					errs <- fmt.Errorf("torn read: %d bytes, meta %d", len(got), meta.Size)
					return
				}
			}
		})
	}
	// Two writers of one PG with the same versions: the lock orders them,
	// one of each pair is stale, and nothing tears.
	var stale sync.WaitGroup
	var staleCount [2]int
	for w := range 2 {
		stale.Go(func() {
			for i := range 10 {
				body := []byte(fmt.Sprintf("writer %d op %d", w, i))
				le := putEntry(&osdpb.LogEntry{
					Version: &osdpb.Version{Epoch: 1, Seq: uint64(i + 1)},
					Kind:    osdpb.OpKind_OP_PUT, Bucket: "b", Key: "shared",
				}, body)
				err := e.s.Apply(e.ctx, 99, le, body)
				if errors.Is(err, store.ErrStaleVersion) {
					staleCount[w]++
				} else if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	stale.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if staleCount[0]+staleCount[1] != 10 {
		t.Fatalf("stale answers %v, want 10 in all", staleCount)
	}
	for pg := range pgs {
		for k, b := range final[pg] {
			e.mustRead("b", k, b)
		}
	}
	e.checkIntegrity()
}

// TestPGStats: each PG counts its own objects and bytes through puts,
// overwrites, a key that moves to another PG, deletes, a bucket purge and
// a reopen; the PGs add up to the store's total.
func TestPGStats(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(1, "b")
	want := func(pg uint32, objects, bytes int64) {
		t.Helper()
		st, err := e.s.PGStats(e.ctx, pg)
		must(t, err)
		if st.Objects != objects || st.Bytes != bytes {
			t.Fatalf("pg %d: %+v, want %d objects %d bytes", pg, st, objects, bytes)
		}
	}
	e.put(7, "b", "a", make([]byte, 100))
	e.put(7, "b", "b", make([]byte, 10))
	e.put(8, "b", "c", make([]byte, 1))
	want(7, 2, 110)
	want(8, 1, 1)
	e.put(7, "b", "a", make([]byte, 50)) // overwrite
	want(7, 2, 60)
	e.put(8, "b", "b", make([]byte, 20)) // the key now maps to pg 8
	want(7, 1, 50)
	want(8, 2, 21)
	e.del(8, "b", "c")
	want(8, 1, 20)
	want(9, 0, 0)
	e.reopen()
	want(7, 1, 50)
	want(8, 1, 20)
	if st := e.s.Stats(); st.Objects != 2 || st.Bytes != 70 {
		t.Fatalf("store stats %+v, want the PGs' sum", st)
	}
	e.mustApply(1, e.entry(1, osdpb.OpKind_OP_DELETE_BUCKET, "b", ""), nil)
	want(7, 0, 0)
	want(8, 0, 0)
}

// TestCheck: every answer Apply can give an op is given by Check, before
// anything is written (the OSD sends the entry to its replicas between
// the two); what passes applies with ApplyChecked.
func TestCheck(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(1, "b")
	body := []byte("body")
	good := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", "k"), body)
	bad := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", "k"), body)
	bad.Meta.Crc32C++
	_, err := e.s.Check(e.ctx, bad, body, store.CheckOptions{})
	wantErr(t, err, store.ErrBadDigest)
	_, err = e.s.Check(e.ctx, putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "nope", "k"), body), body, store.CheckOptions{})
	wantErr(t, err, store.ErrNoSuchBucket)
	_, err = e.s.Check(e.ctx, e.entry(1, osdpb.OpKind_OP_DELETE, "nope", "k"), nil, store.CheckOptions{})
	wantErr(t, err, store.ErrNoSuchBucket)
	_, err = e.s.Check(e.ctx, e.entry(1, osdpb.OpKind_OP_CREATE_BUCKET, "b", ""), nil, store.CheckOptions{})
	wantErr(t, err, store.ErrBucketExists)
	_, err = e.s.Check(e.ctx, e.entry(1, osdpb.OpKind_OP_DELETE_BUCKET, "nope", ""), nil, store.CheckOptions{})
	wantErr(t, err, store.ErrNoSuchBucket)
	ck, err := e.s.Check(e.ctx, good, body, store.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good.Version = &osdpb.Version{Epoch: 1, Seq: 10}
	if err := e.s.ApplyChecked(e.ctx, 1, good, body, ck); err != nil {
		t.Fatal(err)
	}
	e.mustRead("b", "k", body)
}

// TestDroppedPartsLogged: a put or delete that replaces an object asks
// Options.DroppedParts about it, with the head the apply replaced, and logs
// the keys it names in the entry, which the PG log returns as written
// (FindRequest, LogAfter) across a restart; an apply that replaces nothing
// asks nothing. A replica that applies the same entries logs the same keys
// from its own head, and keeps those an entry arrives with (a log
// catch-up copies the primary's).
func TestDroppedPartsLogged(t *testing.T) {
	var asked [2][]string // what each store's calls saw replaced: the old object's ETag
	opts := func(i int) store.Options {
		return store.Options{DroppedParts: func(e *osdpb.LogEntry, old *osdpb.ObjectMeta) []string {
			asked[i] = append(asked[i], old.GetEtag())
			var keys []string
			for _, p := range old.GetParts() {
				if !slices.ContainsFunc(e.GetMeta().GetParts(), func(q *osdpb.PartRef) bool { return q.Key == p.Key }) {
					keys = append(keys, p.Key)
				}
			}
			return keys
		}}
	}
	primary, replica := newEnv(t, opts(0)), newEnv(t, opts(1))
	manifest := func(etag string, keys ...string) *osdpb.ObjectMeta {
		m := &osdpb.ObjectMeta{Etag: etag}
		for i, k := range keys {
			m.Parts = append(m.Parts, &osdpb.PartRef{Number: uint32(i + 1), Key: k, Size: 5})
			m.Size += 5
		}
		return m
	}
	plain := []byte("plain")
	steps := []struct {
		le   *osdpb.LogEntry
		body []byte
		want []string // DroppedParts logged
	}{
		{le: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Meta: manifest("m1", "u1/00001", "u1/00002")}},
		{le: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Meta: manifest("m2", "u1/00002", "u2/00001")}, want: []string{"u1/00001"}},
		{le: putEntry(&osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT}, plain), body: plain, want: []string{"u1/00002", "u2/00001"}},
		{le: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE}},
		{le: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE}}, // nothing to replace
		{le: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Meta: manifest("m3", "u3/00001")}},
		{le: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE}, want: []string{"u3/00001"}},
	}
	for _, e := range []*env{primary, replica} {
		e.createBucket(1, "b")
	}
	for i, st := range steps {
		le := primary.entry(1, st.le.Kind, "b", "k")
		le.Meta = st.le.Meta
		sent := proto.Clone(le).(*osdpb.LogEntry) // what a RepOp carries: the entry before the apply
		primary.mustApply(1, le, st.body)
		if !slices.Equal(le.DroppedParts, st.want) {
			t.Fatalf("step %d: the applied entry drops %q, want %q", i, le.DroppedParts, st.want)
		}
		replica.seq[1]++
		replica.mustApply(1, sent, st.body)
		if !slices.Equal(sent.DroppedParts, st.want) {
			t.Fatalf("step %d: the replica's entry drops %q, want %q", i, sent.DroppedParts, st.want)
		}
	}
	for i, asked := range asked {
		if want := []string{"m1", "m2", "etag", "m3"}; !slices.Equal(asked, want) {
			t.Fatalf("store %d asked about %q, want %q", i, asked, want)
		}
	}
	for _, e := range []*env{primary, replica} {
		e.reopen()
		logged, _, err := e.s.LogAfter(e.ctx, 1, &osdpb.Version{}, 100)
		must(t, err)
		logged = logged[1:] // the bucket's create
		if len(logged) != len(steps) {
			t.Fatalf("%d entries logged, want %d", len(logged), len(steps))
		}
		for i, st := range steps {
			if !slices.Equal(logged[i].DroppedParts, st.want) {
				t.Fatalf("step %d: logged %q, want %q", i, logged[i].DroppedParts, st.want)
			}
			found, ok, err := e.s.FindRequest(e.ctx, 1, logged[i].Req)
			must(t, err)
			if !ok || !slices.Equal(found.DroppedParts, st.want) {
				t.Fatalf("step %d: the request's entry drops %q (found %v), want %q", i, found.GetDroppedParts(), ok, st.want)
			}
		}
	}

	// A log catch-up applies the primary's entry as logged: what it names
	// stays, though this copy's own head (a plain object) has no parts.
	replica.mustApply(1, putEntry(replica.entry(1, osdpb.OpKind_OP_PUT, "b", "k"), plain), plain)
	catchUp := replica.entry(1, osdpb.OpKind_OP_DELETE, "b", "k")
	catchUp.DroppedParts = []string{"u9/00001"}
	replica.mustApply(1, catchUp, nil)
	found, ok, err := replica.s.FindRequest(replica.ctx, 1, catchUp.Req)
	must(t, err)
	if !ok || !slices.Equal(found.DroppedParts, []string{"u9/00001"}) {
		t.Fatalf("a caught-up entry logged %q, want what it came with", found.GetDroppedParts())
	}
}

// TestCheckSeesBucketDeleted: Check answers from the cache of buckets
// object commits found, so that cache must lose a bucket when it is
// deleted: a put to it is then refused by Check, before any replica could
// get it.
func TestCheckSeesBucketDeleted(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(1, "b")
	e.put(2, "b", "k", []byte("x"))
	e.del(2, "b", "k")
	e.mustApply(1, e.entry(1, osdpb.OpKind_OP_DELETE_BUCKET, "b", ""), nil)
	body := []byte("y")
	_, err := e.s.Check(e.ctx, putEntry(e.entry(2, osdpb.OpKind_OP_PUT, "b", "k"), body), body, store.CheckOptions{})
	wantErr(t, err, store.ErrNoSuchBucket)
	_, err = e.s.Check(e.ctx, e.entry(2, osdpb.OpKind_OP_DELETE, "b", "k"), nil, store.CheckOptions{})
	wantErr(t, err, store.ErrNoSuchBucket)
	e.createBucket(1, "b")
	if _, err := e.s.Check(e.ctx, putEntry(e.entry(2, osdpb.OpKind_OP_PUT, "b", "k"), body), body, store.CheckOptions{}); err != nil {
		t.Fatalf("a put to the bucket made again: %v", err)
	}
}

// TestCheckTakesTheCallersSpace: a put's room check measures the disk
// (one statfs) unless the caller hands in what it measured just before
// (CheckOptions.Space), which it then judges by: a measure that leaves no
// room refuses the put with ErrNoSpace, with no statfs of its own.
func TestCheckTakesTheCallersSpace(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(1, "b")
	body := []byte("body")
	put := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", "k"), body)
	measures := func() int64 { return e.s.Stats().SpaceMeasures }
	sp := e.s.Space()
	if sp.Total == 0 {
		t.Skip("the test directory's filesystem does not report its usage")
	}
	before := measures()
	if _, err := e.s.Check(e.ctx, put, body, store.CheckOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := measures() - before; n != 1 {
		t.Fatalf("a put's Check measured the disk %d times, want 1", n)
	}
	before = measures()
	if _, err := e.s.Check(e.ctx, put, body, store.CheckOptions{Space: &sp}); err != nil {
		t.Fatal(err)
	}
	full := sp
	full.Avail = 0
	_, err := e.s.Check(e.ctx, put, body, store.CheckOptions{Space: &full})
	wantErr(t, err, store.ErrNoSpace)
	if n := measures() - before; n != 0 {
		t.Fatalf("Checks handed the usage measured the disk %d times, want 0", n)
	}
}

// TestDiskBytesAcrossReopen: Stats' DiskBytes (osprey_osd_store_bytes) is
// what the store's files take, before and after a restart, and after the
// blob files of before the restart are deleted. Pebble's own figure lost
// those blob files' size at a reopen and then, as they were deleted, went
// below zero and wrapped to about 2^64.
func TestDiskBytesAcrossReopen(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 64 << 10, MemTableSize: 1 << 20})
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(11, 11))
	onDisk := func() uint64 {
		t.Helper()
		var n int64
		err := filepath.WalkDir(e.opts.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() == "RESERVE" {
				return err
			}
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // Pebble removed it meanwhile (an obsolete file)
			}
			if err != nil {
				return err
			}
			n += fi.Size()
			return nil
		})
		must(t, err)
		return uint64(n)
	}
	check := func(when string) {
		t.Helper()
		got, want := e.s.Stats().DiskBytes, onDisk()
		if got < want/2 || got > want*2 {
			t.Fatalf("%s: DiskBytes %d, the files take %d", when, got, want)
		}
	}
	for i := range 60 {
		e.put(0, "b", fmt.Sprintf("k%d", i), randBytes(r, 100<<10))
	}
	must(t, e.s.FlushForTest(e.ctx))
	check("before the restart")
	e.reopen()
	check("after the restart")
	for i := range 60 {
		e.del(0, "b", fmt.Sprintf("k%d", i))
	}
	for i := range 60 {
		e.put(0, "b", fmt.Sprintf("n%d", i), randBytes(r, 100<<10))
	}
	must(t, e.s.FlushForTest(e.ctx))
	check("after the old objects were deleted")
}
