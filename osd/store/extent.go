package store

// Reads of data files: extents and the cache of verified extents.
//
// An extent is bytes of one data file read with O_DIRECT into aligned
// memory and checked against the chunks' CRC32Cs once. ReadRange copies
// what the caller asked for out of one; ReadShared lends it, so the OSD
// sends a get's bytes from the very memory the device wrote them into.
//
// The cache's extents may live in memory of the OSD's choosing
// (Options.ReadCacheAlloc): on RDMA, memory registered with the public
// messenger's transport, so that a get is sent from it with no copy there
// either.
//
// Whole objects of up to cacheMaxObject bytes stay in a bounded LRU of
// extents keyed by data id (readCache). A data file never changes and its
// id is never reused, so an entry can never be stale: an overwrite or a
// delete names another file, or none, and a reader whose view still names
// the old one is right to get the old bytes. A cached read costs no system
// call, no copy and no CRC pass.
//
// Why not the page cache, as before: a page-cache read costs a copy per
// byte (0.3 CPU-s per GB of 4 MiB gets in bench obj's profile, a third of
// the OSD's CPU), and the chunk CRC pass on every read another 0.1. Plain
// O_DIRECT reads remove the copy but make every get a device read, which
// caps gets at the disk's read rate (and made three-OSD gets 20-30%
// slower when they were tried alone). The cache keeps what the page cache
// gave, re-reads at memory speed, without the copy or the CRC.
//
// Measured (bench obj, 4 MiB, one OSD, load 4.6-5.8 on two cores): gets
// of a working set the cache holds ran 2.3-3.0 GB/s at 0.49-0.63 CPU-s
// per GB, against 1.7-2.1 GB/s at 0.78-0.93 through the page cache.
//
// The costs: a working set larger than the cache goes to the disk where a
// page cache as large as free memory held it (three OSDs after a put row:
// 1.36 GB/s of gets against 1.76); and a chunk damaged on disk after its
// object was cached is found only once the extent is evicted (a page
// cache hides it the same way), while readers that go to the disk
// (ReadRange) find it at once.

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/osdpb"
)

const (
	// defaultReadCacheBytes bounds the cache of verified extents. Ceph's
	// BlueStore keeps 1-3 GiB per OSD; half a GiB holds the working set of
	// bench obj's 4 MiB gets (64 objects) with room to spare.
	defaultReadCacheBytes = 512 << 20
	// cacheMaxObject: larger objects are read a range at a time and not
	// cached (one would evict many small ones, and clients read them in
	// windows of 8 MiB anyway).
	cacheMaxObject = 16 << 20
)

// extent is bytes [base, base+len(b)) of data file id, every chunk that
// lies wholly in them checked unless unchecked is set (a read for a reader
// that checks the bytes itself, ReadOptions.Unchecked). It is immutable
// once made; refs counts its holders (the cache is one), and the last
// release pools its memory.
type extent struct {
	id   uint64
	base uint64
	b    []byte
	// b lies in mem, the store's aligned allocation pooled by class, or
	// in buf, from Options.ReadCacheAlloc (newExtent).
	mem  *[]byte
	buf  *wire.Buffer
	refs atomic.Int32
	// wholeOK: b holds the whole object and it matched the object's
	// CRC32C too (chunkwise, see checkWholeFile).
	wholeOK bool
	// unchecked: the chunks were read but not checked against their
	// CRC32Cs; only readers that check the bytes themselves get them.
	unchecked bool
	elem      *list.Element // in readCache.lru, while cached
}

func (x *extent) ref() { x.refs.Add(1) }

func (x *extent) release() {
	switch n := x.refs.Add(-1); {
	case n == 0:
		if x.buf != nil {
			x.buf.Release()
		} else {
			putAligned(x.mem)
		}
		x.mem, x.buf, x.b = nil, nil, nil
	case n < 0:
		panic("store: extent released more times than referenced")
	}
}

