package store

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// reserveName is the reserve file in the store's directory. Pebble ignores
// files whose names it does not know.
const reserveName = "RESERVE"

// Reserve bounds: the default reserve is 1% of the data filesystem within
// them. The most it must hold is a flush of the largest memtable (64 MiB)
// and the WAL of the deletes that free the disk; the least, what an OSD
// writes as it starts (maps, PG records, a new WAL and manifest) and a
// few deletes.
const (
	minReserve = 8 << 20
	maxReserve = 64 << 20
)

// Space is how much of the store's filesystem is in use.
type Space struct {
	// Total and Avail are the filesystem's size and the bytes an
	// unprivileged writer may still use (statfs f_blocks and f_bavail), as
	// df shows them.
	Total, Avail uint64
	// InUse is the bytes in use (f_blocks less f_bfree), as df's Used;
	// 0 when unknown, for Total less Avail.
	InUse uint64
	// Reserve is the size of the reserve file now: 0 once a full disk made
	// the store release it. Its bytes count as used.
	Reserve uint64
}

// Used is the bytes in use, the reserve included, as df's Used: not the
// blocks the filesystem keeps back for root (ext4's 5%), which are not
// Avail either.
func (s Space) Used() uint64 {
	if s.InUse > 0 {
		return s.InUse
	}
	return s.Total - min(s.Avail, s.Total)
}

// Ratio is the fraction of the space a writer may use that is used,
// Used / (Used + Avail), as df's Use% (which leaves out the blocks kept
// for root: counted as used, a disk whose filesystem keeps back a large
// share warned nearfull while df showed it a fifth used); the figure the
// full ratios are compared with. 1 once nothing is available, 0 for an
// unknown filesystem.
func (s Space) Ratio() float64 {
	if s.Total == 0 {
		return 0
	}
	used := s.Used()
	if used+s.Avail == 0 {
		return 0
	}
	return float64(used) / float64(used+s.Avail)
}

// reserve is a file of preallocated blocks kept in the store's directory so
// that a store whose disk filled up can still commit deletes and open: Pebble
// writes to its WAL, manifest and a new memtable's flush even to delete. It
// is CockroachDB's "emergency ballast": Pebble's vfs.OnDiskFull calls
// release on the first ENOSPC any Pebble write meets, and retries that write
// once the bytes are back. A released reserve is made again by Maintain once the
// filesystem has room for it twice over.
type reserve struct {
	fs   vfs.FS // unwrapped: the reserve must not release itself
	path string
	size uint64 // wanted size; 0: no reserve (an unknown filesystem)

	mu       sync.Mutex
	have     atomic.Uint64 // bytes held now
	released atomic.Int64  // times released
	onChange func(held bool)
}

// reserveSize is the wanted reserve for a filesystem of total bytes: opt if
// set (negative: none), else 1% within [minReserve, maxReserve].
func reserveSize(opt int64, total uint64) uint64 {
	switch {
	case opt < 0 || total == 0:
		return 0
	case opt > 0:
		return uint64(opt)
	}
	return min(max(total/100, minReserve), maxReserve)
}

// space reads the filesystem's usage; Total is 0 when the filesystem cannot
// say (an in-memory one).
func (r *reserve) space(dir string) Space {
	du, err := r.fs.GetDiskUsage(dir)
	if err != nil {
		return Space{}
	}
	return Space{Total: du.TotalBytes, Avail: du.AvailBytes, InUse: du.UsedBytes, Reserve: r.have.Load()}
}

// open keeps the reserve a previous run left, or makes one. On a full disk
// Pebble's first write as it opens (a manifest, OPTIONS, a WAL) releases
// it.
func (r *reserve) open(sp Space) error {
	fi, err := r.fs.Stat(r.path)
	switch {
	case err == nil:
		r.have.Store(uint64(fi.Size()))
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("store: reserve: %w", err)
	}
	_, err = r.maintain(sp)
	return err
}

// maintain makes (or grows) the reserve when the filesystem can spare it
// twice over, and reports whether it did.
func (r *reserve) maintain(sp Space) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	have := r.have.Load()
	if r.size == 0 || have >= r.size || sp.Avail < 2*(r.size-have) {
		return false, nil
	}
	f, err := r.fs.OpenReadWrite(r.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return false, fmt.Errorf("store: make reserve: %w", err)
	}
	err = allocate(f, int64(r.size))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.fs.Remove(r.path)
		r.have.Store(0)
		return false, fmt.Errorf("store: make reserve: %w", err)
	}
	r.have.Store(r.size)
	if have == 0 && r.released.Load() > 0 && r.onChange != nil {
		r.onChange(true)
	}
	return true, nil
}

