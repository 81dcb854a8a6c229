package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// fileOptions makes objects of 1000 bytes and more data files of 256-byte
// chunks, so small bodies exercise every chunk boundary of a file.
func fileOptions() store.Options {
	return store.Options{ChunkSize: 256, DataFileThreshold: 1000}
}

func (e *env) fileID(bucket, key string) uint64 {
	e.t.Helper()
	id, err := e.s.DataFileIDForTest(bucket, key)
	must(e.t, err)
	return id
}

// waitReaped waits until no dead data file is left.
func (e *env) waitReaped() {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.s.Stats().DataFilesPending > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("dead data files not removed: %+v", e.s.Stats())
		}
	}
}

func TestDataFiles(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(11, 12))
	bodies := map[string][]byte{}
	for _, n := range []int{0, 1, 999, 1000, 1001, 1024, 1025, 5000} {
		key := fmt.Sprintf("size-%d", n)
		bodies[key] = randBytes(r, n)
		e.put(0, "b", key, bodies[key])
		if inFile := e.fileID("b", key) != 0; inFile != (n >= 1000) {
			t.Fatalf("%d bytes: in a data file %v", n, inFile)
		}
	}
	e.checkIntegrity()
	check := func() {
		t.Helper()
		for key, body := range bodies {
			e.mustRead("b", key, body)
			n := int64(len(body))
			if n == 0 {
				continue
			}
			// Every range that starts and ends at or next to a chunk boundary.
			var offs []int64
			for b := int64(0); b <= n; b += 256 {
				offs = append(offs, b-1, b, b+1)
			}
			for _, off := range offs {
				if off < 0 || off >= n {
					continue
				}
				for _, end := range offs {
					if end <= off || end > n {
						continue
					}
					_, got, err := e.s.ReadRange(e.ctx, "b", key, off, end-off, []byte("p"))
					if err != nil {
						t.Fatalf("%s [%d, %d): %v", key, off, end, err)
					}
					if !bytes.Equal(got[1:], body[off:end]) || got[0] != 'p' {
						t.Fatalf("%s [%d, %d): wrong bytes", key, off, end)
					}
				}
			}
		}
	}
	check()

	// A range read into a buffer of exactly its size does not reallocate:
	// the cut chunks go through a buffer of the store's.
	dst := make([]byte, 0, 300)
	_, got, err := e.s.ReadRange(e.ctx, "b", "size-5000", 100, 300, dst)
	must(t, err)
	if &got[0] != &dst[:1][0] || !bytes.Equal(got, bodies["size-5000"][100:400]) {
		t.Fatal("range read into an exact buffer reallocated or is wrong")
	}

	wantStats := func(objects, files int64) {
		t.Helper()
		var all, inFiles int64
		for _, b := range bodies {
			all += int64(len(b))
			if len(b) >= 1000 {
				inFiles += int64(len(b))
			}
		}
		st := e.s.Stats()
		if st.Objects != objects || st.Bytes != all || st.DataFiles != files || st.DataFileBytes != inFiles || st.DiskBytes < uint64(inFiles) {
			t.Fatalf("stats %+v, want %d objects %d bytes, %d files %d bytes", st, objects, all, files, inFiles)
		}
	}
	wantStats(8, 5)

	// Overwrites: file to file, file to Pebble, Pebble to file. The old
	// files go once no reader holds them.
	old1, old2 := e.fileID("b", "size-5000"), e.fileID("b", "size-1024")
	bodies["size-5000"] = randBytes(r, 3000)
	e.put(0, "b", "size-5000", bodies["size-5000"])
	bodies["size-1024"] = randBytes(r, 10)
	e.put(0, "b", "size-1024", bodies["size-1024"])
	bodies["size-999"] = randBytes(r, 2000)
	e.put(0, "b", "size-999", bodies["size-999"])
	e.waitReaped()
	if e.s.DataFileExistsForTest(old1) || e.s.DataFileExistsForTest(old2) {
		t.Fatal("overwritten data files left behind")
	}
	check()
	wantStats(8, 5)
	e.checkIntegrity()

	old := e.fileID("b", "size-1001")
	e.del(0, "b", "size-1001")
	delete(bodies, "size-1001")
	e.waitReaped()
	if e.s.DataFileExistsForTest(old) {
		t.Fatal("deleted data file left behind")
	}
	wantStats(7, 4)
	if st := e.s.Stats(); st.DataFilesRemoved != 3 {
		t.Fatalf("%d data files removed, want 3", st.DataFilesRemoved)
	}

	// Files and counters survive a restart; the pool's unused files do not.
	e.reopen()
	check()
	wantStats(7, 4)
	e.checkIntegrity()
	if n, err := e.s.DataFileCountForTest(); err != nil || n != 4 {
		t.Fatalf("%d files in the data directories after reopen (%v), want 4", n, err)
	}
	if st := e.s.Stats(); st.GarbageCollected != 0 {
		t.Fatalf("a clean reopen collected %d data ids", st.GarbageCollected)
	}
}

