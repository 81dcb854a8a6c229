package msgr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// racePair is osd.1 and osd.2 about to dial each other, each through a
// gate that counts its dials. Both back off a minute after a failed dial
// and time handshakes out after five, so nothing in a test moves on by a
// timer.
type racePair struct {
	a, b           *msgr.Messenger // osd.1, osd.2
	recA, recB     *msgrtest.Recorder
	aDials, bDials *msgrtest.Gate
	addrA, addrB   string
	ca, cb         *msgr.Conn // a's session with b, b's with a
}

func newRacePair(t *testing.T) *racePair {
	r := &racePair{recA: msgrtest.NewRecorder(t), recB: msgrtest.NewRecorder(t),
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
	r.addrA, r.addrB = tcpEnv.Listen(t, r.a), tcpEnv.Listen(t, r.b)
	return r
}

// connect starts osd.1's dial (a) or osd.2's.
func (r *racePair) connect(t *testing.T, fromA bool) {
	t.Helper()
	var err error
	if fromA {
		r.ca, err = r.a.Connect(context.Background(), r.addrB, "osd.2")
	} else {
		r.cb, err = r.b.Connect(context.Background(), r.addrA, "osd.1")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitHeld waits for a gate's hold to catch what it holds.
func waitHeld(t *testing.T, held <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never came", what)
	}
}

// newWaitRace holds a simultaneous connect where WAIT is answered:
// osd.2's dial has reached osd.1 (it read osd.1's HELLO) and its
// SESSION_REQUEST is held, and osd.1's dial got WAIT from osd.2. release
// lets the request go on, or fail.
func newWaitRace(t *testing.T) (r *racePair, release func(fail bool)) {
	r = newRacePair(t)
	held, release := r.bDials.HoldWrites(wire.TagSessionReq)
	t.Cleanup(func() { release(true) })
	r.connect(t, false)
	waitHeld(t, held, "osd.2's SESSION_REQUEST")
	r.connect(t, true)
	msgrtest.Eventually(t, 10*time.Second, "osd.1's dial answered with WAIT", func() bool { return r.ca.Stats().WaitsReceived == 1 })
	return r, release
}

// upAndExactlyOnce waits for both sides' sessions and sends n messages
// each way, checked for order and exactly-once by the recorders.
func (r *racePair) upAndExactlyOnce(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []*msgr.Conn{r.ca, r.cb} {
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("session not up: %v (osd.1: %v; osd.2: %v)", err, r.ca, r.cb)
		}
	}
	exchange(t, r.ca, r.cb, r.recA, r.recB, 1, 2, 0, n)
}

// checkNoLinkReplaced fails if either side ever lost or replaced its
// first link.
func (r *racePair) checkNoLinkReplaced(t *testing.T) {
	t.Helper()
	sa, sb := r.ca.Stats(), r.cb.Stats()
	if sa.Reconnects != 0 || sb.Reconnects != 0 || sa.Faults != 0 || sb.Faults != 0 {
		t.Errorf("a link was replaced: osd.1 %+v; osd.2 %+v", sa, sb)
	}
}

// checkWaits checks the WAITs osd.2 sent and osd.1 got.
func (r *racePair) checkWaits(t *testing.T, want uint64) {
	t.Helper()
	if got, sent := r.ca.Stats().WaitsReceived, r.cb.Stats().WaitsSent; got != want || sent != want {
		t.Errorf("WAITs: osd.1 got %d, osd.2 sent %d; want %d", got, sent, want)
	}
}

// TestWaitThenThePeersLinkAttaches: the dial that got WAIT does not
// redial once the peer's link it waited for is attached; that link is the
// only one either side ever attaches.
func TestWaitThenThePeersLinkAttaches(t *testing.T) {
	r, release := newWaitRace(t)
	release(false)
	r.upAndExactlyOnce(t, 100)
	if d := r.aDials.Dials(); d != 1 {
		t.Errorf("osd.1 dialed %d times, want 1", d)
	}
	r.checkWaits(t, 1)
	r.checkNoLinkReplaced(t)
}

// TestWaitThenThePeersDialFails: WAIT promised the peer's link; when the
// peer's dial fails instead, the dial that got WAIT dials again at once
// (not after its minute of backoff), and the peer, its own dial over,
// accepts it.
func TestWaitThenThePeersDialFails(t *testing.T) {
	r, release := newWaitRace(t)
	release(true)
	r.upAndExactlyOnce(t, 100)
	if da, db := r.aDials.Dials(), r.bDials.Dials(); da != 2 || db != 1 {
		t.Errorf("osd.1 dialed %d times, osd.2 %d; want 2 and 1 (osd.2 backs off a minute)", da, db)
	}
	r.checkWaits(t, 1)
}

// TestLateDialFindsTheSessionAttached: osd.2's dial to osd.1 cannot be
// interrupted and gets through only after osd.2 accepted osd.1's dial
// (which it did, its own dial not having reached osd.1). It must stop
// before it asks for the session, so that the working link stays: no
// WAIT, no link replaced, no second dial, exactly once both ways.
func TestLateDialFindsTheSessionAttached(t *testing.T) {
	r := newRacePair(t)
	held, release := r.bDials.HoldDials()
	t.Cleanup(release)
	r.connect(t, false)
	waitHeld(t, held, "osd.2's dial")
	r.connect(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.ca.WaitReady(ctx); err != nil {
		t.Fatalf("osd.1's dial not accepted: %v (osd.2: %v)", err, r.cb)
	}
	release()
	// The late link reaches osd.1 and closes before its HELLO.
	msgrtest.Eventually(t, 10*time.Second, "osd.2's late link closed at osd.1", func() bool {
		return r.a.Stats().HandshakeFailures[msgr.HandshakeClosed] == 1
	})
	r.upAndExactlyOnce(t, 100)
	if d := r.bDials.Dials(); d != 1 {
		t.Errorf("osd.2 dialed %d times, want 1", d)
	}
	r.checkWaits(t, 0)
	r.checkNoLinkReplaced(t)
}

// TestStaleResetAfterPeerRestart: osd.2 restarts while osd.1 redials it.
// osd.1's dial reaches the new instance and asks to resume the old
// session, and that request is held on the way; meanwhile the new
// instance dials osd.1, which takes it for the restart (one
// EventRemoteReset) and runs a new session over the accepted link. The
// held request then reaches osd.2, which answers SESSION_RESET: no such
// session. That answer is about the old session, long reset: osd.1 must
// not reset the new one under the link that carries it (it did, and the
// two sides' sequence numbers parted for good: messages dropped as
// duplicates, "peer acked seq 6 beyond the last sent 0").
func TestStaleResetAfterPeerRestart(t *testing.T) {
	ctx := context.Background()
	r := newRestart(t)
	a, ca, recA, addrA := r.a, r.ca, r.recA, r.addrA
	heldReq, releaseReq := r.gateA.HoldWrites(wire.TagSessionReq)
	t.Cleanup(func() { releaseReq(true) })
	b2, recB2 := r.restartB(t)
	waitHeld(t, heldReq, "osd.1's SESSION_REQUEST for the old session")

	cb2, err := b2.Connect(ctx, addrA, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	recA.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	exchange(t, ca, cb2, recA, recB2, 3, 4, 0, 10)
	faults := ca.Stats().Faults

	releaseReq(false)
	// osd.2 answers SESSION_RESET; osd.1's dial then ends, closing its link.
	msgrtest.Eventually(t, 10*time.Second, "osd.1's stale dial ended at osd.2", func() bool {
		return b2.Stats().HandshakeFailures[msgr.HandshakeClosed] == 1
	})
	exchange(t, ca, cb2, recA, recB2, 3, 4, 10, 100)
	var resets int
	for _, ev := range recA.Events() {
		if ev.Kind == msgr.EventRemoteReset {
			resets++
		}
	}
	if resets != 1 {
		t.Errorf("osd.1 got %d EventRemoteReset, want 1 (the restart)", resets)
	}
	if f := ca.Stats().Faults; f != faults {
		t.Errorf("osd.1's session faulted %d times after the stale answer", f-faults)
	}
	// The stale dial was abandoned, no failure: its session has a link.
	if f := a.Stats().HandshakeFailures; f != ([msgr.NumHandshakeReasons]uint64{}) {
		t.Errorf("osd.1 counted handshake failures %v", f)
	}
}

// TestRestartedPeerDialsInAfterReset: osd.2 restarts; osd.1's redial asks
// the new instance for the old session and is told SESSION_RESET, and
// before its next request gets an answer the new instance's own dial
// reaches osd.1 (and, the larger name, answers that request with WAIT).
// osd.1 reset its session once, on the SESSION_RESET, and queued messages
// since: the new instance's link must carry them, not be taken for a
// second restart that drops them (osd.1 had kept the old instance's nonce
// through the reset).
func TestRestartedPeerDialsInAfterReset(t *testing.T) {
	ctx := context.Background()
	r := newRestart(t)
	gateB := msgrtest.NewGate(tcp.Transport{})
	heldReset, releaseReset := gateB.HoldWrites(wire.TagSessionReset)
	t.Cleanup(func() { releaseReset(true) })
	b2, recB2 := r.restartB(t, gateB)
	waitHeld(t, heldReset, "osd.2's SESSION_RESET of the old session")

	// osd.2 dials osd.1 meanwhile: its request is held once it has
	// reached osd.1.
	heldReq, releaseReq := gateB.HoldWrites(wire.TagSessionReq)
	t.Cleanup(func() { releaseReq(true) })
	cb2, err := b2.Connect(ctx, r.addrA, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(t, heldReq, "osd.2's SESSION_REQUEST")

	releaseReset(false)
	r.recA.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	msgrtest.Eventually(t, 10*time.Second, "osd.1's next request answered with WAIT", func() bool {
		return r.ca.Stats().WaitsReceived == 1
	})
	// Queued on the reset session, with no link yet.
	for i := range 10 {
		if err := r.ca.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(3, uint64(i), nil), nil)); err != nil {
			t.Fatal(err)
		}
	}
	releaseReq(false)
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("the queued messages delivered: %d of 10; osd.1 %v; osd.2 %v; osd.1's events %v", recB2.Next(3), r.ca, cb2, r.recA.Events())
	}, func() bool { return recB2.Next(3) == 10 })
	exchange(t, r.ca, cb2, r.recA, recB2, 5, 6, 0, 100)
	var resets int
	for _, ev := range r.recA.Events() {
		if ev.Kind == msgr.EventRemoteReset {
			resets++
		}
	}
	if resets != 1 {
		t.Errorf("osd.1 got %d EventRemoteReset, want 1 (the restart)", resets)
	}
}