// allocate gives f size bytes of real blocks: fallocate where the
// filesystem has it, else zeros written out.
func allocate(f vfs.File, size int64) error {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		err := unix.Fallocate(int(fd), 0, 0, size)
		if err == nil || !errors.Is(err, syscall.EOPNOTSUPP) {
			return err
		}
	}
	zero := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zero)) {
		n := min(int64(len(zero)), size-off)
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// release removes the reserve. It runs inside Pebble's disk-full handler,
// where every Pebble write waits for it: it must be quick and must not
// write through Pebble.
func (r *reserve) release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.have.Load() == 0 {
		return nil
	}
	if err := r.fs.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: release reserve: %w", err)
	}
	r.have.Store(0)
	r.released.Add(1)
	if r.onChange != nil {
		r.onChange(false)
	}
	return nil
}

// Space reports the store's filesystem usage now (one statfs).
func (s *Store) Space() Space {
	s.counters.spaceMeasures.Add(1)
	written := s.counters.writtenBytes.Load()
	sp := s.res.space(s.opts.Dir)
	s.lastSpace.Store(&spaceMeasure{sp: sp, at: spaceClock(), written: written})
	return sp
}

// A write's usage may come from a measure this recent, made before the
// store put a quarter of a memtable more, instead of a statfs of its own
// (a statfs per member per 4 KiB put was 2-3% of its CPU). Both bounds are
// far inside the room a put leaves (two memtables), and twice the bytes
// put since (the WAL, then the flush) are taken off Avail, so the floor
// errs only towards refusing.
const recentSpaceAge = 100 * time.Millisecond

// spaceClock is time.Now; tests replace it.
var spaceClock = time.Now

// spaceMeasure is Space's last measure, with the store's put bytes then.
type spaceMeasure struct {
	sp      Space
	at      time.Time
	written int64
}

// RecentSpace is Space, or the last measure when it is recent (under
// recentSpaceAge, and under a quarter of a memtable put since) with twice
// the bytes put since taken off Avail: for the full-ratio check and room
// of each write, where a statfs per put costs more than its news is worth.
//
// One caller measures at a time: the writes that find the measure stale
// while it runs take the stale one, so a burst costs one statfs, not one
// per write in flight.
func (s *Store) RecentSpace() Space {
	if m := s.lastSpace.Load(); m != nil {
		put := s.counters.writtenBytes.Load() - m.written
		fresh := put >= 0 && uint64(put) < s.opts.MemTableSize/4 && spaceClock().Sub(m.at) < recentSpaceAge
		if fresh || !s.measuring.CompareAndSwap(false, true) {
			sp := m.sp
			sp.Avail -= min(sp.Avail, 2*uint64(max(put, 0)))
			sp.Reserve = s.res.have.Load()
			return sp
		}
		defer s.measuring.Store(false)
	}
	return s.Space()
}

// MaintainReserve makes the reserve again after a full disk released it,
// once the filesystem has room for it twice over; the OSD calls it as it
// polls Space. It reports whether the reserve was made.
func (s *Store) MaintainReserve() (bool, error) { return s.res.maintain(s.Space()) }

// ReserveReleased reports how many times the reserve was released since
// Open.
func (s *Store) ReserveReleased() int64 { return s.res.released.Load() }

// IsNoSpace reports whether err is ErrNoSpace or the filesystem's ENOSPC
// (or EDQUOT, a quota's), which the OSD answers as STORAGE_FULL.
func IsNoSpace(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// room refuses a put of n bytes that would leave the filesystem less than
// two memtables (what Pebble needs to flush one while the next fills) on
// top of the reserve (the part of it not yet made must stay free), or any
// put once a full disk released the reserve: such writes could only end in
// a WAL write that fails, which Pebble cannot survive. Deletes and
// metadata do not ask. The OSD's full ratios refuse client writes long
// before this; room is the store's own floor, for replicas, recovery and
// library users. sp is the filesystem's usage measured just before by the
// caller (Check's CheckOptions.Space), or nil to measure it here.
func (s *Store) room(n int, sp *Space) error {
	if s.res.size == 0 {
		return nil // a filesystem that cannot say (in-memory)
	}
	have := s.res.have.Load()
	if have == 0 && s.res.released.Load() > 0 {
		return fmt.Errorf("%w: the reserve was released", ErrNoSpace)
	}
	if sp == nil {
		m := s.Space()
		sp = &m
	}
	if need := uint64(n) + s.floor(have); sp.Avail < need {
		return fmt.Errorf("%w: %d bytes available, a %d-byte put needs %d", ErrNoSpace, sp.Avail, n, need)
	}
	return nil
}

// floor is what room keeps free beyond a put: two memtables, and the part
// of the reserve not yet made (have is what is made).
func (s *Store) floor(have uint64) uint64 {
	return 2*s.opts.MemTableSize + (s.res.size - min(have, s.res.size))
}

// Floor is the free space below which the store refuses every put (room),
// 0 for a filesystem that cannot say: on a small disk it can exceed the
// headroom the OSD's full ratios leave, and the OSD then counts itself
// full by it.
func (s *Store) Floor() uint64 {
	if s.res.size == 0 {
		return 0
	}
	return s.floor(s.res.have.Load())
}
