package msgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// waitRace is a simultaneous connect held at the point where WAIT is
// answered: osd.2's dial has reached osd.1 (it read osd.1's HELLO) and its
// SESSION_REQUEST is held by the gate, and osd.1's dial got WAIT from
// osd.2. Both back off a minute after a failed dial and time handshakes
// out after five, so nothing in the test moves on by a timer.
type waitRace struct {
	a, b           *msgr.Messenger // osd.1, osd.2
	recA, recB     *msgrtest.Recorder
	ca, cb         *msgr.Conn // a's session with b, b's with a
	release        func(fail bool)
	aDials, bDials *msgrtest.Gate
}

func newWaitRace(t *testing.T) *waitRace {
	ctx := context.Background()
	r := &waitRace{recA: msgrtest.NewRecorder(t), recB: msgrtest.NewRecorder(t),
		aDials: msgrtest.NewGate(tcp.Transport{}), bDials: msgrtest.NewGate(tcp.Transport{})}
	slow := func(g *msgrtest.Gate) func(*msgr.Options) {
		return func(o *msgr.Options) {
			o.Reconnect = msgr.Backoff{Min: time.Minute, Max: time.Minute}
			o.HandshakeTimeout = 5 * time.Minute
			o.Transports = []wire.Transport{g}
		}
	}
	r.a = tcpEnv.NewMessenger(t, "osd.1", r.recA, slow(r.aDials))
	r.b = tcpEnv.NewMessenger(t, "osd.2", r.recB, slow(r.bDials))
	var held <-chan struct{}
	held, r.release = r.bDials.HoldWrites(wire.TagSessionReq)
	t.Cleanup(func() { r.release(true) })
	addrA, addrB := tcpEnv.Listen(t, r.a), tcpEnv.Listen(t, r.b)

	var err error
	if r.cb, err = r.b.Connect(ctx, addrA, "osd.1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatalf("osd.2's SESSION_REQUEST never came: %v", r.cb)
	}
	if r.ca, err = r.a.Connect(ctx, addrB, "osd.2"); err != nil {
		t.Fatal(err)
	}
	msgrtest.Eventually(t, 10*time.Second, "osd.1's dial answered with WAIT", func() bool { return r.ca.Stats().WaitsReceived == 1 })
	return r
}

// upAndExactlyOnce waits for both sides' sessions and sends n messages
// each way, checked for order and exactly-once by the recorders.
func (r *waitRace) upAndExactlyOnce(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []*msgr.Conn{r.ca, r.cb} {
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("session not up: %v (osd.1: %v; osd.2: %v)", err, r.ca, r.cb)
		}
	}
	for i := range n {
		for id, c := range map[uint32]*msgr.Conn{1: r.ca, 2: r.cb} {
			if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(id, uint64(i), nil), nil)); err != nil {
				t.Fatal(err)
			}
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "every message delivered", func() bool {
		return r.recA.Next(2) == uint64(n) && r.recB.Next(1) == uint64(n)
	})
	for _, rec := range []*msgrtest.Recorder{r.recA, r.recB} {
		if err := rec.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaitThenThePeersLinkAttaches: the dial that got WAIT does not
// redial once the peer's link it waited for is attached; that link is the
// only one either side ever attaches.
func TestWaitThenThePeersLinkAttaches(t *testing.T) {
	r := newWaitRace(t)
	r.release(false)
	r.upAndExactlyOnce(t, 100)
	if d := r.aDials.Dials(); d != 1 {
		t.Errorf("osd.1 dialed %d times, want 1", d)
	}
	sa, sb := r.ca.Stats(), r.cb.Stats()
	if sa.WaitsReceived != 1 || sb.WaitsSent != 1 {
		t.Errorf("WAITs: osd.1 got %d, osd.2 sent %d; want 1", sa.WaitsReceived, sb.WaitsSent)
	}
	if sa.Reconnects != 0 || sb.Reconnects != 0 || sa.Faults != 0 || sb.Faults != 0 {
		t.Errorf("a link was replaced: osd.1 %+v; osd.2 %+v", sa, sb)
	}
}

// TestWaitThenThePeersDialFails: WAIT promised the peer's link; when the
// peer's dial fails instead, the dial that got WAIT dials again at once
// (not after its minute of backoff), and the peer, its own dial over,
// accepts it.
func TestWaitThenThePeersDialFails(t *testing.T) {
	r := newWaitRace(t)
	r.release(true)
	r.upAndExactlyOnce(t, 100)
	if da, db := r.aDials.Dials(), r.bDials.Dials(); da != 2 || db != 1 {
		t.Errorf("osd.1 dialed %d times, osd.2 %d; want 2 and 1 (osd.2 backs off a minute)", da, db)
	}
	sa, sb := r.ca.Stats(), r.cb.Stats()
	if sa.WaitsReceived != 1 || sb.WaitsSent != 1 {
		t.Errorf("WAITs: osd.1 got %d, osd.2 sent %d; want 1", sa.WaitsReceived, sb.WaitsSent)
	}
}
