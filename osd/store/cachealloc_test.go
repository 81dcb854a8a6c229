package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd/store"
)

// fakeCacheMem is a store.Allocator that counts what it hands out and
// gets back, and fails on demand.
type fakeCacheMem struct {
	mu    sync.Mutex
	out   map[*wire.Buffer]bool
	freed atomic.Int64
	fail  atomic.Pointer[error] // the next AllocAligned's error, if set
	skew  atomic.Bool           // hand out memory off the 4 KiB boundary
}

var fakeOwner = new(int)

func newFakeCacheMem() *fakeCacheMem { return &fakeCacheMem{out: map[*wire.Buffer]bool{}} }

func (f *fakeCacheMem) AllocAligned(n int) (*wire.Buffer, error) {
	if err := f.fail.Load(); err != nil {
		return nil, *err
	}
	raw := make([]byte, n+2*4096)
	off := -int(uintptr(unsafe.Pointer(&raw[0]))) & 4095
	if f.skew.Load() {
		off += 512
	}
	buf := wire.NewExternalBuffer(raw[off:off+n:off+n], func(b *wire.Buffer) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.out[b] {
			panic("store: a read-cache buffer was freed twice")
		}
		delete(f.out, b)
		f.freed.Add(1)
	})
	buf.Owner = fakeOwner
	f.mu.Lock()
	f.out[buf] = true
	f.mu.Unlock()
	return buf, nil
}

func (f *fakeCacheMem) outstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.out)
}

// ext is the extent of each object of cachedObjects: its size padded to
// 4 KiB, which the fake allocates exactly.
const ext = 60 << 10

// cachedObjects is a store whose read cache holds up to extents objects
// in a fakeCacheMem, and six objects in its bucket "b", named 0 to 5.
func cachedObjects(t *testing.T, extents int64) (*fakeCacheMem, *env, [][]byte) {
	mem := newFakeCacheMem()
	e := newEnv(t, store.Options{DataFileThreshold: 1, ReadCacheSize: extents * ext, ReadCacheAlloc: mem})
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(5, 6))
	bodies := make([][]byte, 6)
	for i := range bodies {
		bodies[i] = randBytes(r, ext-100)
		e.put(0, "b", fmt.Sprint(i), bodies[i])
	}
	return mem, e, bodies
}

