package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// readShared reads a range with ReadShared and returns a copy of it, the
// lent bytes given back.
func (e *env) readShared(bucket, key string, off, length int64) ([]byte, error) {
	_, b, err := e.readVersion(bucket, key, off, length, nil)
	return b, err
}

// readVersion reads [off, off+length) as a get does, wanting version want
// (ReadOptions.Want; nil for none).
func (e *env) readVersion(bucket, key string, off, length int64, want *osdpb.ObjectMeta) (*osdpb.ObjectMeta, []byte, error) {
	meta, sh, err := e.s.ReadShared(e.ctx, bucket, key, off, length, store.ReadOptions{Want: want})
	if err != nil {
		if sh.B != nil {
			e.t.Fatalf("read %s/%s [%d, +%d) failed (%v) and lent %d bytes", bucket, key, off, length, err, len(sh.B))
		}
		return nil, nil, err
	}
	defer sh.Release()
	return meta, bytes.Clone(sh.B), nil
}

// TestReadSharedRanges reads ranges at every offset and length around
// chunk and 4 KiB boundaries, with chunk sizes that are and are not a
// multiple of the O_DIRECT block, of objects the cache keeps whole and of
// one too large for it (read a range at a time), cold and cached, with
// ReadShared and ReadRange: each must return exactly the bytes put.
func TestReadSharedRanges(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, cs := range []int{4096, 1000} {
		e := newEnv(t, store.Options{ChunkSize: cs, DataFileThreshold: 1})
		e.createBucket(0, "b")
		e.put(0, "b", "first", randBytes(r, 5000))
		// Writes and reads share the flag: O_DIRECT that wrote must read.
		direct := e.s.DirectIOForTest()
		for _, size := range []int{1, 4095, 4096, 3*4096 + 100, 5*cs + 7, 16<<20 + 5} {
			body := randBytes(r, size)
			key := fmt.Sprintf("k%d", size)
			e.put(0, "b", key, body)
			var offs []int64
			for _, unit := range []int{cs, 4096} {
				for b := 0; b <= min(size, 4*unit); b += unit {
					offs = append(offs, int64(b)-1, int64(b), int64(b)+1)
				}
			}
			offs = append(offs, int64(size)-4097, int64(size)-1)
			if size > 1<<20 {
				// Too large to cache: a few ranges, each read from the disk.
				offs = []int64{0, 1, 4095, int64(cs) + 1, 3<<20 + 1, int64(size) - 4097, int64(size) - 1}
			}
			slices.Sort(offs)
			offs = slices.Compact(offs)
			e.s.DropReadCacheForTest()
			for pass := range 2 { // cold, then cached
				for off, end := range rangesOf(offs, int64(size)) {
					got, err := e.readShared("b", key, off, end-off)
					if err != nil || !bytes.Equal(got, body[off:end]) {
						t.Fatalf("chunk %d, %s [%d, %d), pass %d: %d bytes, %v", cs, key, off, end, pass, len(got), err)
					}
					if pass > 0 {
						continue // ReadRange has no cache: once will do
					}
					_, got, err = e.s.ReadRange(e.ctx, "b", key, off, end-off, nil)
					if err != nil || !bytes.Equal(got, body[off:end]) {
						t.Fatalf("ReadRange: chunk %d, %s [%d, %d): %d bytes, %v", cs, key, off, end, len(got), err)
					}
				}
				if got, err := e.readShared("b", key, 0, -1); err != nil || !bytes.Equal(got, body) {
					t.Fatalf("chunk %d, %s whole, pass %d: %v", cs, key, pass, err)
				}
			}
		}
		if e.s.DirectIOForTest() != direct || e.s.UnalignedReadsForTest() != 0 {
			t.Fatalf("chunk %d: reads gave up O_DIRECT (%d unaligned)", cs, e.s.UnalignedReadsForTest())
		}
		if st := e.s.ReadCacheStats(); st.Hits == 0 {
			t.Fatalf("chunk %d: nothing read from the cache: %+v", cs, st)
		}
		e.checkIntegrity()
	}
	t.Logf("O_DIRECT: %v", newEnv(t, store.Options{}).s.DirectIOForTest())
}

