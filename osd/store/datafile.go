package store

// Data files: where the bytes of objects of Options.DataFileThreshold bytes
// and more live, one immutable file per data id, written once and synced
// before the head that names it is committed. The package comment has the
// protocol; this file has the pieces:
//
//   - the pool of pre-created files (their directory entries and 'W'
//     records already durable, so a put syncs only its file and the head
//     batch);
//   - the write of one file (its verified reads are in extent.go);
//   - read epochs, which keep a file that a reader may still open from being
//     removed after an overwrite or delete unlinks it from its head;
//   - the reaper, which removes dead files once no reader can reach them.

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

const (
	// dataDirName is the directory, inside Options.Dir, of the data files.
	dataDirName = "data"
	// dataFanout subdirectories keep each directory small; 64 consecutive
	// ids share one (dataFanoutShift), so a pool refill of consecutive ids
	// touches one or two directories and syncs only those.
	dataFanout      = 256
	dataFanoutShift = 6
	// poolBatch files are created per pool refill: one synced Pebble batch of
	// 'W' records and one or two directory syncs for that many puts.
	poolBatch = 32
)

// 'W' record values say what Open must remove for a data id no head owns.
var (
	// pendingChunks (empty, the original format): 'D' chunks in Pebble.
	pendingChunks []byte
	// pendingFile: a data file (in the pool, being written, or dead).
	pendingFile = []byte{'F'}
)

// dataFiles is the Store's state for data files.
type dataFiles struct {
	fs  vfs.FS
	dir string // Options.Dir/data

	pool struct {
		sync.Mutex
		files []pooledFile
		// refilling: a refill is in flight (one at a time); refilled is
		// signalled when it ends.
		refilling bool
		refilled  *sync.Cond
		// made (touched by the one refill in flight only): subdirectories
		// known to exist durably. They are created on first use, so a new
		// store costs one directory, not 257.
		made [dataFanout]bool
	}
	// background: refills started by takeDataFile, which Close waits for.
	background sync.WaitGroup

	// mu guards the read epochs and the dead list.
	mu sync.Mutex
	// epoch is bumped by every kill, after the commit that made the killed
	// files unreachable from any head.
	epoch uint64
	// readers counts the ReadRange calls in flight by the epoch they entered
	// in. A reader that entered in epoch e took its Pebble view after every
	// kill of epoch <= e had committed, so it can only reach files killed in
	// a later epoch.
	readers map[uint64]int
	// dead files, in epoch order: removed once no reader of an earlier epoch
	// than theirs remains.
	dead []deadFile
	// reaping: dead files taken off the list whose removal is in progress.
	reaping int
	// paused (tests only) keeps the reaper from removing anything.
	paused bool
	// beforeFileRead (tests only) runs in ReadRange between the view and
	// the file read.
	beforeFileRead func()

	wake chan struct{} // cap 1: there may be dead files to remove
	stop chan struct{}
	done chan struct{}

	removed atomic.Int64 // files removed since Open
	// buffered: O_DIRECT was refused once; read and write through the
	// page cache.
	buffered atomic.Bool
	// bounced counts reads of a file that could have taken O_DIRECT but
	// were not aligned for it (none, by design: loadExtent aligns them).
	bounced atomic.Int64
	// cache holds verified extents of whole objects for ReadShared
	// (extent.go).
	cache readCache

	// reapMu is held by a reaper round, from taking files off the dead list
	// until their records are deleted (tests inspect a settled state).
	reapMu sync.Mutex
}

type pooledFile struct {
	id uint64
	f  vfs.File
}

type deadFile struct {
	id, epoch uint64
}

// dataSubdir is the directory of data id's file.
func (d *dataFiles) dataSubdir(id uint64) string {
	return d.fs.PathJoin(d.dir, fmt.Sprintf("%02x", (id>>dataFanoutShift)%dataFanout))
}

// dataPath is the data file of data id.
func (d *dataFiles) dataPath(id uint64) string {
	return d.fs.PathJoin(d.dataSubdir(id), fmt.Sprintf("%016x", id))
}

// openDataFiles creates the data directory (durably: its entry in
// Options.Dir is synced); the subdirectories come with the first file that
// needs them.
func (s *Store) openDataFiles(fs vfs.FS) error {
	d := &s.files
	d.fs = fs
	d.dir = fs.PathJoin(s.opts.Dir, dataDirName)
	d.readers = make(map[uint64]int)
	d.cache.init(s.opts.ReadCacheSize)
	d.pool.refilled = sync.NewCond(&d.pool.Mutex)
	d.wake = make(chan struct{}, 1)
	d.stop = make(chan struct{})
	d.done = make(chan struct{})
	if err := fs.MkdirAll(d.dir, 0o750); err != nil {
		return fmt.Errorf("store: create %s: %w", d.dir, err)
	}
	// Synced even if it existed: a process that crashed between creating it
	// and syncing left an entry that a power cut could still take.
	return syncDirs(fs, s.opts.Dir)
}

