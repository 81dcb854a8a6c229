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
	in := NewInbound(InboundLimits{}, slog.New(slog.NewTextHandler(&logs, nil)))
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

// TestInboundPerHost: once more than half of MaxConns are open, a host
// holds at most MaxEarlyPerHost connections not yet authenticated; more
// are refused and counted, other hosts are not held back, and a
// connection that authenticates or closes frees its host's place (once,
// however often Done runs). Below half, a host's burst gets in.
func TestInboundPerHost(t *testing.T) {
	var logs bytes.Buffer
	in := NewInbound(InboundLimits{MaxConns: 8, MaxEarlyPerHost: 2}, slog.New(slog.NewTextHandler(&logs, nil)))
	admit := func(remote string) *InboundConn {
		t.Helper()
		c, ok := in.Admit("tcp://l", remote)
		if !ok {
			t.Fatalf("%s refused: %+v", remote, in.Stats())
		}
		return c
	}
	refuse := func(remote string) {
		t.Helper()
		if _, ok := in.Admit("tcp://l", remote); ok {
			t.Fatalf("%s admitted: %+v", remote, in.Stats())
		}
	}
	want := func(open, early int64, refused, perHost uint64) {
		t.Helper()
		if st := in.Stats(); st.Open != open || st.Early != early || st.Refused != refused || st.RefusedPerHost != perHost {
			t.Fatalf("stats %+v, want open %d early %d refused %d (%d per host)", st, open, early, refused, perHost)
		}
	}
	// Half of MaxConns or less open: a burst of one host gets in.
	a1, a2, a3 := admit("10.0.0.1:1000"), admit("10.0.0.1:1001"), admit("10.0.0.1:1002")
	b := admit("[fd00::1]:1000")
	// Past half: the host over its bound is refused, others are not.
	for range 3 {
		refuse("10.0.0.1:1003")
	}
	// No IP: not bounded per host (three at once, two then gone).
	f1, f2 := admit("fabric-address"), admit("fabric-address")
	admit("fabric-address")
	f1.Done()
	f2.Done()
	admit("[fd00::1]:1001")
	refuse("[fd00::1]:1002")
	want(6, 6, 4, 4)
	if n := strings.Count(logs.String(), "not yet authenticated"); n != 1 {
		t.Fatalf("%d log lines for 4 refusals, want 1:\n%s", n, logs.String())
	}

	a1.Authenticated()
	a1.Authenticated()
	refuse("10.0.0.1:1004") // still 2 early
	a2.Authenticated()
	a4 := admit("10.0.0.1:1005")
	a1.Done() // authenticated already: frees no early place
	refuse("10.0.0.1:1006")
	want(6, 5, 6, 6)
	a3.Done()
	a3.Done()
	admit("10.0.0.1:1007") // a3's place
	want(6, 5, 6, 6)
	// MaxConns still bounds everyone.
	admit("10.0.0.9:1")
	admit("10.0.0.10:1")
	refuse("10.0.0.11:1")
	want(8, 7, 7, 6)
	a4.Done()
	b.Done()
	a2.Done()
	want(5, 5, 7, 6)

	// A nil Inbound admits everything; its connections' methods do nothing.
	var none *Inbound
	c, ok := none.Admit("tcp://l", "10.0.0.1:1")
	if !ok || c != nil {
		t.Fatalf("nil Inbound: %v %v", c, ok)
	}
	c.Authenticated()
	c.BannerFailed()
	c.Done()
}