// TestReadSharedCorruption: a damaged chunk fails every read that touches
// it, with a *CorruptError and no bytes, and only those, on the O_DIRECT
// path as on the buffered one; it is never cached. An object whose chunks
// match but whose CRC32C does not fails whole reads only. A chunk damaged
// after its object was cached is found by ReadRange, which reads the disk.
func TestReadSharedCorruption(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 4096, DataFileThreshold: 1})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(5, 6)), 5*4096+100) // chunks 0-5
	e.put(0, "b", "k", body)
	must(t, e.s.CorruptDataFileForTest("b", "k", 2*4096+17)) // chunk 2
	for pass := range 2 {
		for _, rg := range [][2]int64{{0, 4096}, {4096, 4096}, {3 * 4096, -1}, {3 * 4096, 5}} {
			got, err := e.readShared("b", "k", rg[0], rg[1])
			end := len(body)
			if rg[1] >= 0 {
				end = int(rg[0] + rg[1])
			}
			if err != nil || !bytes.Equal(got, body[rg[0]:end]) {
				t.Fatalf("pass %d, clean range %v: %v", pass, rg, err)
			}
		}
		for _, rg := range [][2]int64{{0, -1}, {2 * 4096, 1}, {2*4096 - 1, 2}, {3*4096 - 1, 1}, {1, 4 * 4096}} {
			_, err := e.readShared("b", "k", rg[0], rg[1])
			var ce *store.CorruptError
			if !errors.As(err, &ce) || ce.Bucket != "b" || ce.Key != "k" || ce.Chunk != 2 {
				t.Fatalf("pass %d, range %v: %#v", pass, rg, err)
			}
		}
	}
	if st := e.s.ReadCacheStats(); st.Extents != 0 {
		t.Fatalf("a corrupt object was cached: %+v", st)
	}

	// Chunks that match their CRC32Cs but not the object's.
	e.put(0, "b", "digest", body)
	must(t, e.s.SetObjectCRCForTest("b", "digest", crc(body)+1))
	for range 2 {
		_, err := e.readShared("b", "digest", 0, -1)
		var ce *store.CorruptError
		if !errors.As(err, &ce) || ce.Chunk != -1 {
			t.Fatalf("whole read against a wrong object crc32c: %v", err)
		}
		if got, err := e.readShared("b", "digest", 1, -1); err != nil || !bytes.Equal(got, body[1:]) {
			t.Fatalf("range read: %v", err)
		}
	}

	// A short or missing file.
	e.put(0, "b", "short", body)
	must(t, e.s.TruncateDataFileForTest("b", "short", 4096+100))
	if got, err := e.readShared("b", "short", 0, 4096); err != nil || !bytes.Equal(got, body[:4096]) {
		t.Fatalf("short file, first chunk: %v", err)
	}
	for _, rg := range [][2]int64{{5000, 10}, {0, -1}, {3 * 4096, -1}} {
		_, err := e.readShared("b", "short", rg[0], rg[1])
		var ce *store.CorruptError
		if !errors.As(err, &ce) || ce.Chunk < 1 {
			t.Fatalf("short file %v: %v", rg, err)
		}
	}
	e.put(0, "b", "gone", body)
	must(t, e.s.RemoveDataFileForTest("b", "gone"))
	_, err := e.readShared("b", "gone", 0, 1)
	wantErr(t, err, store.ErrCorrupt)

	// Damage after caching: the cache lends what it checked; the disk
	// read finds the damage.
	e.put(0, "b", "later", body)
	if got, err := e.readShared("b", "later", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("clean read: %v", err)
	}
	must(t, e.s.CorruptDataFileForTest("b", "later", 4096))
	if got, err := e.readShared("b", "later", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("cached read: %v", err)
	}
	_, _, err = e.s.ReadRange(e.ctx, "b", "later", 0, -1, nil)
	var ce *store.CorruptError
	if !errors.As(err, &ce) || ce.Chunk != 1 {
		t.Fatalf("disk read after damage: %v", err)
	}

	e.put(0, "b", "k", body)
	e.put(0, "b", "short", body)
	e.put(0, "b", "gone", body)
	e.put(0, "b", "digest", body)
	e.put(0, "b", "later", body)
	e.checkIntegrity()
	t.Logf("O_DIRECT: %v", e.s.DirectIOForTest())
}