// Shared is bytes of an object that ReadShared lends: B is valid until
// Release, and must not be written to. Release once.
type Shared struct {
	B []byte
	// CRC, when HasCRC, is the CRC32C B must have, combined from the
	// CRC32Cs the store recorded for its chunks when they were written
	// (B starts on a chunk boundary and ends on one or at the object's
	// end), so that nobody need read B to know it.
	CRC    uint32
	HasCRC bool
	// Unchecked: B came from the disk (or the cache) without being
	// checked against those CRC32Cs (ReadOptions.Unchecked): the reader
	// must check it against CRC.
	Unchecked bool
	x         *extent
}

// ReadOptions tune ReadShared.
type ReadOptions struct {
	// Alloc gives the memory an object in Pebble (a small one) is read
	// into: Alloc(n)'s result, n bytes; nil: a new slice.
	Alloc func(n int) []byte
	// Unchecked is for a reader that checks the bytes against
	// Shared.CRC itself (the OSD's client, end to end): a data file's
	// chunks are then not checked here (Stats.UncheckedReadBytes), and
	// the bytes are lent with Unchecked set. It applies to a range of a
	// data file whose CRC32C follows from its chunks' (HasCRC); other
	// ranges are checked as without it. A checked reader never gets an
	// unchecked extent from the cache.
	Unchecked bool
	// Recheck is for a reader that found bytes it was lent damaged: the
	// object's cached extent is dropped (it may be what was damaged, in
	// memory, after it was checked), and a data file is read from the
	// disk again, checked (and cached anew). Unchecked is ignored.
	Recheck bool
	// Want is the version of the object a reader in windows began on
	// (its size, modification time and CRC32C, from its first window's
	// meta): if an overwrite or delete replaced it since, and the store
	// keeps it for that reader (Options.KeepReplacedFor), the range is
	// read from it. Otherwise the object as it is now answers, and the
	// reader sees from its meta that it changed.
	Want *osdpb.ObjectMeta
}

// want is o's Want, nil for no options.
func (o *ReadOptions) want() *osdpb.ObjectMeta {
	if o == nil {
		return nil
	}
	return o.Want
}

// Release returns the bytes to the store.
func (sh Shared) Release() {
	if sh.x != nil {
		sh.x.release()
	}
}

// Buffer wraps B for a message's payload: its last Release is sh's, and
// its Owner is that of the Options.ReadCacheAlloc buffer B lies in, if
// any, so that a transport recognises its own memory (a rendezvous over
// RDMA then sends B with no copy). The caller gives its reference to sh
// to the buffer.
func (sh Shared) Buffer() *wire.Buffer {
	wb := wire.NewExternalBuffer(sh.B, func(*wire.Buffer) { sh.Release() })
	if sh.x != nil && sh.x.buf != nil {
		wb.Owner = sh.x.buf.Owner
	}
	return wb
}

// cost is what x holds against the cache's limit: its whole allocation.
func (x *extent) cost() int64 {
	if x.buf != nil {
		return int64(cap(x.buf.B))
	}
	return int64(cap(*x.mem))
}

// Allocator gives the read cache its memory (Options.ReadCacheAlloc).
type Allocator interface {
	// AllocAligned returns a buffer with len(B) == n, B starting on a
	// 4 KiB boundary (an extent is read into it with O_DIRECT), and one
	// reference, which the store releases when the extent goes. cap(B)
	// is what the cache charges for it. An error makes the store use
	// its own memory for that extent: ErrAllocUnavailable silently,
	// others are counted (ReadCacheStats.AllocFailures) and the first
	// is logged.
	AllocAligned(n int) (*wire.Buffer, error)
}

// ErrAllocUnavailable is an Allocator's answer when it has no memory to
// give and that is not a failure: an OSD's before its messenger listens,
// or on a transport without registered memory.
var ErrAllocUnavailable = errors.New("store: the read cache's allocator has no memory to give")