func TestDataFilesDisabled(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 256, DataFileThreshold: -1})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(1, 1)), 3000)
	e.put(0, "b", "k", body)
	if e.fileID("b", "k") != 0 {
		t.Fatal("a data file with DataFileThreshold < 0")
	}
	e.mustRead("b", "k", body)
	if st := e.s.Stats(); st.DataFiles != 0 || st.Bytes != 3000 {
		t.Fatalf("stats %+v", st)
	}
	// Objects written with files stay readable with files turned off, and
	// the other way round.
	e.opts.DataFileThreshold = 1000
	e.reopen()
	e.put(0, "b", "f", body)
	e.opts.DataFileThreshold = -1
	e.reopen()
	e.mustRead("b", "k", body)
	e.mustRead("b", "f", body)
	e.put(0, "b", "f", body[:2000]) // file to chunks
	e.mustRead("b", "f", body[:2000])
	e.checkIntegrity()
}

func TestDataFileCorruption(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(5, 6)), 1100) // chunks of 256: 0-4, the last of 76 bytes
	e.put(0, "b", "k", body)
	must(t, e.s.CorruptDataFileForTest("b", "k", 300)) // in chunk 1

	_, got, err := e.s.ReadRange(e.ctx, "b", "k", 0, 256, nil)
	if err != nil || !bytes.Equal(got, body[:256]) {
		t.Fatalf("clean chunk: %v", err)
	}
	_, got, err = e.s.ReadRange(e.ctx, "b", "k", 512, -1, nil)
	if err != nil || !bytes.Equal(got, body[512:]) {
		t.Fatalf("clean tail: %v", err)
	}
	e.wantCorrupt("b", "k", 1, [2]int64{0, -1}, [2]int64{300, 1}, [2]int64{255, 2}, [2]int64{511, 10}, [2]int64{256, 256})

	// A short file fails the chunks it lacks; a missing one fails every read.
	e.put(0, "b", "short", body)
	must(t, e.s.TruncateDataFileForTest("b", "short", 700))
	_, got, err = e.s.ReadRange(e.ctx, "b", "short", 0, 512, nil)
	if err != nil || !bytes.Equal(got, body[:512]) {
		t.Fatalf("short file, whole chunks: %v", err)
	}
	_, _, err = e.s.ReadRange(e.ctx, "b", "short", 600, 10, nil)
	var ce *store.CorruptError
	if !errors.As(err, &ce) || ce.Chunk != 2 {
		t.Fatalf("short file: %v", err)
	}
	e.put(0, "b", "gone", body)
	must(t, e.s.RemoveDataFileForTest("b", "gone"))
	_, _, err = e.s.ReadRange(e.ctx, "b", "gone", 0, 1, nil)
	wantErr(t, err, store.ErrCorrupt)

	// Chunks that match their CRC32Cs but not the object's: a whole read
	// fails, a range read does not.
	e.put(0, "b", "digest", body)
	must(t, e.s.SetObjectCRCForTest("b", "digest", crc(body)+1))
	_, _, err = e.s.ReadRange(e.ctx, "b", "digest", 0, -1, nil)
	if !errors.As(err, &ce) || ce.Chunk != -1 {
		t.Fatalf("whole read against a wrong object crc32c: %v", err)
	}
	_, got, err = e.s.ReadRange(e.ctx, "b", "digest", 1, -1, nil)
	if err != nil || !bytes.Equal(got, body[1:]) {
		t.Fatalf("range read: %v", err)
	}

	// An overwrite makes the key whole again and the store clean.
	e.put(0, "b", "k", body[:1000])
	e.put(0, "b", "short", body[:1000])
	e.put(0, "b", "gone", body[:1000])
	e.put(0, "b", "digest", body[:1000])
	e.mustRead("b", "k", body[:1000])
	e.checkIntegrity()
}