// TestReadSharedUnchecked: a reader that checks the bytes itself
// (ReadOptions.Unchecked) gets a data file's chunk-aligned ranges with no
// CRC pass in the store, and the CRC32C they must have from the chunks'
// records: a damaged chunk comes back as it is, its CRC telling it. A
// checked reader never gets such bytes from the cache: it reads the disk
// and finds the damage, and its checked extent of a whole object replaces
// the unchecked one. A range cut inside a chunk is checked as without
// the option.
func TestReadSharedUnchecked(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 4096, DataFileThreshold: 1})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(7, 8)), 5*4096+100) // chunks 0-5
	read := func(key string, off, length int64, unchecked bool) ([]byte, store.Shared) {
		t.Helper()
		_, sh, err := e.s.ReadShared(e.ctx, "b", key, off, length, store.ReadOptions{Unchecked: unchecked})
		if err != nil {
			t.Fatalf("%s [%d, +%d), unchecked %v: %v", key, off, length, unchecked, err)
		}
		defer sh.Release()
		return bytes.Clone(sh.B), sh
	}
	end := func(off, length int64) int64 {
		if length < 0 {
			return int64(len(body))
		}
		return off + length
	}
	checkedBytes := func() (checked, unchecked int64) {
		st := e.s.Stats()
		return st.ReadCRCBytes, st.UncheckedReadBytes
	}

	e.put(0, "b", "k", body)
	c0, u0 := checkedBytes()
	for i, rg := range [][2]int64{{0, -1}, {4096, 2 * 4096}, {5 * 4096, -1}} {
		got, sh := read("k", rg[0], rg[1], true)
		want := body[rg[0]:end(rg[0], rg[1])]
		if !bytes.Equal(got, want) || !sh.HasCRC || !sh.Unchecked || sh.CRC != crc(want) {
			t.Fatalf("range %v: %d bytes, HasCRC %v, Unchecked %v, CRC %08x; want the bytes, unchecked, CRC %08x",
				rg, len(got), sh.HasCRC, sh.Unchecked, sh.CRC, crc(want))
		}
		if c, u := checkedBytes(); c != c0 || u != u0+int64(len(body)) {
			t.Fatalf("after unchecked read %d: the store checked %d bytes and read %d unchecked; want 0 and %d (one load, then the cache)",
				i, c-c0, u-u0, len(body))
		}
	}
	// Cut inside a chunk: checked, from the disk (a miss: the cached
	// extent is unchecked), and the checked extent of the whole object
	// takes the unchecked one's place in the cache.
	rc := e.s.ReadCacheStats()
	if got, sh := read("k", 1, 4096, true); !bytes.Equal(got, body[1:4097]) || sh.HasCRC || sh.Unchecked {
		t.Fatalf("unaligned range: HasCRC %v, Unchecked %v; want neither", sh.HasCRC, sh.Unchecked)
	}
	if st := e.s.ReadCacheStats(); st.Hits != rc.Hits || st.Misses != rc.Misses+1 || st.Extents != rc.Extents {
		t.Fatalf("cache stats %+v after a checked read of an unchecked cached object (before %+v): want one miss more, the extent replaced", st, rc)
	}
	if c, _ := checkedBytes(); c != c0+int64(len(body)) {
		t.Fatalf("the unaligned read checked %d bytes, want the whole object's %d", c-c0, len(body))
	}
	if got, sh := read("k", 0, -1, true); !bytes.Equal(got, body) || !sh.HasCRC || sh.Unchecked {
		t.Fatalf("whole read after a checked one: HasCRC %v, Unchecked %v; want the cached checked extent", sh.HasCRC, sh.Unchecked)
	}

	// Damage on the disk.
	e.put(0, "b", "rot", body)
	must(t, e.s.CorruptDataFileForTest("b", "rot", 2*4096+17)) // chunk 2
	got, sh := read("rot", 0, -1, true)
	if bytes.Equal(got, body) || !sh.Unchecked || sh.CRC != crc(body) || crc(got) == sh.CRC {
		t.Fatalf("unchecked read of a damaged object: damaged %v, Unchecked %v, CRC %08x (the object's %08x, the bytes' %08x)",
			!bytes.Equal(got, body), sh.Unchecked, sh.CRC, crc(body), crc(got))
	}
	if got, sh := read("rot", 3*4096, -1, true); !bytes.Equal(got, body[3*4096:]) || sh.CRC != crc(got) {
		t.Fatalf("unchecked range past the damage: CRC %08x, the bytes' %08x", sh.CRC, crc(got))
	}
	for _, rg := range [][2]int64{{0, -1}, {2 * 4096, 4096}} {
		_, err := e.readShared("b", "rot", rg[0], rg[1])
		var ce *store.CorruptError
		if !errors.As(err, &ce) || ce.Chunk != 2 {
			t.Fatalf("checked read %v of the damaged object, its unchecked extent cached: %v; want chunk 2 corrupt", rg, err)
		}
	}
	e.put(0, "b", "rot", body)
	e.checkIntegrity()
}