// makeSubdir makes sure data id's subdirectory exists and its entry is
// durable. REQUIRES: the caller is the refill in flight.
func (s *Store) makeSubdir(id uint64) error {
	i := (id >> dataFanoutShift) % dataFanout
	if s.files.pool.made[i] {
		return nil
	}
	dir := s.files.dataSubdir(id)
	if err := s.files.fs.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("store: create %s: %w", dir, err)
	}
	// Synced even if it existed, as in openDataFiles.
	if err := syncDirs(s.files.fs, s.files.dir); err != nil {
		return err
	}
	s.files.pool.made[i] = true
	return nil
}

func (s *Store) startReaper() {
	go s.reapLoop()
}

// mkdirDurable creates dir and its missing parents, and syncs the parent of
// each directory it created. Pebble syncs only the entries it makes itself:
// it finds dir already there, so without this a power cut right after a
// store's first start could take the directory, and the acknowledged
// writes in it, away.
func mkdirDurable(fs vfs.FS, dir string) error {
	var created []string
	for d := dir; ; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		if fs.PathDir(d) == d {
			break
		}
	}
	if err := fs.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	// Parents first, outermost to innermost, though the order does not
	// matter once all are synced.
	for i := len(created) - 1; i >= 0; i-- {
		if err := syncDirs(fs, fs.PathDir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

// syncDirs fsyncs directories, making the entries created or removed in
// them durable.
func syncDirs(fs vfs.FS, dirs ...string) error {
	for _, dir := range dirs {
		f, err := fs.OpenDir(dir)
		if err != nil {
			return fmt.Errorf("store: open directory %s: %w", dir, err)
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("store: sync directory %s: %w", dir, err)
		}
	}
	return nil
}

// poolLow: when a take leaves fewer files than this in the pool, a refill
// starts in the background, so puts rarely wait for one.
const poolLow = poolBatch / 2

// takeDataFile returns an empty data file whose directory entry and 'W'
// record are durable. It refills the pool itself only if the pool is empty
// and no refill is in flight (else it waits for that one).
func (s *Store) takeDataFile() (pooledFile, error) {
	p := &s.files.pool
	p.Lock()
	defer p.Unlock()
	for len(p.files) == 0 {
		if p.refilling {
			p.refilled.Wait()
			continue
		}
		p.refilling = true
		p.Unlock()
		err := s.refillPool()
		p.Lock()
		p.refilling = false
		p.refilled.Broadcast()
		if err != nil {
			return pooledFile{}, err
		}
	}
	f := p.files[len(p.files)-1]
	p.files = p.files[:len(p.files)-1]
	if len(p.files) < poolLow && !p.refilling {
		p.refilling = true
		s.files.background.Go(func() {
			err := s.refillPool()
			p.Lock()
			p.refilling = false
			p.refilled.Broadcast()
			p.Unlock()
			if err != nil {
				s.opts.Logger.Warn("store: refill the data file pool", "err", err)
			}
		})
	}
	return f, nil
}

// refillPool creates poolBatch files and adds them to the pool. The 'W'
// records are synced first: from then on, whatever happens to the files,
// Open removes them unless a head batch claimed them. The files'
// directories are synced last, so a pooled file exists after any crash
// that a head naming it survives. REQUIRES: the caller set refilling.
func (s *Store) refillPool() error {
	ids := make([]uint64, 0, poolBatch)
	for range poolBatch {
		id, err := s.newDataID()
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, id := range ids {
		if err := b.Set(pendingKey(id), pendingFile, nil); err != nil {
			return fmt.Errorf("store: data file pool: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: data file pool: %w", err)
	}
	var files []pooledFile
	var dirs []string
	err := func() error {
		for _, id := range ids {
			if err := s.makeSubdir(id); err != nil {
				return err
			}
			f, err := s.files.fs.OpenReadWrite(s.files.dataPath(id), vfs.WriteCategoryUnspecified)
			if err != nil {
				return err
			}
			files = append(files, pooledFile{id, f})
			if dir := s.files.dataSubdir(id); !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return syncDirs(s.files.fs, dirs...)
	}()
	if err != nil {
		for _, f := range files {
			f.f.Close()
		}
		s.killDataFiles(ids...) // their 'W' records are durable: remove them
		return fmt.Errorf("store: data file pool: %w", err)
	}
	// Handed out from the end: lowest ids first, for no reason but order.
	slices.Reverse(files)
	p := &s.files.pool
	p.Lock()
	p.files = append(p.files, files...)
	p.Unlock()
	return nil
}

// writeDataFile writes body to a fresh data file and syncs it, returning its
// id. The file stays unreferenced (its 'W' record in place) until the head
// batch commits; on failure it is handed to the reaper.
func (s *Store) writeDataFile(body []byte) (uint64, error) {
	pf, err := s.takeDataFile()
	if err != nil {
		return 0, err
	}
	token := s.disk.begin(time.Now(), "write data file")
	err = s.writeBody(pf.f, body)
	if err == nil {
		err = pf.f.SyncData()
	}
	s.disk.end(token)
	if cerr := pf.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.killDataFiles(pf.id)
		return 0, fmt.Errorf("write data file %d: %w", pf.id, err)
	}
	return pf.id, nil
}

// dataAlign: a data file holds its object's bytes zero-padded to a
// multiple of dataAlign, the unit O_DIRECT writes in (4 KiB satisfies
// every Linux block device). The padding costs no space (the file's last
// block is allocated anyway) and is never read.
const dataAlign = 4096

func paddedLen(n int) int { return (n + dataAlign - 1) &^ (dataAlign - 1) }

var zeroPad [dataAlign]byte

// writeBody writes body, zero-padded to a multiple of dataAlign, at offset
// 0 of an empty data file: with O_DIRECT where the file is an OS file that
// takes it, else buffered.
func (s *Store) writeBody(f vfs.File, body []byte) error {
	if fd := f.Fd(); fd != vfs.InvalidFd && !s.files.buffered.Load() {
		supported, err := writeDirect(int(fd), body)
		if supported {
			return err
		}
		if !s.files.buffered.Swap(true) {
			s.opts.Logger.Info("store: the data directory does not take O_DIRECT; data files are written through the page cache", "dir", s.files.dir)
		}
	}
	// WriteAt, not Write: vfs.File.Write may scribble on its argument (the
	// in-memory test FS does under -race), and body is the caller's.
	if _, err := f.WriteAt(body, 0); err != nil {
		return err
	}
	if pad := paddedLen(len(body)) - len(body); pad > 0 {
		if _, err := f.WriteAt(zeroPad[:pad], int64(len(body))); err != nil {
			return err
		}
	}
	return nil
}

// chunkCRCs returns the CRC32C of each chunkSize chunk of body, a put's.
func (s *Store) chunkCRCs(body []byte, chunkSize uint32) []uint32 {
	cs := int(chunkSize)
	crcs := make([]uint32, 0, chunkCount(uint64(len(body)), chunkSize))
	for start := 0; start < len(body); start += cs {
		crcs = append(crcs, s.bodyCRC(body[start:min(start+cs, len(body))]))
	}
	return crcs
}

// bodyCRC is the CRC32C of a put's body, or part of it, that the store
// computes to check it (Stats.BodyCRCBytes).
func (s *Store) bodyCRC(b []byte) uint32 {
	s.counters.bodyCRCBytes.Add(int64(len(b)))
	return crc32c(b)
}

func isNotExist(err error) bool { return errors.Is(err, iofs.ErrNotExist) }

// enterRead registers a reader that may open data files; leaveRead must
// follow with the epoch it returned. Enter before taking the Pebble view.
func (s *Store) enterRead() uint64 {
	d := &s.files
	d.mu.Lock()
	e := d.epoch
	d.readers[e]++
	d.mu.Unlock()
	return e
}

func (s *Store) leaveRead(e uint64) {
	d := &s.files
	d.mu.Lock()
	n := d.readers[e] - 1
	if n > 0 {
		d.readers[e] = n
	} else {
		delete(d.readers, e)
	}
	wake := n == 0 && len(d.dead) > 0 && d.dead[0].epoch > e
	d.mu.Unlock()
	if wake {
		s.wakeReaper()
	}
}

// killDataFiles hands files that no head references any more (their 'W'
// records committed) to the reaper. REQUIRES: the commit that unlinked them
// from their heads has returned.
func (s *Store) killDataFiles(ids ...uint64) {
	if len(ids) == 0 {
		return
	}
	d := &s.files
	d.mu.Lock()
	d.epoch++
	for _, id := range ids {
		d.dead = append(d.dead, deadFile{id: id, epoch: d.epoch})
	}
	d.mu.Unlock()
	// After the files are on the dead list: a reader that caches one
	// after this drop finds it there (cacheExtent).
	d.cache.drop(ids)
	s.wakeReaper()
}

func (s *Store) wakeReaper() {
	select {
	case s.files.wake <- struct{}{}:
	default:
	}
}

// takeFree removes from the dead list, and returns, the files no reader
// can reach: those killed in an epoch no earlier than the oldest reader's.
func (d *dataFiles) takeFree() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused || len(d.dead) == 0 {
		return nil
	}
	oldest := uint64(1<<64 - 1)
	for e := range d.readers {
		oldest = min(oldest, e)
	}
	// A reader of epoch e may hold files killed in epochs > e; files killed
	// in epoch k <= e were committed dead before it took its view.
	n := 0
	for n < len(d.dead) && d.dead[n].epoch <= oldest {
		n++
	}
	ids := make([]uint64, n)
	for i := range n {
		ids[i] = d.dead[i].id
	}
	d.dead = slices.Delete(d.dead, 0, n)
	d.reaping += n
	return ids
}

// isDead reports whether data file id was killed and is not yet removed.
// A reader in a read epoch that covers the file sees it on the dead list
// until the reader is done: the reaper removes no file such a reader can
// reach.
func (d *dataFiles) isDead(id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.ContainsFunc(d.dead, func(f deadFile) bool { return f.id == id })
}

// pending is how many dead files are not yet removed.
func (d *dataFiles) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.dead) + d.reaping
}

func (s *Store) reapLoop() {
	defer close(s.files.done)
	for {
		select {
		case <-s.files.stop:
			return
		case <-s.files.wake:
		}
		s.reap(pebble.NoSync)
	}
}

// reap removes the dead files no reader can reach.
func (s *Store) reap(wo *pebble.WriteOptions) {
	s.files.reapMu.Lock()
	defer s.files.reapMu.Unlock()
	if n, err := s.reapLocked(wo); err != nil {
		s.opts.Logger.Warn("store: remove dead data files; Open will retry", "count", n, "err", err)
	}
}

// reapLocked is reap with reapMu held; it returns how many files it tried.
func (s *Store) reapLocked(wo *pebble.WriteOptions) (int, error) {
	ids := s.files.takeFree()
	if len(ids) == 0 {
		return 0, nil
	}
	err := s.removeDataFiles(ids, wo)
	s.files.mu.Lock()
	s.files.reaping -= len(ids)
	s.files.mu.Unlock()
	return len(ids), err
}

// removeDataFiles removes data files whose 'W' records are committed:
// unlink each (a missing one is fine), sync their directories, and only
// then delete the records, so a record outlives its file's directory entry
// and a crash at any point leaves work for Open, never an orphan.
func (s *Store) removeDataFiles(ids []uint64, wo *pebble.WriteOptions) error {
	var dirs []string
	var errs []error
	removed := 0
	b := s.db.NewBatch()
	defer b.Close()
	for _, id := range ids {
		err := s.files.fs.Remove(s.files.dataPath(id))
		switch {
		case err == nil:
			removed++
			if dir := s.files.dataSubdir(id); !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		case !isNotExist(err):
			errs = append(errs, fmt.Errorf("remove data file %016x: %w", id, err))
			continue // keep its record: Open retries
		}
		if err := b.Delete(pendingKey(id), nil); err != nil {
			errs = append(errs, err)
		}
	}
	s.files.removed.Add(int64(removed))
	if err := syncDirs(s.files.fs, dirs...); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if !b.Empty() {
		if err := b.Commit(wo); err != nil {
			errs = append(errs, fmt.Errorf("delete data file records: %w", err))
		}
	}
	return errors.Join(errs...)
}

// closeDataFiles stops the reaper and removes the pool's files and every
// dead file (Close holds the store exclusively: no reader is left).
func (s *Store) closeDataFiles() error {
	d := &s.files
	if d.stop == nil {
		return nil
	}
	close(d.stop)
	<-d.done
	d.background.Wait()
	// Memory from Options.ReadCacheAlloc (registered on RDMA) is not the
	// GC's to take back.
	d.cache.clear()
	ids := s.releaseKept()
	d.pool.Lock()
	for _, pf := range d.pool.files {
		pf.f.Close()
		ids = append(ids, pf.id)
	}
	d.pool.files = nil
	d.pool.Unlock()
	d.mu.Lock()
	for _, df := range d.dead {
		ids = append(ids, df.id)
	}
	d.dead = nil
	d.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	return s.removeDataFiles(ids, pebble.Sync)
}

// undoKill takes data file id back off the dead list, for a reader whose
// epoch still protects it (Store.hold); false if it is not there.
func (d *dataFiles) undoKill(id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.IndexFunc(d.dead, func(f deadFile) bool { return f.id == id })
	if i < 0 {
		return false
	}
	d.dead = slices.Delete(d.dead, i, i+1)
	return true
}