// newExtent returns an extent of data file id from base, with n bytes of
// memory aligned for O_DIRECT and one reference. With lend (an extent
// for the cache), the memory comes from Options.ReadCacheAlloc where it
// gives any (registered memory on an RDMA OSD, which a get's reply is
// then sent from with no copy), else from the store's own pool
// (getAligned). Extents read for one call alone (ranges, objects too
// large to cache) stay in the store's pool: fresh registered memory per
// read would cost more than the copy it saves.
func (s *Store) newExtent(id, base uint64, n int, lend bool) *extent {
	x := &extent{id: id, base: base}
	x.refs.Store(1)
	if a := s.opts.ReadCacheAlloc; lend && a != nil {
		buf, err := a.AllocAligned(n)
		if err == nil && (len(buf.B) < n || uintptr(unsafe.Pointer(unsafe.SliceData(buf.B)))%dataAlign != 0) {
			buf.Release()
			err = fmt.Errorf("store: the read cache's allocator returned %d bytes at %p, want %d on a %d-byte boundary",
				len(buf.B), unsafe.SliceData(buf.B), n, dataAlign)
		}
		if err == nil {
			x.buf, x.b = buf, buf.B[:n]
			return x
		}
		if !errors.Is(err, ErrAllocUnavailable) {
			c := &s.files.cache
			if c.allocFailures.Add(1) == 1 {
				s.opts.Logger.Info("store: the read cache's allocator failed; extents it cannot give are kept in ordinary memory (on RDMA a get from them copies)", "err", err)
			}
		}
	}
	x.b, x.mem = getAligned(n)
	return x
}

// Aligned memory for extents, by class: an extent is read into it with
// O_DIRECT, so it must start on a dataAlign boundary. Classes go by
// quarters of a power of two (4, 5, 6, 7, 8 MiB, ...), as msgr/wire's
// buffers: an extent costs the cache at most a quarter more than its
// size, where powers of two took up to twice it (a 4.5 MB object held
// 8 MiB, and the cache half of what it could).
//
// Memory given back is kept on free lists (up to freeLimit bytes), not in
// a sync.Pool: a GC empties a pool, and new memory costs far more than
// its allocation here, where the first touch of each page is a fault (on
// this project's VMs about 13 ms per 4 MiB extent, against 3 ms to read
// it with O_DIRECT once its pages exist). A cache that churns recycles
// what it evicts.
const (
	minAlignedShift = 12 // 4 KiB
	maxAlignedShift = 27 // 128 MiB; larger extents are not kept
	alignedSteps    = 4  // classes per doubling
	alignedClasses  = 1 + (maxAlignedShift-minAlignedShift)*alignedSteps
	freeLimit       = 64 << 20
)

var freeAligned struct {
	sync.Mutex
	bytes   int
	byClass [alignedClasses][]*[]byte
}

// alignedClass is the class of an allocation of n bytes, -1 past the
// largest.
func alignedClass(n int) int {
	if n <= 1<<minAlignedShift {
		return 0
	}
	shift := bits.Len(uint(n-1)) - 1 // 1<<shift < n <= 2<<shift
	if shift >= maxAlignedShift {
		return -1
	}
	step := 1 << shift / alignedSteps
	return 1 + (shift-minAlignedShift)*alignedSteps + (n-1<<shift+step-1)/step - 1
}

// alignedClassSize is the size of class c's allocations.
func alignedClassSize(c int) int {
	if c == 0 {
		return 1 << minAlignedShift
	}
	base := 1 << (minAlignedShift + (c-1)/alignedSteps)
	return base + ((c-1)%alignedSteps+1)*(base/alignedSteps)
}