// TestReadSharedRecheck: bytes the cache lends that went bad after they
// were checked come back as they are, with the CRC that tells it; a
// Recheck read drops the cached copy and takes them from the disk,
// checked, so the next read is right too.
func TestReadSharedRecheck(t *testing.T) {
	e := newEnv(t, store.Options{ChunkSize: 4096, DataFileThreshold: 1})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(9, 10)), 3*4096+7)
	e.put(0, "b", "k", body)
	read := func(opts store.ReadOptions) ([]byte, store.Shared) {
		t.Helper()
		_, sh, err := e.s.ReadShared(e.ctx, "b", "k", 0, -1, opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		defer sh.Release()
		return bytes.Clone(sh.B), sh
	}
	if got, _ := read(store.ReadOptions{}); !bytes.Equal(got, body) {
		t.Fatal("first read")
	}
	must(t, e.s.CorruptCachedForTest("b", "k", 5000))
	for _, opts := range []store.ReadOptions{{}, {Unchecked: true}} {
		if got, sh := read(opts); bytes.Equal(got, body) || !sh.HasCRC || sh.CRC != crc(body) {
			t.Fatalf("%+v read of the damaged cached copy: damaged %v, CRC %08x (the object's %08x)", opts, !bytes.Equal(got, body), sh.CRC, crc(body))
		}
	}
	c0 := e.s.Stats().ReadCRCBytes
	if got, sh := read(store.ReadOptions{Unchecked: true, Recheck: true}); !bytes.Equal(got, body) || sh.Unchecked || sh.CRC != crc(body) {
		t.Fatalf("recheck: right bytes %v, Unchecked %v", bytes.Equal(got, body), sh.Unchecked)
	}
	if n := e.s.Stats().ReadCRCBytes - c0; n != int64(len(body)) {
		t.Fatalf("the recheck checked %d bytes, want the object's %d", n, len(body))
	}
	if got, _ := read(store.ReadOptions{Unchecked: true}); !bytes.Equal(got, body) {
		t.Fatal("the read after the recheck lent the damaged copy again")
	}
}

// TestReadSharedVersions: an overwrite or delete is seen by the next read
// at once (the cache is keyed by data file, never by name), the dead
// file's extent leaves the cache, and bytes lent before stay intact until
// given back, however the pooled memory is reused meanwhile.
func TestReadSharedVersions(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(7, 7))
	v1, v2 := randBytes(r, 8000), randBytes(r, 8000)
	e.put(0, "b", "k", v1)
	_, held, err := e.s.ReadShared(e.ctx, "b", "k", 0, -1, store.ReadOptions{})
	if err != nil || !bytes.Equal(held.B, v1) {
		t.Fatalf("read v1: %v", err)
	}
	e.put(0, "b", "k", v2)
	if got, err := e.readShared("b", "k", 0, -1); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("read after overwrite: %v", err)
	}
	if st := e.s.ReadCacheStats(); st.Extents != 1 {
		t.Fatalf("the overwritten object's extent is still cached: %+v", st)
	}
	e.del(0, "b", "k")
	if _, err := e.readShared("b", "k", 0, -1); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("read after delete: %v", err)
	}
	if st := e.s.ReadCacheStats(); st.Extents != 0 {
		t.Fatalf("the deleted object's extent is still cached: %+v", st)
	}
	// Objects of the same size take the memory the cache let go of, if
	// the held extent had been given back.
	for i := range 8 {
		key := fmt.Sprintf("o%d", i)
		e.put(0, "b", key, v2)
		if got, err := e.readShared("b", key, 0, -1); err != nil || !bytes.Equal(got, v2) {
			t.Fatalf("read %s: %v", key, err)
		}
	}
	if !bytes.Equal(held.B, v1) {
		t.Fatal("lent bytes changed before they were given back")
	}
	held.Release()
	e.waitReaped()
	e.checkIntegrity()
}