// TestReadDuringOverwrite parks a reader between its view and its data
// file while the object is overwritten and deleted: the reader must get
// the old object whole, and the dead files must stay until it is done.
func TestReadDuringOverwrite(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(3, 3))
	v1, v2 := randBytes(r, 4000), randBytes(r, 5000)
	e.put(0, "b", "k", v1)
	id1 := e.fileID("b", "k")
	release, wait := e.parkedRead(func() ([]byte, error) {
		_, body, err := e.s.ReadRange(e.ctx, "b", "k", 0, -1, nil)
		return body, err
	})

	e.put(0, "b", "k", v2)
	id2 := e.fileID("b", "k")
	e.del(0, "b", "k")
	// A reader that starts now sees the delete.
	_, _, err := e.read("b", "k")
	wantErr(t, err, store.ErrNoSuchKey)
	// The reaper had every chance: both files are dead, neither removed.
	time.Sleep(20 * time.Millisecond)
	if st := e.s.Stats(); st.DataFilesPending != 2 {
		t.Fatalf("%d dead files pending, want 2", st.DataFilesPending)
	}
	if !e.s.DataFileExistsForTest(id1) || !e.s.DataFileExistsForTest(id2) {
		t.Fatal("a dead file went while a reader could still open it")
	}
	e.checkIntegrity() // dead files held by readers are accounted for

	release()
	if body, err := wait(); err != nil || !bytes.Equal(body, v1) {
		t.Fatalf("parked reader: %d bytes, %v", len(body), err)
	}
	e.waitReaped()
	if e.s.DataFileExistsForTest(id1) || e.s.DataFileExistsForTest(id2) {
		t.Fatal("dead files left after the reader finished")
	}
	e.checkIntegrity()
}

