package msgrtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

// The control slots (protocol.md §3.3, CONTROL_SLOTS): KEEPALIVE,
// KEEPALIVE_ACK and CLOSE take no credit, so a live peer is never silent
// and a side with no credit can still close. The idle timeouts below are
// generous for a loaded machine: a live link must never reach them.
const (
	ctlKeepalive = 250 * time.Millisecond
	ctlIdle      = 3 * time.Second
)

func ctlTimers(o *msgr.Options) { o.Keepalive, o.IdleTimeout = ctlKeepalive, ctlIdle }

// silentClient is the options of the peer that goes silent: its own idle
// timeout is out of the way, since what it sends vanishes (Gate.Swallow)
// and so does the credit it would return to us, which can silence us too.
func silentClient(noControlSlots bool) func(*msgr.Options) {
	return func(o *msgr.Options) {
		o.Keepalive, o.IdleTimeout = ctlKeepalive, time.Hour
		o.DefaultPolicy = msgr.LossyClient
		o.NoControlSlots = noControlSlots
	}
}

// gated returns a tweak that routes the messenger's links of env through
// a Gate, stored in *g.
func gated(env Env, g **Gate, more func(*msgr.Options)) func(*msgr.Options) {
	return func(o *msgr.Options) {
		o.Transports = slices.Clone(o.Transports)
		for i, tr := range o.Transports {
			if tr.Scheme() == env.Scheme {
				*g = NewGate(tr)
				o.Transports[i] = *g
			}
		}
		if more != nil {
			more(o)
		}
	}
}