// restart is osd.1 (a, through gateA) with a session with osd.2 (b) that
// carried messages both ways; osd.2 is then killed, and osd.1's redial
// held by the gate until restartB.
type restart struct {
	a            *msgr.Messenger
	gateA        *msgrtest.Gate
	recA         *msgrtest.Recorder
	ca           *msgr.Conn
	addrA, addrB string
	releaseDial  func()
}

// restartLong keeps handshakes from timing out while a test holds them.
func restartLong(o *msgr.Options) { o.HandshakeTimeout = 5 * time.Minute }

func newRestart(t *testing.T) *restart {
	r := &restart{recA: msgrtest.NewRecorder(t), gateA: msgrtest.NewGate(tcp.Transport{})}
	r.a = tcpEnv.NewMessenger(t, "osd.1", r.recA, func(o *msgr.Options) {
		restartLong(o)
		o.Transports = []wire.Transport{r.gateA}
	})
	recB := msgrtest.NewRecorder(t)
	b := tcpEnv.NewMessenger(t, "osd.2", recB, restartLong)
	r.addrA, r.addrB = tcpEnv.Listen(t, r.a), tcpEnv.Listen(t, b)
	var err error
	if r.ca, err = r.a.Connect(context.Background(), r.addrB, "osd.2"); err != nil {
		t.Fatal(err)
	}
	exchange(t, r.ca, onlyConnOf(t, b), r.recA, recB, 1, 2, 0, 10)
	held, release := r.gateA.HoldDials()
	t.Cleanup(release)
	r.releaseDial = release
	b.Kill()
	waitHeld(t, held, "osd.1's redial")
	return r
}

