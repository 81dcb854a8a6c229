package store

// Test hooks: reach under the API to damage or inspect stored bytes. They
// are compiled only into this package's tests.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// SetPurgePageForTest shrinks the bucket purge page and returns a restore.
func SetPurgePageForTest(n int) func() {
	old := purgePage
	purgePage = n
	return func() { purgePage = old }
}

func (s *Store) rawHead(bucket, key string) (*head, error) {
	v, closer, err := s.db.Get(headKey(bucket, key))
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeHead(v)
}

// CorruptChunkForTest flips one byte of a stored chunk, leaving its CRC.
func (s *Store) CorruptChunkForTest(bucket, key string, chunk uint32) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	k := chunkKey(h.dataID, chunk)
	v, closer, err := s.db.Get(k)
	if err != nil {
		return err
	}
	bad := bytes.Clone(v)
	closer.Close()
	bad[len(bad)-1] ^= 0x5a
	return s.db.Set(k, bad, pebble.Sync)
}

// CorruptHeadForTest flips one byte inside an object's head.
func (s *Store) CorruptHeadForTest(bucket, key string) error {
	k := headKey(bucket, key)
	v, closer, err := s.db.Get(k)
	if err != nil {
		return err
	}
	bad := bytes.Clone(v)
	closer.Close()
	bad[len(bad)/2] ^= 0x01
	return s.db.Set(k, bad, pebble.Sync)
}

// WritePendingForTest writes the chunks of a put and its pending record but
// no head: the state a crash between the two phases leaves.
func (s *Store) WritePendingForTest(ctx context.Context, size int) (uint64, error) {
	id, err := s.newDataID()
	if err != nil {
		return 0, err
	}
	body := bytes.Repeat([]byte{0xab}, size)
	h := &head{dataID: id, chunkSize: uint32(s.opts.ChunkSize)}
	h.chunks = uint32(chunkCount(uint64(size), h.chunkSize))
	return id, s.writeChunks(ctx, h, body)
}

// FlushForTest flushes memtables and compacts everything, so reads go
// through sstables and blob files.
func (s *Store) FlushForTest(ctx context.Context) error {
	if err := s.db.Flush(); err != nil {
		return err
	}
	return s.db.Compact(ctx, []byte{0}, []byte{0xff}, false)
}

