package msgrtest

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// logKeep is how many of a test's most recent log lines Logger keeps.
const logKeep = 400

// Logger returns a logger for the messengers of test t that keeps the
// most recent debug lines (link faults, dials, accepts) in memory and
// prints them only if t fails: a rare failure in CI then shows what the
// links did just before it, while a passing test's output stays quiet.
// With MSGR_TEST_LOG set every line goes to stderr as it happens.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("MSGR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r := &logRing{}
	t.Cleanup(func() {
		if text := r.text(); t.Failed() && text != "" {
			t.Logf("the last log lines (at most %d) of a messenger:\n%s", logKeep, text)
		}
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logRing keeps the last logKeep lines written to it. slog's handlers
// write one whole line per Write.
type logRing struct {
	mu    sync.Mutex
	lines [][]byte
	next  int
	full  bool
}

func (r *logRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lines == nil {
		r.lines = make([][]byte, logKeep)
	}
	r.lines[r.next] = append(r.lines[r.next][:0], p...)
	r.next++
	if r.next == logKeep {
		r.next, r.full = 0, true
	}
	return len(p), nil
}

func (r *logRing) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b bytes.Buffer
	if r.full {
		for _, l := range r.lines[r.next:] {
			b.Write(l)
		}
	}
	for _, l := range r.lines[:r.next] {
		b.Write(l)
	}
	return b.String()
}

var _ io.Writer = (*logRing)(nil)