// getAligned returns n bytes starting on a dataAlign boundary, in an
// allocation of their class; the bytes are not zeroed.
func getAligned(n int) (b []byte, mem *[]byte) {
	c := alignedClass(n)
	if c >= 0 {
		f := &freeAligned
		f.Lock()
		if l := f.byClass[c]; len(l) > 0 {
			mem = l[len(l)-1]
			f.byClass[c] = l[:len(l)-1]
			f.bytes -= cap(*mem)
		}
		f.Unlock()
		if mem != nil {
			return (*mem)[:n], mem
		}
	}
	size := n
	if c >= 0 {
		size = alignedClassSize(c)
	}
	raw := make([]byte, size+dataAlign)
	off := -int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))) & (dataAlign - 1)
	m := raw[off : off+size : off+size]
	return m[:n], &m
}

func putAligned(mem *[]byte) {
	if mem == nil {
		return
	}
	c := alignedClass(cap(*mem))
	if c < 0 || cap(*mem) != alignedClassSize(c) {
		return
	}
	f := &freeAligned
	f.Lock()
	if f.bytes+cap(*mem) <= freeLimit {
		f.byClass[c] = append(f.byClass[c], mem)
		f.bytes += cap(*mem)
	}
	f.Unlock()
}

// readCache is an LRU of whole-object extents by data id, bounded in bytes
// (of their allocations).
type readCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	// lentSize is the part of size in memory from
	// Options.ReadCacheAlloc, which reclaim gives back.
	lentSize int64
	byID     map[uint64]*extent
	lru      list.List // of *extent, most recent first
	hits     atomic.Int64
	miss     atomic.Int64
	// evictions counts extents the LRU let go to make room (not those
	// of dead data files, which drop forgets).
	evictions atomic.Int64
	// allocFailures counts extents kept in the store's memory because
	// Options.ReadCacheAlloc failed (newExtent).
	allocFailures atomic.Int64
	// reclaimed counts extents given back to the allocator's owner
	// (ReclaimReadCache).
	reclaimed atomic.Int64
}

func (c *readCache) init(limit int64) {
	c.limit = limit
	c.byID = make(map[uint64]*extent)
}

// get returns the cached extent of id, with a reference for the caller:
// none (a miss) for a checked caller when that extent is unchecked.
func (c *readCache) get(id uint64, checked bool) *extent {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.byID[id]
	if x == nil || checked && x.unchecked {
		c.miss.Add(1)
		return nil
	}
	c.lru.MoveToFront(x.elem)
	x.ref()
	c.hits.Add(1)
	return x
}

// add caches x (which the caller holds) unless an extent of its id is
// cached already, and returns the one cached (with a reference for the
// caller, who gave up its reference to x if it is not that one).
func (c *readCache) add(x *extent) *extent {
	cost := x.cost()
	if cost > c.limit {
		return x
	}
	c.mu.Lock()
	old := c.byID[x.id]
	if old != nil && (!old.unchecked || x.unchecked) {
		// Another reader loaded it meanwhile: share that one.
		old.ref()
		c.lru.MoveToFront(old.elem)
		c.mu.Unlock()
		x.release()
		return old
	}
	if old != nil {
		// x is checked and old is not: x takes its place, so that
		// checked readers find it (and unchecked ones lose nothing).
		c.removeLocked(old)
		defer old.release()
	}
	x.ref() // the cache's
	x.elem = c.lru.PushFront(x)
	c.byID[x.id] = x
	c.size += cost
	if x.buf != nil {
		c.lentSize += cost
	}
	var evicted []*extent
	for c.size > c.limit {
		e := c.lru.Back()
		v := e.Value.(*extent)
		c.removeLocked(v)
		evicted = append(evicted, v)
	}
	c.evictions.Add(int64(len(evicted)))
	c.mu.Unlock()
	for _, v := range evicted {
		v.release()
	}
	return x
}

func (c *readCache) removeLocked(x *extent) {
	c.lru.Remove(x.elem)
	delete(c.byID, x.id)
	c.size -= x.cost()
	if x.buf != nil {
		c.lentSize -= x.cost()
	}
}