// CheckIntegrityForTest walks the whole store: every head decodes, its
// chunks or its data file exist and verify, it has its PG index entry; no
// chunk or data file belongs to a data id no head references; no pending
// record remains but those of the data file pool and of dead files readers
// still hold; the counters match the heads. It first removes the dead files
// no reader holds, as the reaper would.
func (s *Store) CheckIntegrityForTest() error {
	s.files.reapMu.Lock()
	defer s.files.reapMu.Unlock()
	var errs []error
	if _, err := s.reapLocked(pebble.Sync); err != nil {
		errs = append(errs, err)
	}
	// Data ids that may have a 'W' record and a file without a head.
	unowned := map[uint64]bool{}
	s.files.pool.Lock()
	for s.files.pool.refilling {
		s.files.pool.refilled.Wait()
	}
	for _, pf := range s.files.pool.files {
		unowned[pf.id] = true
	}
	s.files.pool.Unlock()
	s.files.mu.Lock()
	for _, d := range s.files.dead {
		unowned[d.id] = true
	}
	s.files.mu.Unlock()
	// Kept versions (keep.go) are dead files whose removal waits for
	// their readers' holds to lapse.
	s.keep.mu.Lock()
	for _, v := range s.keep.kept {
		unowned[v.h.dataID] = true
	}
	for id := range s.keep.retiring {
		unowned[id] = true
	}
	s.keep.mu.Unlock()

	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	referenced := map[uint64]bool{}
	var cnt counters
	lo := []byte{nsHead}
	it.SetBounds(lo, prefixEnd(lo))
	type obj struct {
		bucket, key string
		h           *head
	}
	var heads []obj
	for ok := it.First(); ok; ok = it.Next() {
		k := bytes.Clone(it.Key()[1:])
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			errs = append(errs, fmt.Errorf("head key %q without separator", k))
			continue
		}
		h, err := decodeHead(it.Value())
		if err != nil {
			errs = append(errs, fmt.Errorf("head %q: %w", k, err))
			continue
		}
		heads = append(heads, obj{string(k[:i]), string(k[i+1:]), h})
		cnt.add(headCounters(h))
		if h.dataID != 0 {
			if referenced[h.dataID] {
				errs = append(errs, fmt.Errorf("data id %d referenced twice", h.dataID))
			}
			referenced[h.dataID] = true
		}
		if h.inFile && unowned[h.dataID] {
			errs = append(errs, fmt.Errorf("head %q names data file %d, which is pooled or dead", k, h.dataID))
		}
	}
	for _, o := range heads {
		if _, c, err := s.db.Get(pgIndexKey(o.h.pg, o.bucket, o.key)); err != nil {
			errs = append(errs, fmt.Errorf("%q/%q: pg index: %w", o.bucket, o.key, err))
		} else {
			c.Close()
		}
		if o.h.inFile {
			if err := s.checkDataFile(o.h); err != nil {
				errs = append(errs, fmt.Errorf("%q/%q: %w", o.bucket, o.key, err))
			}
			continue
		}
		for n := range o.h.chunks {
			v, c, err := s.db.Get(chunkKey(o.h.dataID, n))
			if err != nil {
				errs = append(errs, fmt.Errorf("%q/%q chunk %d: %w", o.bucket, o.key, n, err))
				continue
			}
			b, err := decodeChunk(v)
			if err == nil && len(b) != o.h.chunkLen(n) {
				err = fmt.Errorf("length %d, want %d", len(b), o.h.chunkLen(n))
			}
			c.Close()
			if err != nil {
				errs = append(errs, fmt.Errorf("%q/%q chunk %d: %w", o.bucket, o.key, n, err))
			}
		}
	}
	lo = []byte{nsData}
	it.SetBounds(lo, prefixEnd(lo))
	for ok := it.First(); ok; ok = it.Next() {
		if id := binary.BigEndian.Uint64(it.Key()[1:]); !referenced[id] {
			errs = append(errs, fmt.Errorf("chunk %x of unreferenced data id %d", it.Key(), id))
		}
	}
	lo = []byte{nsPending}
	it.SetBounds(lo, prefixEnd(lo))
	for ok := it.First(); ok; ok = it.Next() {
		id := binary.BigEndian.Uint64(it.Key()[1:])
		if !unowned[id] || !bytes.Equal(it.Value(), pendingFile) {
			errs = append(errs, fmt.Errorf("pending record %x (%x) remains", it.Key(), it.Value()))
		}
	}
	// Every file in the data directories is a head's, pooled or dead.
	for i := range dataFanout {
		dir := s.files.fs.PathJoin(s.files.dir, fmt.Sprintf("%02x", i))
		names, err := s.files.fs.List(dir)
		if isNotExist(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", dir, err))
			continue
		}
		for _, name := range names {
			id, err := strconv.ParseUint(name, 16, 64)
			if err != nil || len(name) != 16 || s.files.dataPath(id) != s.files.fs.PathJoin(dir, name) {
				errs = append(errs, fmt.Errorf("stray file %s in %s", name, dir))
				continue
			}
			if !unowned[id] && !referenced[id] {
				errs = append(errs, fmt.Errorf("orphan data file %s", s.files.dataPath(id)))
			}
		}
	}
	v, c, err := s.db.Get(keyCounters)
	var got counters
	if err == nil {
		got, err = decodeCounters(v)
		c.Close()
	} else if errors.Is(err, pebble.ErrNotFound) {
		err = nil
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("counters: %w", err))
	} else if got != cnt {
		errs = append(errs, fmt.Errorf("counters say %+v; heads say %+v", got, cnt))
	}
	return errors.Join(append(errs, it.Error())...)
}