// TestConcurrentReadsOfDataFiles races readers (whole objects and ranges)
// against overwrites and deletes of the same objects: a read returns one
// whole generation or ErrNoSuchKey, never an error or a mix.
func TestConcurrentReadsOfDataFiles(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	keys := []string{"k0", "k1", "k2"}
	body := func(key string, gen uint64) []byte {
		r := rand.New(rand.NewPCG(gen, uint64(len(key))+uint64(key[1])))
		n := 500 + r.IntN(4000) // both sides of the threshold
		return randBytes(r, n)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	wg.Go(func() {
		defer stop.Store(true)
		for seq := uint64(1); seq <= 300; seq++ {
			key := keys[seq%3]
			le := e.entry(1, osdpb.OpKind_OP_PUT, "b", key)
			if seq%7 == 0 {
				le.Kind = osdpb.OpKind_OP_DELETE
				if err := e.s.Apply(e.ctx, 1, le, nil); err != nil {
					errs <- err
					return
				}
				continue
			}
			b := body(key, seq)
			putEntry(le, b)
			le.Meta.UserMeta = map[string]string{"gen": strconv.FormatUint(seq, 10)}
			if err := e.s.Apply(e.ctx, 1, le, b); err != nil {
				errs <- err
				return
			}
		}
	})
	// Readers 0-3 read with ReadRange, 4-7 with ReadShared (through the
	// cache); odd ones read ranges.
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for !stop.Load() {
				key := keys[r.IntN(3)]
				off, length := int64(0), int64(-1)
				if w%2 == 1 {
					off, length = r.Int64N(500), r.Int64N(2000)
				}
				var meta *osdpb.ObjectMeta
				var got []byte
				var err error
				if w < 4 {
					meta, got, err = e.s.ReadRange(e.ctx, "b", key, off, length, nil)
				} else {
					var sh store.Shared
					meta, sh, err = e.s.ReadShared(e.ctx, "b", key, off, length, store.ReadOptions{})
					got = bytes.Clone(sh.B)
					sh.Release()
				}
				if errors.Is(err, store.ErrNoSuchKey) {
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("read %s: %w", key, err)
					return
				}
				gen, _ := strconv.ParseUint(meta.UserMeta["gen"], 10, 64)
				want := body(key, gen)
				end := int64(len(want))
				if length >= 0 && off+length < end {
					end = off + length
				}
				if !bytes.Equal(got, want[off:end]) {
					errs <- fmt.Errorf("read %s [%d, %d): not generation %d", key, off, end, gen)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.waitReaped()
	e.checkIntegrity()
}

func TestOrphanDataFilesCollected(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(1, 1)), 2000)
	e.put(0, "b", "k", body)
	_, err := e.s.WritePendingDataFileForTest(3000)
	must(t, err)
	if err := e.s.CheckIntegrityForTest(); err == nil {
		t.Fatal("integrity check missed the unreferenced data file")
	}
	e.reopen()
	e.checkIntegrity()
	if st := e.s.Stats(); st.GarbageCollected != 1 {
		t.Fatalf("garbage collected %d, want 1", st.GarbageCollected)
	}
	if n, err := e.s.DataFileCountForTest(); err != nil || n != 1 {
		t.Fatalf("%d data files (%v), want 1", n, err)
	}
	e.mustRead("b", "k", body)
}

// TestDataFilesPowerLoss cuts power with data files in every state: pooled,
// written without a head, dead and held back from the reaper, live. After
// the cut only the live files of the heads that survived may remain.
func TestDataFilesPowerLoss(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	opts := store.WithFSForTest(fileOptions(), fs)
	opts.Dir = "/db"
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(4, 4))
	for i := range 6 {
		e.put(0, "b", fmt.Sprintf("k%d", i), randBytes(r, 1500+i))
	}
	e.s.PauseReaperForTest(true)
	e.put(0, "b", "k0", randBytes(r, 2500)) // k0's first file is dead
	e.del(0, "b", "k1")                     // so is k1's
	_, err := e.s.WritePendingDataFileForTest(4000)
	must(t, err)
	if st := e.s.Stats(); st.DataFilesPending != 2 {
		t.Fatalf("%d dead files, want 2", st.DataFilesPending)
	}
	for round, pct := range []int{0, 50, 100} {
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: r})
		c, err := store.Open(ctx, store.WithFSForTest(store.Options{Dir: "/db", ChunkSize: 256, DataFileThreshold: 1000, Logger: quietLogger()}, clone))
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		if err := c.CheckIntegrityForTest(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		st := c.Stats()
		if n, err := c.DataFileCountForTest(); err != nil || int64(n) != st.DataFiles || st.DataFiles != 5 {
			t.Fatalf("round %d: %d data files (%v), %d objects in files, want 5", round, n, err, st.DataFiles)
		}
		if st.GarbageCollected == 0 {
			t.Fatalf("round %d: nothing collected", round)
		}
		must(t, c.Close())
	}
	e.s.PauseReaperForTest(false)
	e.waitReaped()
}

func TestDeleteBucketRemovesDataFiles(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "gone")
	e.createBucket(0, "kept")
	restore := store.SetPurgePageForTest(2)
	defer restore()
	r := rand.New(rand.NewPCG(2, 2))
	for i := range 5 {
		e.put(uint32(i%2), "gone", fmt.Sprintf("k%d", i), randBytes(r, 1000+i))
	}
	kept := randBytes(r, 1200)
	e.put(0, "kept", "k", kept)
	e.mustApply(3, e.entry(3, osdpb.OpKind_OP_DELETE_BUCKET, "gone", ""), nil)
	e.waitReaped()
	if n, err := e.s.DataFileCountForTest(); err != nil || n != 1 {
		t.Fatalf("%d data files after the bucket went (%v), want 1", n, err)
	}
	if st := e.s.Stats(); st.Objects != 1 || st.DataFiles != 1 || st.DataFileBytes != 1200 {
		t.Fatalf("stats %+v", st)
	}
	e.mustRead("kept", "k", kept)
	e.checkIntegrity()
}

