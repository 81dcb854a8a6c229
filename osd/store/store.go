package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is one OSD's Pebble database. It is safe for concurrent use; see
// the package comment for the locking rules.
type Store struct {
	opts Options
	db   *pebble.DB
	disk *diskWatch // DiskStall's

	// closeMu is held shared by every operation while it touches db and
	// exclusively by Close, so Close waits for in-flight operations and none
	// starts on a closed db.
	closeMu sync.RWMutex
	closed  bool

	// pgs holds each PG's writer lock, which serialises the writers of one
	// PG (Apply, TrimLog, SetPGLast, InstallObject, RemoveObject): they
	// read-modify-write the PG record, and an object's key maps to exactly
	// one PG, so the lock also orders writes to one object.
	pgs struct {
		sync.Mutex
		m map[uint32]*pgState
	}

	// bucketMu is held shared around every commit that adds or removes an
	// object, and exclusively by bucket creation and deletion. That makes
	// "the bucket exists" stable across an object commit, so a put racing a
	// bucket deletion either commits before the purge (and is purged) or
	// sees the bucket gone. Order: a PG lock, then bucketMu.
	bucketMu sync.RWMutex
	// knownBuckets holds names whose bucket record exists, so an object
	// commit need not look the record up. Only holders of bucketMu
	// exclusively create or delete records, so under bucketMu (either
	// mode) an entry is true; entries are added under it and removed by
	// the exclusive holders. Missing buckets are not cached.
	knownBuckets sync.Map

	// ids hands out data ids. Ids below mark were made durable before use,
	// so a reopened store never hands out an id a head may reference.
	ids struct {
		sync.Mutex
		next, mark uint64
	}

	// inlineMax: objects up to this size are written in the head's batch
	// (one synced commit, no pending record); larger ones take the two-phase
	// path. chunkBatchBytes bounds one unsynced chunk batch.
	inlineMax       int
	chunkBatchBytes int

	// files holds the data files of large objects (datafile.go).
	files dataFiles
	// keep holds objects being read in pieces and keeps the versions an
	// overwrite or delete replaced under their readers (keep.go).
	keep keeper
	// res is the reserve kept for a full disk (space.go).
	res *reserve
	// lastSpace is Space's last measure, for RecentSpace; measuring is
	// set while a RecentSpace measures anew.
	lastSpace atomic.Pointer[spaceMeasure]
	measuring atomic.Bool

	counters struct {
		puts, deletes, readBytes, writtenBytes, corruptions, garbageCollected atomic.Int64
		spaceMeasures, bodyCRCBytes, pgsRemoved                               atomic.Int64
		readCRCBytes, uncheckedReadBytes                                      atomic.Int64
		keepRefused                                                           atomic.Int64
	}
}

// idReserve is how many data ids one synced write of the high-water mark
// reserves.
const idReserve = 1 << 12