// checkDataFile checks a file-backed head's file: its size and every chunk.
func (s *Store) checkDataFile(h *head) error {
	f, err := s.files.fs.Open(s.files.dataPath(h.dataID))
	if err != nil {
		return fmt.Errorf("data file %d: %w", h.dataID, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if want := paddedLen(int(h.meta.GetSize())); fi.Size() != int64(want) {
		return fmt.Errorf("data file %d has %d bytes, want %d (%d padded)", h.dataID, fi.Size(), want, h.meta.GetSize())
	}
	buf := make([]byte, h.chunkSize)
	for n := range h.chunks {
		b := buf[:h.chunkLen(n)]
		if _, err := f.ReadAt(b, int64(n)*int64(h.chunkSize)); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if crc32c(b) != h.crcs[n] {
			return fmt.Errorf("data file %d chunk %d: crc mismatch", h.dataID, n)
		}
	}
	for n := range h.chunks {
		if _, c, err := s.db.Get(chunkKey(h.dataID, n)); err == nil {
			c.Close()
			return fmt.Errorf("data id %d is in a file and has chunk %d too", h.dataID, n)
		}
	}
	return nil
}

// CorruptDataFileForTest flips one byte of an object's data file at off.
func (s *Store) CorruptDataFileForTest(bucket, key string, off int64) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	if !h.inFile {
		return fmt.Errorf("%q/%q is not in a data file", bucket, key)
	}
	f, err := s.files.fs.OpenReadWrite(s.files.dataPath(h.dataID), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Sync()
}

// TruncateDataFileForTest cuts an object's data file to size bytes.
func (s *Store) TruncateDataFileForTest(bucket, key string, size int) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	path := s.files.dataPath(h.dataID)
	old, err := s.files.fs.Open(path)
	if err != nil {
		return err
	}
	b := make([]byte, size)
	_, err = old.ReadAt(b, 0)
	old.Close()
	if err != nil {
		return err
	}
	f, err := s.files.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

// RemoveDataFileForTest removes an object's data file.
func (s *Store) RemoveDataFileForTest(bucket, key string) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	return s.files.fs.Remove(s.files.dataPath(h.dataID))
}

// DataFileIDForTest returns the data id of an object's file, 0 if the
// object's bytes are not in a file.
func (s *Store) DataFileIDForTest(bucket, key string) (uint64, error) {
	h, err := s.rawHead(bucket, key)
	if err != nil || !h.inFile {
		return 0, err
	}
	return h.dataID, nil
}

// DataFileExistsForTest reports whether data id's file exists.
func (s *Store) DataFileExistsForTest(id uint64) bool {
	_, err := s.files.fs.Stat(s.files.dataPath(id))
	return err == nil
}

// DataFileCountForTest counts the files in the data directories, less the
// pool's.
func (s *Store) DataFileCountForTest() (int, error) {
	s.files.pool.Lock()
	for s.files.pool.refilling {
		s.files.pool.refilled.Wait()
	}
	n := -len(s.files.pool.files)
	s.files.pool.Unlock()
	for i := range dataFanout {
		names, err := s.files.fs.List(s.files.fs.PathJoin(s.files.dir, fmt.Sprintf("%02x", i)))
		if isNotExist(err) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += len(names)
	}
	return n, nil
}

// WritePendingDataFileForTest writes a data file as a put does but no head:
// the state a crash between the file's sync and the head batch leaves.
func (s *Store) WritePendingDataFileForTest(size int) (uint64, error) {
	return s.writeDataFile(bytes.Repeat([]byte{0xcd}, size))
}

// PauseReaperForTest stops (true) or resumes (false) the removal of dead
// data files.
func (s *Store) PauseReaperForTest(paused bool) {
	s.files.mu.Lock()
	s.files.paused = paused
	s.files.mu.Unlock()
	if !paused {
		s.wakeReaper()
	}
}

// SetBeforeFileReadForTest installs a hook ReadRange runs between taking
// its view and reading a data file.
func (s *Store) SetBeforeFileReadForTest(fn func()) { s.files.beforeFileRead = fn }

// SetChunkBatchBytesForTest bounds the unsynced chunk batches of a put, so
// a test can make a put span many of them.
func (s *Store) SetChunkBatchBytesForTest(n int) { s.chunkBatchBytes = n }

// SetObjectCRCForTest rewrites an object's head, validly sealed, with a
// different whole-object CRC32C: what a chunking bug would store.
func (s *Store) SetObjectCRCForTest(bucket, key string, crc uint32) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	h.meta.Crc32C = crc
	v, err := appendHead(nil, h)
	if err != nil {
		return err
	}
	return s.db.Set(headKey(bucket, key), v, pebble.Sync)
}

// DirectIOForTest reports whether data files are written with O_DIRECT
// (false once the filesystem refused it).
func (s *Store) DirectIOForTest() bool { return !s.files.buffered.Load() }

// SetSpaceClockForTest replaces RecentSpace's clock and returns a restore.
func SetSpaceClockForTest(now func() time.Time) func() {
	old := spaceClock
	spaceClock = now
	return func() { spaceClock = old }
}

// HoldSpaceMeasureForTest makes RecentSpace behave as while another caller
// measures anew, until the returned release.
func (s *Store) HoldSpaceMeasureForTest() (release func()) {
	s.measuring.Store(true)
	return func() { s.measuring.Store(false) }
}

// SetRemovePageForTest shrinks the PG removal page and returns a restore.
func SetRemovePageForTest(n int) func() {
	old := removePage
	removePage = n
	return func() { removePage = old }
}

// CheckRequestIndexForTest checks that PG pg's request index and log
// agree: every index key names a log entry with that request id, and
// every logged request id is indexed.
func (s *Store) CheckRequestIndexForTest(pg uint32) error {
	return s.withView(func(v *view) error {
		logged := map[[2]uint64]version{}
		lp := logPrefix(pg)
		for ok := v.scan(lp, prefixEnd(lp)); ok; ok = v.it.Next() {
			e, err := s.logEntryAt(v, pg)
			if err != nil {
				return err
			}
			if e.Req != nil {
				logged[[2]uint64{e.Req.Client, e.Req.Tid}] = versionOf(e.Version)
			}
		}
		indexed := map[[2]uint64]version{}
		rp := reqPrefix(pg)
		for ok := v.scan(rp, prefixEnd(rp)); ok; ok = v.it.Next() {
			k := v.it.Key()
			ver, err := decodeReqVersion(v.it.Value())
			if err != nil {
				return err
			}
			indexed[[2]uint64{binary.BigEndian.Uint64(k[5:]), binary.BigEndian.Uint64(k[13:])}] = ver
		}
		if !maps.Equal(logged, indexed) {
			return fmt.Errorf("pg %d: request ids logged %v, indexed %v", pg, logged, indexed)
		}
		return nil
	})
}

// CorruptCachedForTest flips one byte at off of an object's extent in the
// read cache, as memory that went bad after the extent was checked.
func (s *Store) CorruptCachedForTest(bucket, key string, off int64) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	x := s.files.cache.get(h.dataID, false)
	if x == nil {
		return fmt.Errorf("%q/%q is not cached", bucket, key)
	}
	defer x.release()
	x.b[off-int64(x.base)] ^= 0x5a
	return nil
}
