package store

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/internal/guard"
	"golang.org/x/sys/cpu"
)

// The store's disk is watched by Pebble's disk health checks
// (vfs.WithDiskHealthChecks, the layer CockroachDB stops a node on): every
// write and sync of Pebble's WAL and tables is timed while in flight, and
// one past Options.DiskSlowThreshold is reported again at each of the
// checker's ticks (2 s) for as long as it lasts. Pebble's checks leave out
// files opened with OpenReadWrite, which the data files are (and their
// writes go by their fd, O_DIRECT): writeDataFile times its write and
// sync here itself (begin, end). The checks time no reads either: a disk
// that still takes writes but hangs reads would leave every get of an
// object not in the caches stuck while the OSD looks well, so the store
// times its reads too, Pebble's through readWatchFS and the data files'
// O_DIRECT reads in readFileAt. DiskStall turns all of them into how long
// the disk has been stuck, for the OSD to give up its PGs (Ceph's OSD stops
// answering heartbeats once an op thread, reads included, is stuck past
// osd_op_thread_timeout).

// defaultDiskSlowThreshold is Pebble's own (Options.WithFSDefaults).
const defaultDiskSlowThreshold = 5 * time.Second

// stallFresh is how long a slow-disk report says the operation is still
// in flight: the checker repeats it every 2 s while it is, so three
// missed ticks and a margin mean it ended.
const stallFresh = 5 * time.Second

type diskWatch struct {
	log       *slog.Logger
	rl        guard.RateLog
	checks    io.Closer     // the health checks' goroutines; nil with them off
	threshold time.Duration // Options.DiskSlowThreshold; 0: off

	// own: the operations timed here in flight (data-file writes, reads),
	// by begin's token, in shards: every read of a block Pebble's cache
	// lacks and every data-file read passes here, from as many goroutines
	// as serve gets, and one mutex (or one counter) would serialize them.
	own [ownShards]ownShard

	mu sync.Mutex
	// The oldest slow operation reported within stallFresh: when it
	// started, when last reported, and what it is.
	start, seen time.Time
	what        string
}

// note takes one report of an operation slow so far.
func (w *diskWatch) note(info pebble.DiskSlowInfo) { w.noteAt(time.Now(), info) }

func (w *diskWatch) noteAt(now time.Time, info pebble.DiskSlowInfo) {
	start := now.Add(-info.Duration)
	what := info.OpType.String() + " " + info.Path
	w.mu.Lock()
	if w.seen.IsZero() || now.Sub(w.seen) > stallFresh || start.Before(w.start) {
		w.start, w.what = start, what
	}
	w.seen = now
	w.mu.Unlock()
	w.rl.Log(w.log, slog.LevelWarn, "slow disk", "slow disk: an operation on the store's disk is taking long",
		"op", info.OpType.String(), "path", info.Path, "duration", info.Duration.Round(time.Millisecond))
}

// ownOp is an operation timed here: when it began, and what it is.
type ownOp struct {
	start time.Time
	what  string
}

// ownShards is how many shards the operations in flight are kept in
// (a power of two): begin picks one at random, and its token says which.
const ownShards = 32

type ownShard struct {
	mu  sync.Mutex
	seq uint64 // the shard's last token, shifted
	ops map[uint64]ownOp
	_   cpu.CacheLinePad // apart from the next shard's: no false sharing
}

// begin notes an operation (what: "write data file") starting at now;
// end(token) when it is done. A no-op with the checks off.
func (w *diskWatch) begin(now time.Time, what string) uint64 {
	if w.threshold <= 0 {
		return 0
	}
	i := rand.Uint64N(ownShards) // math/rand/v2's is per thread: no shared counter
	sh := &w.own[i]
	sh.mu.Lock()
	if sh.ops == nil {
		sh.ops = map[uint64]ownOp{}
	}
	sh.seq++
	token := sh.seq*ownShards + i // never 0: seq starts at 1
	sh.ops[token] = ownOp{now, what}
	sh.mu.Unlock()
	return token
}

func (w *diskWatch) end(token uint64) {
	if token == 0 {
		return
	}
	sh := &w.own[token%ownShards]
	sh.mu.Lock()
	delete(sh.ops, token)
	sh.mu.Unlock()
}

// DiskStall is how long the store's disk has been slow without a break:
// since the start of the oldest operation (past Options.DiskSlowThreshold)
// among those the health checks reported since the reports began, and
// what it is ("sync /data/000012.log"); 0 while none is slow, or with the
// checks off.
func (s *Store) DiskStall() (time.Duration, string) {
	return s.disk.stallAt(time.Now())
}

func (w *diskWatch) stallAt(now time.Time) (time.Duration, string) {
	var d time.Duration
	var what string
	for i := range w.own {
		sh := &w.own[i]
		sh.mu.Lock()
		for _, op := range sh.ops {
			if age := now.Sub(op.start); age > w.threshold && age > d {
				d, what = age, op.what
			}
		}
		sh.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen.IsZero() && now.Sub(w.seen) <= stallFresh && now.Sub(w.start) > d {
		d, what = now.Sub(w.start), w.what
	}
	return d, what
}

// readWatchFS times the reads of the files it opens for reading (Pebble's
// tables and WAL, the data files' reads through the page cache), as the
// health checks time writes.
type readWatchFS struct {
	vfs.FS
	w *diskWatch
}

func (fs readWatchFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return readWatchFile{File: f, w: fs.w, what: "read " + name}, nil
}

// Unwrap lets vfs.Root see through to the filesystem beneath.
func (fs readWatchFS) Unwrap() vfs.FS { return fs.FS }

type readWatchFile struct {
	vfs.File
	w    *diskWatch
	what string
}

func (f readWatchFile) Read(p []byte) (int, error) {
	token := f.w.begin(time.Now(), f.what)
	n, err := f.File.Read(p)
	f.w.end(token)
	return n, err
}

func (f readWatchFile) ReadAt(p []byte, off int64) (int, error) {
	token := f.w.begin(time.Now(), f.what)
	n, err := f.File.ReadAt(p, off)
	f.w.end(token)
	return n, err
}