// TestReadCacheBound: the cache holds no more than its limit, evicting
// the least recently read, and what it evicts reads again from the disk.
func TestReadCacheBound(t *testing.T) {
	e := newEnv(t, store.Options{DataFileThreshold: 1, ReadCacheSize: 3 * 64 << 10})
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(8, 9))
	bodies := make([][]byte, 6)
	for i := range bodies {
		bodies[i] = randBytes(r, 60<<10) // a 64 KiB extent each
		e.put(0, "b", fmt.Sprint(i), bodies[i])
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for j := range 50 {
				i := (j + w) % len(bodies)
				if got, err := e.readShared("b", fmt.Sprint(i), 0, -1); err != nil || !bytes.Equal(got, bodies[i]) {
					t.Errorf("read %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := e.s.ReadCacheStats()
	if st.Bytes > 3*64<<10 || st.Extents > 3 || st.Hits == 0 {
		t.Fatalf("cache over its bound, or unused: %+v", st)
	}
	// Read 0, 1, 2 in turn: 0 is the least recent when 3 comes in.
	for i := range 4 {
		if _, err := e.readShared("b", fmt.Sprint(i), 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	before := e.s.ReadCacheStats()
	if _, err := e.readShared("b", "0", 0, -1); err != nil {
		t.Fatal(err)
	}
	after := e.s.ReadCacheStats()
	if after.Misses != before.Misses+1 {
		t.Fatalf("the least recently read extent was not the one evicted: %+v, then %+v", before, after)
	}
	// The cache was full: taking 0 back let one other go.
	if after.Evictions != before.Evictions+1 || before.Evictions < 3 {
		t.Fatalf("evictions %d, then %d; want at least 3 (6 extents through a cache of 3), then one more", before.Evictions, after.Evictions)
	}
}

// TestReadSharedDuringOverwrite parks a ReadShared between its view and
// its data file while the object is overwritten and deleted: it must get
// the old object whole, and not leave the dead file's extent cached.
func TestReadSharedDuringOverwrite(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(3, 4))
	v1, v2 := randBytes(r, 4000), randBytes(r, 5000)
	e.put(0, "b", "k", v1)
	release, wait := e.parkedRead(func() ([]byte, error) { return e.readShared("b", "k", 0, -1) })
	e.put(0, "b", "k", v2)
	if got, err := e.readShared("b", "k", 0, -1); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("read of the overwrite: %v", err)
	}
	e.del(0, "b", "k")
	release()
	if body, err := wait(); err != nil || !bytes.Equal(body, v1) {
		t.Fatalf("parked reader: %d bytes, %v", len(body), err)
	}
	if st := e.s.ReadCacheStats(); st.Extents != 0 {
		t.Fatalf("a dead file's extent stayed cached: %+v", st)
	}
	e.waitReaped()
	e.checkIntegrity()
}

// TestReadCacheOff: a negative ReadCacheSize keeps nothing; every read
// goes to the disk and still returns the right bytes.
func TestReadCacheOff(t *testing.T) {
	e := newEnv(t, store.Options{DataFileThreshold: 1, ReadCacheSize: -1})
	e.createBucket(0, "b")
	body := randBytes(rand.New(rand.NewPCG(1, 2)), 100<<10)
	e.put(0, "b", "k", body)
	for range 3 {
		if got, err := e.readShared("b", "k", 0, -1); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read: %v", err)
		}
	}
	if st := e.s.ReadCacheStats(); st.Hits != 0 || st.Extents != 0 || st.Bytes != 0 {
		t.Fatalf("a cache that is off kept %+v", st)
	}
}