// restartB starts osd.2 again on its address, through a gate of its own
// if gate is set, and lets osd.1's redial go on.
func (r *restart) restartB(t *testing.T, gate ...*msgrtest.Gate) (*msgr.Messenger, *msgrtest.Recorder) {
	rec := msgrtest.NewRecorder(t)
	b2 := tcpEnv.NewMessenger(t, "osd.2", rec, func(o *msgr.Options) {
		restartLong(o)
		if len(gate) > 0 {
			o.Transports = []wire.Transport{gate[0]}
		}
	})
	if _, err := b2.Listen(context.Background(), r.addrB); err != nil {
		t.Fatalf("relisten on %s: %v", r.addrB, err)
	}
	r.releaseDial()
	return b2, rec
}

// onlyConnOf waits for m's one session.
func onlyConnOf(t *testing.T, m *msgr.Messenger) *msgr.Conn {
	t.Helper()
	var c *msgr.Conn
	msgrtest.Eventually(t, 10*time.Second, "the accepted session", func() bool {
		for cc := range m.Conns() {
			c = cc
		}
		return c != nil
	})
	return c
}

// exchange sends messages from to from+n-1 each way, on ca as stream idA
// and on cb as stream idB, and waits for them, checked for order and
// exactly-once.
func exchange(t *testing.T, ca, cb *msgr.Conn, recA, recB *msgrtest.Recorder, idA, idB uint32, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := from; i < from+n; i++ {
		for id, c := range map[uint32]*msgr.Conn{idA: ca, idB: cb} {
			if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(id, uint64(i), nil), nil)); err != nil {
				t.Fatal(err)
			}
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "every message delivered", func() bool {
		return recA.Next(idB) == uint64(from+n) && recB.Next(idA) == uint64(from+n)
	})
	for _, rec := range []*msgrtest.Recorder{recA, recB} {
		if err := rec.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