// Open opens (creating if needed) the store in opts.Dir, and removes the
// chunks of puts that a crash interrupted before their head was committed.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := opts.fs
	if fs == nil {
		fs = vfs.Default
	}
	disk := &diskWatch{log: opts.Logger, threshold: max(opts.DiskSlowThreshold, 0)}
	opened := false
	if opts.DiskSlowThreshold > 0 {
		fs, disk.checks = vfs.WithDiskHealthChecks(fs, opts.DiskSlowThreshold, nil, disk.note)
		fs = readWatchFS{fs, disk}
		defer func() {
			if !opened {
				disk.checks.Close()
			}
		}()
	}
	if err := mkdirDurable(fs, opts.Dir); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", opts.Dir, err)
	}
	res := &reserve{fs: fs, path: fs.PathJoin(opts.Dir, reserveName)}
	sp := res.space(opts.Dir)
	res.size = reserveSize(opts.ReserveBytes, sp.Total)
	if opts.MemTableSize == 0 {
		opts.MemTableSize = memTableFor(sp.Total)
	}
	log := opts.Logger
	res.onChange = func(held bool) {
		if held {
			log.Info("store: the reserve is made again", "bytes", res.size)
		} else {
			log.Warn("store: the data disk is full: released the reserve so that deletes and restarts work", "bytes", res.size)
		}
	}
	if err := res.open(sp); err != nil {
		return nil, err
	}
	cache := pebble.NewCache(opts.CacheSize)
	// The DB takes its own reference; dropping ours means Close frees it.
	defer cache.Unref()
	po := pebbleOptions(opts, cache)
	// Pebble's first ENOSPC releases the reserve and Pebble retries the
	// write, instead of failing a WAL write, which it cannot survive. Data
	// files use fs itself: a large put that does not fit fails on its own,
	// and must not eat the reserve meant for metadata.
	po.FS = vfs.OnDiskFull(fs, func() {
		if err := res.release(); err != nil {
			log.Error("store: release the reserve", "err", err)
		}
	})
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("store: open pebble in %s: %w", opts.Dir, err)
	}
	s := &Store{
		opts:            opts,
		db:              db,
		res:             res,
		inlineMax:       opts.ChunkSize,
		chunkBatchBytes: 4 << 20,
		disk:            disk,
	}
	s.pgs.m = make(map[uint32]*pgState)
	if err := s.openDataFiles(fs); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := s.recover(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	s.startReaper()
	opened = true
	return s, nil
}

// recover loads the data-id mark and collects garbage: every 'W' (pending)
// record names a data id no head references. An empty value: chunks of a
// put whose head batch (which deletes the record) never committed.
// pendingFile: a data file that was pooled, written by such a put, or
// killed by an overwrite or delete whose reaping the crash cut short.
func (s *Store) recover(ctx context.Context) error {
	v, closer, err := s.db.Get(keyIDs)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		s.ids.next, s.ids.mark = 1, 1
	case err != nil:
		return fmt.Errorf("store: read data id mark: %w", err)
	default:
		mark, derr := decodeSealedUint64(v)
		closer.Close()
		if derr != nil {
			return corrupt("", "", "data id mark: %v", derr)
		}
		s.ids.next, s.ids.mark = mark, mark
	}

	lo := []byte{nsPending}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return fmt.Errorf("store: scan pending puts: %w", err)
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	var files []uint64
	for it.First(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := it.Key()
		if len(k) != 9 {
			s.opts.Logger.Warn("store: dropping malformed pending record", "key", fmt.Sprintf("%x", k))
			if err := b.Delete(k, nil); err != nil {
				return fmt.Errorf("store: collect pending record: %w", err)
			}
			continue
		}
		id := binary.BigEndian.Uint64(k[1:])
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("store: scan pending puts: %w", err)
		}
		if !bytes.Equal(val, pendingFile) {
			// Chunks of an interrupted put; an unknown value is treated as both.
			lo, hi := dataSpan(id)
			if err := b.DeleteRange(lo, hi, nil); err != nil {
				return fmt.Errorf("store: collect data %d: %w", id, err)
			}
			if bytes.Equal(val, pendingChunks) {
				if err := b.Delete(k, nil); err != nil {
					return fmt.Errorf("store: collect pending record: %w", err)
				}
				n++
				continue
			}
		}
		// A data file (pooled, being written or dead): removeDataFiles
		// deletes the record after the file's removal is durable.
		files = append(files, id)
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: scan pending puts: %w", err)
	}
	if !b.Empty() {
		if err := b.Commit(pebble.Sync); err != nil {
			return fmt.Errorf("store: collect %d interrupted puts: %w", n, err)
		}
	}
	if len(files) > 0 {
		// A file that cannot be removed keeps its record, for the next Open:
		// garbage must not keep the OSD from starting.
		if err := s.removeDataFiles(files, pebble.Sync); err != nil {
			s.opts.Logger.Warn("store: remove unreferenced data files; the next Open retries", "count", len(files), "err", err)
		}
		s.files.removed.Store(0)
	}
	if n+len(files) == 0 {
		return nil
	}
	s.counters.garbageCollected.Add(int64(n + len(files)))
	s.opts.Logger.Info("store: removed the data of interrupted puts and deletes", "chunks", n, "files", len(files))
	return nil
}

