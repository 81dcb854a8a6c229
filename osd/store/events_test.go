package store

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestRepeatedEventsRateLimited: a flush that fails on a full disk is
// retried at once and reports the same background error each time (an OSD
// restarted on a full disk once wrote 20,106 such lines in 30 s). The
// listener lets one line through per interval, and the next says how many
// it held back.
func TestRepeatedEventsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	l := eventListener(slog.New(slog.NewTextHandler(&buf, nil)))
	err := errors.Join(errors.New("pebble: flush"), syscall.ENOSPC)
	for range 20000 {
		l.BackgroundError(err)
		l.LowDiskSpace(pebble.LowDiskSpaceInfo{AvailBytes: 1, TotalBytes: 100})
	}
	out := buf.String()
	if n := strings.Count(out, "pebble background error"); n != 1 {
		t.Errorf("%d background error lines for 20000 errors, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "low disk space"); n != 1 {
		t.Errorf("%d low disk space lines for 20000 events, want 1", n)
	}
	// Corruption is never held back: each one names another file.
	l.DataCorruption(pebble.DataCorruptionInfo{Path: "a"})
	l.DataCorruption(pebble.DataCorruptionInfo{Path: "b"})
	if n := strings.Count(buf.String(), "corruption"); n != 2 {
		t.Errorf("%d corruption lines, want 2", n)
	}
}