// TestReadCacheAllocator: with Options.ReadCacheAlloc the cache's extents
// live in the allocator's memory, charged at its size, and lent with its
// Owner (so a transport can send them where they lie); under concurrent
// reads that evict, every read is right and an evicted extent a reader
// still holds stays intact until its release; Close gives every buffer
// back, each once. An allocator that fails, or hands out memory that is
// not aligned for O_DIRECT, leaves the store on its own memory.
func TestReadCacheAllocator(t *testing.T) {
	mem, e, bodies := cachedObjects(t, 3)

	// A reader holds object 0 while the others evict it.
	_, held, err := e.s.ReadShared(e.ctx, "b", "0", 0, -1, store.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wb := held.Buffer()
	if wb.Owner != fakeOwner || !bytes.Equal(wb.B, bodies[0]) {
		t.Fatalf("the lent buffer's owner is %v, not the allocator's, or its bytes are wrong", wb.Owner)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for j := range 60 {
				i := 1 + (j+w)%(len(bodies)-1)
				if got, err := e.readShared("b", fmt.Sprint(i), 0, -1); err != nil || !bytes.Equal(got, bodies[i]) {
					t.Errorf("read %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := e.s.ReadCacheStats()
	if st.Extents > 3 || st.Bytes != int64(st.Extents)*ext || st.Hits == 0 {
		t.Fatalf("the cache holds %+v, want at most 3 extents of %d bytes each, and hits", st, ext)
	}
	if !bytes.Equal(wb.B, bodies[0]) {
		t.Fatal("an evicted extent a reader still held was overwritten")
	}
	if n := mem.outstanding(); n != st.Extents+1 {
		t.Fatalf("%d buffers out, want the %d cached and the one held", n, st.Extents)
	}
	wb.Release()
	if n := mem.outstanding(); n != st.Extents {
		t.Fatalf("%d buffers out after the holder's release, want the %d cached", n, st.Extents)
	}
	if mem.freed.Load() == 0 {
		t.Fatal("nothing was evicted back to the allocator")
	}

	// Failures: ordinary memory, counted unless the allocator had none.
	e.s.DropReadCacheForTest()
	unavailable, broken := store.ErrAllocUnavailable, errors.New("registration failed")
	for i, c := range []struct {
		err    *error
		skew   bool
		counts int64
	}{{&unavailable, false, 0}, {&broken, false, 1}, {nil, true, 1}} {
		mem.fail.Store(c.err)
		mem.skew.Store(c.skew)
		before := e.s.ReadCacheStats().AllocFailures
		_, sh, err := e.s.ReadShared(e.ctx, "b", fmt.Sprint(i), 0, -1, store.ReadOptions{})
		if err != nil || !bytes.Equal(sh.B, bodies[i]) {
			t.Fatalf("case %d: read: %v", i, err)
		}
		if b := sh.Buffer(); b.Owner != nil {
			t.Fatalf("case %d: bytes in the store's memory lent with the owner %v", i, b.Owner)
		} else {
			b.Release()
		}
		if got := e.s.ReadCacheStats().AllocFailures - before; got != c.counts {
			t.Fatalf("case %d: %d allocator failures counted, want %d", i, got, c.counts)
		}
	}
	mem.fail.Store(nil)
	mem.skew.Store(false)
	if _, err := e.readShared("b", "5", 0, -1); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := mem.outstanding(); n != 0 {
		t.Fatalf("%d read-cache buffers still out after Close", n)
	}
}

// TestReclaimReadCache: asked for memory back (an RDMA transfer found the
// registered memory spent), the cache lets go of its least recently used
// extents in the allocator's memory, enough to cover what was asked, and
// no more; extents in the store's own memory stay, as that is not what
// was asked for. Each buffer goes back to the allocator once its last
// reader is done, and later reads are still right.
func TestReclaimReadCache(t *testing.T) {
	mem, e, bodies := cachedObjects(t, 8)
	read := func(i int) {
		t.Helper()
		if got, err := e.readShared("b", fmt.Sprint(i), 0, -1); err != nil || !bytes.Equal(got, bodies[i]) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	// Objects 0-3 in the allocator's memory, 4 in the store's (the
	// allocator had none to give then), 0 used least, 3 most.
	for i := range 4 {
		read(i)
	}
	unavailable := store.ErrAllocUnavailable
	mem.fail.Store(&unavailable)
	read(4)
	mem.fail.Store(nil)
	// A reader still holds object 1.
	_, held, err := e.s.ReadShared(e.ctx, "b", "1", 0, -1, store.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	read(2)
	read(3) // recency now 0, 4, 1, 2, 3 (least first; 4 is in the store's memory)

	if got := e.s.ReclaimReadCache(ext + 1); got != 2*ext {
		t.Fatalf("asked for a little over one extent, %d bytes let go; want two extents, %d", got, 2*ext)
	}
	st := e.s.ReadCacheStats()
	if st.Reclaimed != 2 || st.Extents != 3 {
		t.Fatalf("after the reclaim: %+v; want 2 reclaimed, 3 left (2, 3 and the store's 4)", st)
	}
	// 0 went back at once; 1, still read, waits for its reader.
	if n := mem.outstanding(); n != 3 {
		t.Fatalf("%d allocator buffers out, want 3 (2, 3 and the one read)", n)
	}
	if !bytes.Equal(held.B, bodies[1]) {
		t.Fatal("a reclaimed extent was overwritten while a reader held it")
	}
	held.Release()
	if n := mem.outstanding(); n != 2 {
		t.Fatalf("%d allocator buffers out after the reader's release, want 2", n)
	}
	// Asked for more than it has of the allocator's, it lets go of all
	// of that and keeps its own memory's extent.
	if got := e.s.ReclaimReadCache(1 << 30); got != 2*ext {
		t.Fatalf("asked for everything, %d bytes let go; want %d", got, 2*ext)
	}
	if st := e.s.ReadCacheStats(); st.Extents != 1 || mem.outstanding() != 0 {
		t.Fatalf("after reclaiming all: %+v, %d buffers out; want only the store's extent, none out", st, mem.outstanding())
	}
	if got := e.s.ReclaimReadCache(1 << 30); got != 0 {
		t.Fatalf("with nothing of the allocator's cached, %d bytes let go", got)
	}
	for i := range bodies {
		read(i)
	}
}
