package store

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDiskStall: the stall runs from the start of the oldest slow
// operation reported while the health checks keep reporting slow ones
// (the disk slow without a break), not from the latest report's; it ends
// when the reports stop.
func TestDiskStall(t *testing.T) {
	w := &diskWatch{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	t0 := time.Unix(100, 0)
	if d, _ := w.stallAt(t0); d != 0 {
		t.Fatalf("stall %v before any report", d)
	}
	w.noteAt(t0, vfs.DiskSlowInfo{Path: "wal", OpType: vfs.OpTypeSync, Duration: 6 * time.Second})
	w.noteAt(t0.Add(time.Second), vfs.DiskSlowInfo{Path: "table", OpType: vfs.OpTypeWrite, Duration: 5 * time.Second})
	if d, what := w.stallAt(t0.Add(2 * time.Second)); d != 8*time.Second || what != "sync wal" {
		t.Fatalf("stall %v (%s), want 8s of the WAL's sync", d, what)
	}
	// The WAL's sync ended; the table's write goes on: still no break.
	w.noteAt(t0.Add(4*time.Second), vfs.DiskSlowInfo{Path: "table", OpType: vfs.OpTypeWrite, Duration: 8 * time.Second})
	if d, _ := w.stallAt(t0.Add(4 * time.Second)); d != 10*time.Second {
		t.Fatalf("stall %v, want 10s since the WAL's sync began", d)
	}
	if d, _ := w.stallAt(t0.Add(4*time.Second + stallFresh + time.Millisecond)); d != 0 {
		t.Fatalf("stall %v with no report for %v", d, stallFresh)
	}
	// A new stall after a quiet spell starts afresh.
	t1 := t0.Add(time.Minute)
	w.noteAt(t1, vfs.DiskSlowInfo{Path: "wal", OpType: vfs.OpTypeSync, Duration: 5 * time.Second})
	if d, _ := w.stallAt(t1); d != 5*time.Second {
		t.Fatalf("stall %v, want 5s", d)
	}
}

// TestOwnOpsStall: operations timed here (begin, end) count toward the
// stall while in flight past the threshold, the oldest one first, from
// whichever shard holds it; once ended they do not.
func TestOwnOpsStall(t *testing.T) {
	w := &diskWatch{log: slog.New(slog.NewTextHandler(io.Discard, nil)), threshold: time.Second}
	t0 := time.Unix(100, 0)
	var tokens []uint64
	for i := range 3 * ownShards {
		tokens = append(tokens, w.begin(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("read %d", i)))
	}
	oldest := w.begin(t0.Add(-time.Second), "read data file")
	if d, what := w.stallAt(t0.Add(500 * time.Millisecond)); d != 1500*time.Millisecond || what != "read data file" {
		t.Fatalf("stall %v (%s), want 1.5s of the data file's read", d, what)
	}
	w.end(oldest)
	if d, what := w.stallAt(t0.Add(2 * time.Second)); d != 2*time.Second || what != "read 0" {
		t.Fatalf("stall %v (%s), want 2s of read 0", d, what)
	}
	for _, tk := range tokens {
		w.end(tk)
	}
	if d, _ := w.stallAt(t0.Add(time.Minute)); d != 0 {
		t.Fatalf("stall %v with nothing in flight", d)
	}
}

// BenchmarkDiskWatchReads is the cost a timed read pays (begin, end),
// from as many goroutines as the benchmark runs (-cpu).
func BenchmarkDiskWatchReads(b *testing.B) {
	w := &diskWatch{log: slog.New(slog.NewTextHandler(io.Discard, nil)), threshold: time.Second}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.end(w.begin(time.Now(), "read"))
		}
	})
}