// Close closes the store, waiting for in-flight operations. The first call
// returns Pebble's close error; later calls return ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if err := s.closeDataFiles(); err != nil {
		s.opts.Logger.Warn("store: remove unused data files at close; Open will retry", "err", err)
	}
	err := s.db.Close()
	if s.disk.checks != nil {
		s.disk.checks.Close() // stops its goroutine; nothing to report
	}
	if err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// enter admits an operation; leave must follow. Operations that yield to
// the caller (the iterator methods) leave before each yield, so a consumer
// that calls Close from inside a loop cannot deadlock.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) leave() { s.closeMu.RUnlock() }

// pgState is one PG's writer lock and, under it, a cache of the PG
// record: only the PG's writers change the record, so while the lock is
// held the cached copy is the stored one, and Apply need not look it up in
// Pebble on every op. Any failed write drops the cache (the commit may or
// may not have happened); the next writer reads the record again.
type pgState struct {
	mu     sync.Mutex
	info   pgInfo
	cached bool
}

// lockPG locks one PG's writers and returns its state; unlock st.mu.
func (s *Store) lockPG(pg uint32) *pgState {
	s.pgs.Lock()
	st := s.pgs.m[pg]
	if st == nil {
		st = new(pgState)
		s.pgs.m[pg] = st
	}
	s.pgs.Unlock()
	st.mu.Lock()
	return st
}

// pgRecord returns the PG record, from the cache when it holds it.
// REQUIRES: st.mu held.
func (s *Store) pgRecord(st *pgState, pg uint32) (pgInfo, error) {
	if st.cached {
		return st.info, nil
	}
	info, err := s.pgInfoOf(s.latest(), pg)
	if err != nil {
		return pgInfo{}, err
	}
	st.info, st.cached = info, true
	return info, nil
}

// setPGRecord records the outcome of a write of the PG record: the value
// committed, or (ok false) that the write failed and the cache is unknown.
// REQUIRES: st.mu held.
func (st *pgState) setPGRecord(info pgInfo, ok bool) {
	st.info, st.cached = info, ok
}

// newDataID returns a data id never handed out before, in this process or
// any earlier one. Every idReserve ids it makes a new mark durable first.
func (s *Store) newDataID() (uint64, error) {
	s.ids.Lock()
	defer s.ids.Unlock()
	if s.ids.next >= s.ids.mark {
		mark := s.ids.next + idReserve
		if err := s.db.Set(keyIDs, appendSealedUint64(nil, mark), pebble.Sync); err != nil {
			return 0, fmt.Errorf("store: reserve data ids: %w", err)
		}
		s.ids.mark = mark
	}
	id := s.ids.next
	s.ids.next++
	return id, nil
}

// view is one consistent, point-in-time read of the whole store: a Pebble
// iterator whose bounds move between namespaces (SetBounds keeps the
// iterator's view), so a head and its chunks, or a PG record and its log,
// are always read from the same state.
type view struct {
	it *pebble.Iterator
}

func (s *Store) newView() (*view, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("store: new iterator: %w", err)
	}
	return &view{it: it}, nil
}

func (v *view) close() error { return v.it.Close() }

// get returns the value of key, valid until the view moves again. It seeks
// with SeekPrefixGE, which (the default Split being the whole key) matches
// only key itself and consults the bloom filters.
func (v *view) get(key []byte) ([]byte, bool, error) {
	v.it.SetBounds(nil, nil)
	if !v.it.SeekPrefixGE(key) || !bytes.Equal(v.it.Key(), key) {
		return nil, false, v.it.Error()
	}
	val, err := v.it.ValueAndErr()
	if err != nil {
		return nil, false, err
	}
	return val, true, nil
}

