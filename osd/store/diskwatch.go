package store

import (
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ospreystore/osprey/internal/guard"
)

// The store's disk is watched by Pebble's disk health checks
// (vfs.WithDiskHealthChecks, the layer CockroachDB stops a node on): every
// write and sync of Pebble's WAL and tables is timed while in flight, and
// one past Options.DiskSlowThreshold is reported again at each of the
// checker's ticks (2 s) for as long as it lasts. Pebble's checks leave out
// files opened with OpenReadWrite, which the data files are (and their
// writes go by their fd, O_DIRECT): writeDataFile times its write and
// sync here itself (begin, end). DiskStall turns both into how long the
// disk has been stuck, for the OSD to give up its PGs (Ceph's OSD stops
// answering heartbeats once an op thread is stuck past
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

	// own: data-file writes in flight, by begin's token: when each began.
	ownMu  sync.Mutex
	own    map[uint64]time.Time
	ownSeq uint64

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

// begin notes a data-file write starting at now; end(token) when it is
// done. A no-op with the checks off.
func (w *diskWatch) begin(now time.Time) uint64 {
	if w.threshold <= 0 {
		return 0
	}
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	if w.own == nil {
		w.own = map[uint64]time.Time{}
	}
	w.ownSeq++
	w.own[w.ownSeq] = now
	return w.ownSeq
}

func (w *diskWatch) end(token uint64) {
	if token == 0 {
		return
	}
	w.ownMu.Lock()
	delete(w.own, token)
	w.ownMu.Unlock()
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
	w.ownMu.Lock()
	for _, start := range w.own {
		if age := now.Sub(start); age > w.threshold && age > d {
			d, what = age, "write data file"
		}
	}
	w.ownMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen.IsZero() && now.Sub(w.seen) <= stallFresh && now.Sub(w.start) > d {
		d, what = now.Sub(w.start), w.what
	}
	return d, what
}