// TestPutErrorsLeaveNoDataFile: a put refused before its commit writes no
// data file (the bucket check comes first for large objects).
func TestPutErrorsLeaveNoDataFile(t *testing.T) {
	e := newEnv(t, fileOptions())
	body := randBytes(rand.New(rand.NewPCG(1, 2)), 2000)
	le := putEntry(e.entry(0, osdpb.OpKind_OP_PUT, "nob", "k"), body)
	wantErr(t, e.s.Apply(e.ctx, 0, le, body), store.ErrNoSuchBucket)
	e.createBucket(0, "b")
	le = putEntry(e.entry(0, osdpb.OpKind_OP_PUT, "b", "k"), body)
	le.Meta.Crc32C++
	wantErr(t, e.s.Apply(e.ctx, 0, le, body), store.ErrBadDigest)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	wantErr(t, e.s.Apply(ctx, 0, putEntry(e.entry(0, osdpb.OpKind_OP_PUT, "b", "k"), body), body), context.Canceled)
	e.waitReaped()
	e.checkIntegrity()
	if n, err := e.s.DataFileCountForTest(); err != nil || n != 0 {
		t.Fatalf("%d data files (%v)", n, err)
	}
}

// TestDataFileAlignment puts bodies at every alignment in memory and of
// sizes around the O_DIRECT block and piece sizes: aligned pieces are
// written from the body, the rest through an aligned buffer, the tail
// zero-padded.
func TestDataFileAlignment(t *testing.T) {
	e := newEnv(t, store.Options{DataFileThreshold: 1})
	e.createBucket(0, "b")
	big := randBytes(rand.New(rand.NewPCG(8, 8)), 9<<20)
	for _, off := range []int{0, 1, 512, 4096} {
		for _, size := range []int{1, 4095, 4096, 4097, 1 << 20, 4 << 20, 4<<20 + 1, 8<<20 + 4096} {
			key := fmt.Sprintf("%d-%d", off, size)
			e.put(0, "b", key, big[off:off+size])
			e.mustRead("b", key, big[off:off+size])
		}
	}
	e.checkIntegrity()
	t.Logf("O_DIRECT: %v", e.s.DirectIOForTest())
}

// TestDataFileRanges reads ranges of data files of 4 KiB chunks, sized
// around multiples of the block their tails are padded to, into buffers of
// every kind (nil, exactly sized, aligned with room, unaligned), around
// every chunk boundary; and a file cut short.
func TestDataFileRanges(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 4096, DataFileThreshold: 1})
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(6, 6))
	aligned := make([]byte, 0, 1<<20) // large allocations are page-aligned
	unaligned := make([]byte, 1<<20+1)[1:1]
	for _, size := range []int{1, 4096, 3*4096 + 100, 8 * 4096} {
		body := randBytes(r, size)
		key := fmt.Sprintf("k%d", size)
		e.put(0, "b", key, body)
		var offs []int64
		for b := int64(0); b <= int64(size); b += 4096 {
			offs = append(offs, b-1, b, b+1)
		}
		offs = append(offs, int64(size)-1)
		for off, end := range rangesOf(offs, int64(size)) {
			want := body[off:end]
			for i, dst := range [][]byte{nil, make([]byte, 0, end-off), aligned, unaligned} {
				_, got, err := e.s.ReadRange(e.ctx, "b", key, off, end-off, dst)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s [%d, %d) into buffer %d: %d bytes, %v", key, off, end, i, len(got), err)
				}
			}
		}
	}
	// A short file: what is there reads, what is missing is corrupt, read
	// directly or not.
	body := randBytes(r, 3*4096+100)
	e.put(0, "b", "short", body)
	must(t, e.s.TruncateDataFileForTest("b", "short", 4096+100))
	for _, dst := range [][]byte{nil, aligned} {
		_, got, err := e.s.ReadRange(e.ctx, "b", "short", 0, 4096, dst)
		if err != nil || !bytes.Equal(got, body[:4096]) {
			t.Fatalf("short file, first chunk: %v", err)
		}
		for _, rg := range [][2]int64{{5000, 10}, {4096, 4096}, {0, -1}, {3 * 4096, -1}} {
			_, _, err = e.s.ReadRange(e.ctx, "b", "short", rg[0], rg[1], dst)
			var ce *store.CorruptError
			if !errors.As(err, &ce) || ce.Chunk < 1 {
				t.Fatalf("short file %v: %v", rg, err)
			}
		}
	}
	e.put(0, "b", "short", body)
	e.checkIntegrity()
	t.Logf("O_DIRECT: %v", e.s.DirectIOForTest())
}
