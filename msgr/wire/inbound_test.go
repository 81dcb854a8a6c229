package wire

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestAcceptRetryStreaksRateLimited: a peer that makes accepts fail and
// recover again and again (descriptors running out as it opens and closes
// connections) gets one failure line and one recovery line per interval,
// not two lines a streak; every failure is counted.
func TestAcceptRetryStreaksRateLimited(t *testing.T) {
	var logs bytes.Buffer // AcceptRetry logs on the caller's goroutine
	in := NewInbound(0, slog.New(slog.NewTextHandler(&logs, nil)))
	a := AcceptRetry{In: in, Listener: "tcp://127.0.0.1:1"}
	done := make(chan struct{})
	const streaks = 5
	for range streaks {
		if !a.Failed(errors.New("accept: too many open files"), done) {
			t.Fatal("Failed ended the loop with done open")
		}
		a.OK()
	}
	if n := strings.Count(logs.String(), "accept failed"); n != 1 {
		t.Errorf("%d failure lines for %d streaks, want 1:\n%s", n, streaks, logs.String())
	}
	if n := strings.Count(logs.String(), "accepting again"); n != 1 {
		t.Errorf("%d recovery lines for %d streaks, want 1:\n%s", n, streaks, logs.String())
	}
	if st := in.Stats(); st.AcceptErrors != streaks {
		t.Errorf("%d accept errors counted, want %d", st.AcceptErrors, streaks)
	}
}