// drop forgets the extents of dead data files: their memory goes back as
// soon as their last reader is done, not when the LRU gets to them.
func (c *readCache) drop(ids []uint64) {
	var gone []*extent
	c.mu.Lock()
	for _, id := range ids {
		if x := c.byID[id]; x != nil {
			c.removeLocked(x)
			gone = append(gone, x)
		}
	}
	c.mu.Unlock()
	for _, x := range gone {
		x.release()
	}
}

// reclaim evicts the least recently used extents in memory from
// Options.ReadCacheAlloc until need bytes of it are out of the cache, and
// returns those bytes: each comes back to the allocator once its last
// reader is done. The store's own memory stays: it is not what the
// allocator's owner asked for.
func (c *readCache) reclaim(need int64) int64 {
	var gone []*extent
	var freed int64
	c.mu.Lock()
	for e := c.lru.Back(); e != nil && freed < need && c.lentSize > 0; {
		x := e.Value.(*extent)
		e = e.Prev()
		if x.buf == nil {
			continue
		}
		c.removeLocked(x)
		gone = append(gone, x)
		freed += x.cost()
	}
	c.mu.Unlock()
	c.reclaimed.Add(int64(len(gone)))
	for _, x := range gone {
		x.release()
	}
	return freed
}

// clear empties the cache when the store closes: memory from
// Options.ReadCacheAlloc goes back to its allocator as soon as the
// extents' last readers are done.
func (c *readCache) clear() {
	c.mu.Lock()
	var gone []*extent
	for _, x := range c.byID {
		c.removeLocked(x)
		gone = append(gone, x)
	}
	c.mu.Unlock()
	for _, x := range gone {
		x.release()
	}
}