// getter reads single keys: a view (one point in time for all its reads) or
// latest.
type getter interface {
	get(key []byte) ([]byte, bool, error)
}

// latest reads each key with db.Get from the latest state, which is cheaper
// than a view (no merging iterator to build; Get stops at the first level
// holding the key). Writers use it where their locks keep what they read
// from changing under them (the PG lock, bucketMu), so a point in time
// across reads adds nothing.
type latest struct {
	db  *pebble.DB
	buf []byte
}

// get returns key's value, valid until the next get.
func (l *latest) get(key []byte) ([]byte, bool, error) {
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	l.buf = append(l.buf[:0], v...)
	return l.buf, true, closer.Close()
}

func (s *Store) latest() *latest { return &latest{db: s.db} }

// scan positions the view on the first key of [lo, hi) and returns whether
// there is one; walk on with v.it.Next.
func (v *view) scan(lo, hi []byte) bool {
	v.it.SetBounds(lo, hi)
	return v.it.First()
}

// headOf reads and decodes one object's head through v.
func (s *Store) headOf(v getter, bucket, key string) (*head, bool, error) {
	val, ok, err := v.get(headKey(bucket, key))
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("store: read head %q/%q: %w", bucket, key, err)
		}
		return nil, false, err
	}
	h, err := decodeHead(val)
	if err != nil {
		s.counters.corruptions.Add(1)
		return nil, false, corrupt(bucket, key, "head: %v", err)
	}
	return h, true, nil
}

// bucketKnown is bucketExists for object commits, through knownBuckets.
// REQUIRES: bucketMu held, in either mode.
func (s *Store) bucketKnown(v getter, bucket string) (bool, error) {
	if _, ok := s.knownBuckets.Load(bucket); ok {
		return true, nil
	}
	exists, err := s.bucketExists(v, bucket)
	if exists {
		s.knownBuckets.Store(bucket, struct{}{})
	}
	return exists, err
}

// needBucket is nil if the bucket record is present, else ErrNoSuchBucket.
func (s *Store) needBucket(v getter, bucket string) error {
	exists, err := s.bucketExists(v, bucket)
	if err == nil && !exists {
		err = ErrNoSuchBucket
	}
	return err
}

// bucketExists reports whether the bucket record is present.
func (s *Store) bucketExists(v getter, bucket string) (bool, error) {
	_, ok, err := v.get(bucketKey(bucket))
	if err != nil {
		return false, fmt.Errorf("store: read bucket %q: %w", bucket, err)
	}
	return ok, nil
}

// pgInfoOf reads a PG record; an unknown PG has zero versions.
func (s *Store) pgInfoOf(v getter, pg uint32) (pgInfo, error) {
	val, ok, err := v.get(pgKey(pg))
	if err != nil {
		return pgInfo{}, fmt.Errorf("store: read pg %d: %w", pg, err)
	}
	if !ok {
		return pgInfo{}, nil
	}
	g, err := decodePGInfo(val)
	if err != nil {
		s.counters.corruptions.Add(1)
		return pgInfo{}, corrupt("", "", "pg %d record: %v", pg, err)
	}
	return g, nil
}

// withView runs fn on a fresh view and closes it.
func (s *Store) withView(fn func(v *view) error) error {
	v, err := s.newView()
	if err != nil {
		return err
	}
	err = fn(v)
	if cerr := v.close(); err == nil && cerr != nil {
		err = fmt.Errorf("store: iterator: %w", cerr)
	}
	return err
}

// ChunkSize is the size of the chunks the store splits objects into
// (Options.ChunkSize): chunk CRCs of that size (CheckOptions.ChunkCRCs)
// spare it a pass over a put's body.
func (s *Store) ChunkSize() int { return s.opts.ChunkSize }