// connectReady connects m to peer at addr and waits for the session.
func connectReady(t *testing.T, m *msgr.Messenger, addr string, peer msgr.EntityName) *msgr.Conn {
	t.Helper()
	c, err := m.Connect(context.Background(), addr, peer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// fillWindow has c send until its peer, whose dispatcher rec holds what
// it gets, holds all of c's window but the credit kept for control
// frames: c has one credit left and a message queued behind it. Under
// CONTROL_SLOTS only: without, see fillUntilStalled.
func fillWindow(t *testing.T, c, peer *msgr.Conn, rec *Recorder, id uint32) int {
	t.Helper()
	window, _ := fill(t, c, peer, rec, id, "the peer to hold the window but one", func(held, window int, st msgr.ConnStats) bool {
		return held == window-1 && st.SendCredits == 1
	})
	return window
}

// fillUntilStalled is fillWindow for a sender without CONTROL_SLOTS,
// whose keepalives and answers to the peer's cost a credit. One sent
// during the fill takes a slot that the peer returns only on a frame it
// sends anyway (a keepalive), and the answer to that keepalive spends it
// again: the sender then stalls one message short. It waits until c
// stalls (everything it sent held, at least window-2 messages, at most
// one credit left, messages queued) and returns the window and how many
// messages the peer holds.
func fillUntilStalled(t *testing.T, c, peer *msgr.Conn, rec *Recorder, id uint32) (window, held int) {
	t.Helper()
	return fill(t, c, peer, rec, id, "the sender to stall", func(held, window int, st msgr.ConnStats) bool {
		return held >= window-2 && uint64(held) == st.MsgsSent && st.QueuedMsgs > 0 && st.SendCredits <= 1
	})
}

// fill has c send a window's worth of messages to its peer, whose
// dispatcher rec holds them, until done says of what the peer holds and
// c's stats that the fill is over (what says what that waits for). It
// returns the window and how many messages the peer holds.
func fill(t *testing.T, c, peer *msgr.Conn, rec *Recorder, id uint32, what string, done func(held, window int, st msgr.ConnStats) bool) (window, held int) {
	t.Helper()
	window = int(peer.Stats().RecvWindowMsgs)
	sendN(t, c, id, 0, window, func(int) int { return 16 })
	var st msgr.ConnStats
	EventuallyDescribed(t, 30*time.Second, func() string {
		return fmt.Sprintf("waiting for %s (held %d of %d; sender %+v)", what, held, window, st)
	}, func() bool {
		held, _ = rec.Held()
		st = c.Stats()
		return done(held, window, st)
	})
	return window, held
}

// waitIdleReset waits for the EventReset of a lossy session that timed
// out its silent link, and returns how long after start it came.
func waitIdleReset(t *testing.T, rec *Recorder, start time.Time) time.Duration {
	t.Helper()
	ev := rec.WaitEvent(t, msgr.EventReset, 10*ctlIdle)
	if !errors.Is(ev.Err, msgr.ErrIdleTimeout) {
		t.Fatalf("the session ended with %v, want the idle timeout", ev.Err)
	}
	return time.Since(start)
}

// silencedHoldingWindow sets up a server osd.0 that holds the whole
// window of a client, whose frames then stop reaching it (Gate.Swallow);
// noControlSlots makes the client a peer without CONTROL_SLOTS. A client,
// so that the server's end of the session is lossy and a fault ends it
// with its reason. It returns the server's recorder and session.
// Without CONTROL_SLOTS a fill can stall one message short
// (fillUntilStalled), and then the client has a credit beyond the
// reserved one, so its silence is rightly idleness: the setup is made
// again, on new messengers, until the server holds all but the reserved
// credit.
func silencedHoldingWindow(t *testing.T, env Env, noControlSlots bool) (*Recorder, *msgr.Conn) {
	for try := 1; ; try++ {
		srvRec := NewRecorder(t)
		srvRec.Hold(true)
		t.Cleanup(func() { srvRec.ReleaseHeld() })
		srv := env.NewMessenger(t, "osd.0", srvRec, ctlTimers)
		addr := env.Listen(t, srv)
		var gate *Gate
		cli := env.NewMessenger(t, "client.1", NewRecorder(t), gated(env, &gate, silentClient(noControlSlots)))
		c := connectReady(t, cli, addr, "osd.0")
		sc := onlyConn(t, srv)
		if !noControlSlots {
			fillWindow(t, c, sc, srvRec, 1)
			gate.Swallow(true)
			return srvRec, sc
		}
		window, held := fillUntilStalled(t, c, sc, srvRec, 1)
		if held == window-1 {
			gate.Swallow(true)
			return srvRec, sc
		}
		if try == 5 {
			t.Fatalf("try %d: the server holds %d messages of a window of %d when the client stalled, want %d", try, held, window, window-1)
		}
		// The pair left behind shuts down with the test.
		t.Logf("try %d: a control frame took a slot during the fill (held %d of %d); setting up again", try, held, window)
	}
}

// holdingPair is newPair with both dispatchers holding what they get,
// and the server's session.
func holdingPair(t *testing.T, env Env, tweak func(*msgr.Options)) (*pair, *msgr.Conn) {
	p := newPair(t, env, tweak, tweak)
	p.srvRec.Hold(true)
	p.cliRec.Hold(true)
	t.Cleanup(p.releaseBoth)
	return p, onlyConn(t, p.srv)
}

// releaseBoth has both dispatchers release what they hold and hold no
// more.
func (p *pair) releaseBoth() {
	for _, r := range []*Recorder{p.srvRec, p.cliRec} {
		r.Hold(false)
		r.ReleaseHeld()
	}
}

// testSilentPeerHoldingWindow: a peer that stops delivering while we hold
// its whole window is timed out like any silent peer. Without the control
// slots its silence would be our own back-pressure (it could send only on
// its reserved credit), and the idle timeout spared the link.
func testSilentPeerHoldingWindow(t *testing.T, env Env) {
	srvRec, _ := silencedHoldingWindow(t, env, false)
	took := waitIdleReset(t, srvRec, time.Now())
	t.Logf("the silent peer timed out %v after it went silent (IdleTimeout %v)", took, ctlIdle)
}

// testSilentOldPeerHoldingWindow: with a peer without CONTROL_SLOTS the
// rules are as before it: while we hold its window but the reserved
// credit, its silence is not idleness; once we release, it is.
func testSilentOldPeerHoldingWindow(t *testing.T, env Env) {
	srvRec, sc := silencedHoldingWindow(t, env, true)
	// The exemption is the point here: the link outlives several idle
	// timeouts while the window is held.
	time.Sleep(3 * ctlIdle)
	if st := sc.Stats(); st.Faults != 0 {
		t.Fatalf("the starved link of a peer without CONTROL_SLOTS timed out: %+v", st)
	}
	start := time.Now()
	srvRec.Hold(false)
	srvRec.ReleaseHeld()
	took := waitIdleReset(t, srvRec, start)
	t.Logf("timed out %v after the window was released", took)
}

// testOversizedBothWays: two sides that each hold a message of the other
// larger than its byte window, for several idle timeouts, keep the link:
// neither has byte credit left, but keepalives need none.
func testOversizedBothWays(t *testing.T, env Env) {
	const window = 64 << 10
	tweak := func(o *msgr.Options) {
		ctlTimers(o)
		o.RecvWindowBytes = window
	}
	p, sc := holdingPair(t, env, tweak)
	sendN(t, p.conn, 1, 0, 1, func(int) int { return 2 * window })
	sendN(t, sc, 2, 0, 1, func(int) int { return 2 * window })
	Eventually(t, 30*time.Second, "each side holding the other's message", func() bool {
		a, _ := p.srvRec.Held()
		b, _ := p.cliRec.Held()
		return a == 1 && b == 1
	})
	// Held for longer than the idle timeout is the point.
	time.Sleep(2 * ctlIdle)
	for _, c := range []*msgr.Conn{p.conn, sc} {
		if st := c.Stats(); st.Faults != 0 {
			t.Fatalf("a link holding oversized messages both ways was dropped: %+v", st)
		}
	}
	p.releaseBoth()
	sendN(t, p.conn, 1, 1, 1, func(int) int { return 2 * window })
	waitCount(t, p.srvRec, 2, 30*time.Second, p.conn)
}

// testCloseWithoutCredit: a side that has spent its last credit (on a
// grant) still closes, and the peer ends the session as closed by the
// peer rather than redialing into a new one.
func testCloseWithoutCredit(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	p.cliRec.Hold(true)
	defer p.cliRec.ReleaseHeld()
	sc := onlyConn(t, p.srv)
	fillWindow(t, sc, p.conn, p.cliRec, 2)
	// The server's dispatcher frees half its window: the grant that says
	// so goes on the server's last credit.
	sendN(t, p.conn, 1, 0, int(sc.Stats().RecvWindowMsgs)/2+1, func(int) int { return 16 })
	Eventually(t, 30*time.Second, "the server out of credit", func() bool { return sc.Stats().SendCredits == 0 })
	sc.Close()
	ev := p.cliRec.WaitEvent(t, msgr.EventReset, 30*time.Second)
	if !errors.Is(ev.Err, msgr.ErrClosedByPeer) {
		t.Fatalf("the client's session ended with %v, want closed by the peer", ev.Err)
	}
	for _, ev := range p.cliRec.Events() {
		if ev.Kind == msgr.EventRemoteReset {
			t.Fatalf("the client redialed into a new session: %v", p.cliRec.Events())
		}
	}
}

// testKeepalivesFullWindows: keepalives every millisecond while both
// sides hold each other's whole window neither overrun a receiver (on
// RDMA every frame lands in a posted receive; the invariants build checks
// the grants against them) nor fault the link.
func testKeepalivesFullWindows(t *testing.T, env Env) {
	tweak := func(o *msgr.Options) { o.Keepalive, o.IdleTimeout = time.Millisecond, 10*time.Second }
	p, sc := holdingPair(t, env, tweak)
	wc := fillWindow(t, p.conn, sc, p.srvRec, 1)
	ws := fillWindow(t, sc, p.conn, p.cliRec, 2)
	// Some hundreds of keepalive intervals with every credit spent.
	time.Sleep(500 * time.Millisecond)
	for _, c := range []*msgr.Conn{p.conn, sc} {
		if st := c.Stats(); st.Faults != 0 || st.RTT <= 0 {
			t.Fatalf("full windows with keepalives every ms: %+v", st)
		}
	}
	p.releaseBoth()
	waitCount(t, p.srvRec, int64(wc), 30*time.Second, p.conn)
	waitCount(t, p.cliRec, int64(ws), 30*time.Second, sc)
}