// readFileAt fills b from offset at of f: with O_DIRECT when b, at and
// len(b) are aligned and the filesystem takes it, else through the page
// cache. n short of len(b) means the file ended there.
func (s *Store) readFileAt(f vfs.File, b []byte, at uint64) (int, error) {
	if fd := f.Fd(); fd != vfs.InvalidFd && !s.files.buffered.Load() && len(b) > 0 {
		if at%dataAlign != 0 || len(b)%dataAlign != 0 || uintptr(unsafe.Pointer(&b[0]))%dataAlign != 0 {
			s.files.bounced.Add(1)
		} else {
			// By its fd, past readWatchFS: timed here.
			token := s.disk.begin(time.Now(), "read data file")
			n, supported, err := readDirect(int(fd), b, int64(at))
			s.disk.end(token)
			if supported {
				return n, err
			}
			if !s.files.buffered.Swap(true) {
				s.opts.Logger.Info("store: the data directory does not take O_DIRECT; data files are read and written through the page cache", "dir", s.files.dir)
			}
		}
	}
	n, err := f.ReadAt(b, int64(at))
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// loadExtent reads chunks [first, last] of h's data file, rounded out to
// dataAlign (the file is padded to it), and checks each chunk's CRC32C
// unless unchecked (the extent is then marked so); a load of the whole
// object checks the object's CRC32C too (from the chunks' CRC32Cs, no
// pass over the bytes), and a failure of that alone leaves the extent
// usable for ranges (wholeOK false). A mismatch, or a file too short for
// the chunks, is a *CorruptError.
//
// REQUIRES: the caller is in a read epoch that covers h's file.
func (s *Store) loadExtent(bucket, key string, h *head, first, last uint32, lend, unchecked bool) (*extent, error) {
	bad := func(n int64, format string, args ...any) error {
		s.counters.corruptions.Add(1)
		return &CorruptError{Bucket: bucket, Key: key, Chunk: n, Detail: fmt.Sprintf(format, args...)}
	}
	f, err := s.files.fs.Open(s.files.dataPath(h.dataID))
	if err != nil {
		if isNotExist(err) {
			return nil, bad(-1, "data file %016x missing", h.dataID)
		}
		return nil, fmt.Errorf("open data file %016x: %w", h.dataID, err)
	}
	defer f.Close()
	cs, size := uint64(h.chunkSize), h.meta.GetSize()
	lo, hi := uint64(first)*cs, min(uint64(last+1)*cs, size)
	base := lo &^ (dataAlign - 1)
	top := uint64(paddedLen(int(hi)))
	x := s.newExtent(h.dataID, base, int(top-base), lend)
	b := x.b
	n, err := s.readFileAt(f, b, base)
	if err == nil && base+uint64(n) < hi {
		at := base + uint64(n)
		err = bad(int64(at/cs), "data file %016x is short: it ends at %d, chunk %d needs %d", h.dataID, at, at/cs, min((at/cs+1)*cs, size))
	} else if err != nil {
		err = fmt.Errorf("read data file %016x: %w", h.dataID, err)
	}
	if err == nil && unchecked {
		s.counters.uncheckedReadBytes.Add(int64(hi - lo))
	} else if err == nil {
		s.counters.readCRCBytes.Add(int64(hi - lo))
	}
	for c := first; err == nil && !unchecked && c <= last; c++ {
		at := uint64(c)*cs - base
		if sum := crc32c(b[at : at+uint64(h.chunkLen(c))]); sum != h.crcs[c] {
			err = bad(int64(c), "chunk crc32c %08x, head says %08x (data file %016x)", sum, h.crcs[c], h.dataID)
		}
	}
	if err != nil {
		x.release()
		return nil, err
	}
	x.unchecked = unchecked
	x.b = b[:hi-base]
	if lo == 0 && hi == size {
		x.wholeOK = s.checkWholeFile(bucket, key, h, bad) == nil
	}
	return x, nil
}

// checkWholeFile checks a whole-object read of a data file against the
// client's CRC32C, as for chunks in Pebble (it catches a chunking bug that
// stored the wrong bytes). The chunks matched their CRC32Cs, so the
// object's follows from those without another pass over the bytes.
func (s *Store) checkWholeFile(bucket, key string, h *head, bad func(int64, string, ...any) error) error {
	if got := crc32cOfChunks(h.crcs, h.chunkSize, h.meta.GetSize()); got != h.meta.GetCrc32C() {
		return bad(-1, "object crc32c %08x, meta says %08x", got, h.meta.GetCrc32C())
	}
	return nil
}

// fileExtent returns an extent that holds bytes [off, end) of h's data
// file, with a reference for the caller: from the cache when cached is
// set and the object is small enough to keep there, else read for this
// call alone. Its chunks are checked unless unchecked is set; a checked
// caller never gets an unchecked extent (one cached is read again, and
// the checked one replaces it). A whole-object range of an object whose
// chunks match but whose CRC32C does not is a *CorruptError.
//
// REQUIRES: the caller is in a read epoch that covers h's file.
func (s *Store) fileExtent(bucket, key string, h *head, off, end uint64, cached, unchecked bool) (*extent, error) {
	cs, size := uint64(h.chunkSize), h.meta.GetSize()
	whole := off == 0 && end == size
	c := &s.files.cache
	var x *extent
	if cached && size <= cacheMaxObject && c.limit > 0 {
		if x = c.get(h.dataID, !unchecked); x == nil {
			// A damaged chunk fails only the ranges that touch it:
			// then the load below reads just the range's chunks.
			if y, err := s.loadExtent(bucket, key, h, 0, uint32((size-1)/cs), true, unchecked); err == nil {
				x = s.cacheExtent(y)
			}
		}
	}
	if x == nil {
		var err error
		if x, err = s.loadExtent(bucket, key, h, uint32(off/cs), uint32((end-1)/cs), false, unchecked); err != nil {
			return nil, err
		}
	}
	if whole && !x.wholeOK {
		x.release()
		s.counters.corruptions.Add(1)
		return nil, &CorruptError{Bucket: bucket, Key: key, Chunk: -1, Detail: fmt.Sprintf("object crc32c %08x, meta says %08x",
			crc32cOfChunks(h.crcs, h.chunkSize, size), h.meta.GetCrc32C())}
	}
	return x, nil
}

// cacheExtent caches x, a whole-object extent the caller holds, and
// returns the extent cached for its file (x or one another reader cached
// first) with a reference for the caller. A file killed since the caller's
// view was taken is read but not kept: killDataFiles dropped its extent
// before this one came, and nothing else would before the LRU got to it.
func (s *Store) cacheExtent(x *extent) *extent {
	x = s.files.cache.add(x)
	// Checked after the add: a kill is on the dead list before its drop,
	// so the kill either drops this extent or is seen here.
	if s.files.isDead(x.id) {
		s.files.cache.drop([]uint64{x.id})
	}
	return x
}

// ReadShared is ReadRange that lends the bytes instead of copying them:
// an object in a data file comes from the cache of verified extents (read
// into it with O_DIRECT on a miss, see extent.go), so the caller can send
// it without a copy; Release gives it back. Other objects (small ones, in
// Pebble) are appended to opts.Alloc(n)'s result, and Release does
// nothing. The checks and the consistency are ReadRange's, but for what
// opts.Unchecked leaves to the caller.
func (s *Store) ReadShared(ctx context.Context, bucket, key string, off, length int64, opts ReadOptions) (*osdpb.ObjectMeta, Shared, error) {
	var sh Shared
	meta, err := s.readRange(ctx, bucket, key, off, length, &opts,
		func(v *view, h *head, lo, hi uint64) error {
			if lo == hi {
				return nil
			}
			var dst []byte
			if opts.Alloc != nil {
				dst = opts.Alloc(int(hi - lo))[:0]
			}
			b, err := s.readChunks(v, bucket, key, h, lo, hi, dst)
			sh.B = b
			return err
		},
		func(h *head, lo, hi uint64) error {
			crc, known := h.rangeCRC(lo, hi)
			if opts.Recheck {
				s.files.cache.drop([]uint64{h.dataID})
			}
			x, err := s.fileExtent(bucket, key, h, lo, hi, true, opts.Unchecked && known && !opts.Recheck)
			if err != nil {
				return err
			}
			sh = Shared{B: x.b[lo-x.base : hi-x.base : hi-x.base], CRC: crc, HasCRC: known, Unchecked: x.unchecked, x: x}
			return nil
		})
	if err != nil {
		return nil, Shared{}, err
	}
	return meta, sh, nil
}

// ReadCacheStats are the counters of the cache of verified extents.
type ReadCacheStats struct {
	Hits, Misses int64
	Bytes        int64 // held, in allocations
	Limit        int64 // Options.ReadCacheSize (0: off)
	Extents      int
	// Evictions counts extents let go to make room for others: a
	// working set larger than the cache shows here.
	Evictions int64
	// AllocFailures counts extents kept in the store's memory because
	// Options.ReadCacheAlloc failed.
	AllocFailures int64
	// Reclaimed counts extents let go because their allocator's owner
	// asked for its memory back (ReclaimReadCache): on RDMA, a transfer
	// that found the registered memory spent.
	Reclaimed int64
}

// ReclaimReadCache lets go of the least recently used cached extents held
// in memory from Options.ReadCacheAlloc until need bytes of it are out of
// the cache, and returns the bytes let go. The memory goes back to the
// allocator as each extent's last reader finishes. An OSD calls it when
// its RDMA transport finds its registered memory spent: a transfer, which
// may be what frees the extents being sent, comes before the cache.
func (s *Store) ReclaimReadCache(need int64) int64 {
	return s.files.cache.reclaim(need)
}

// ReadCacheStats reads the cache's counters.
func (s *Store) ReadCacheStats() ReadCacheStats {
	c := &s.files.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return ReadCacheStats{Hits: c.hits.Load(), Misses: c.miss.Load(), Bytes: c.size, Limit: max(c.limit, 0), Extents: len(c.byID),
		Evictions: c.evictions.Load(), AllocFailures: c.allocFailures.Load(), Reclaimed: c.reclaimed.Load()}
}
