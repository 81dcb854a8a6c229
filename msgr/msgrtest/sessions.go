package msgrtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

func testManyConnections(t *testing.T, env Env) {
	srvRec := NewRecorder(t)
	// A thousand handshakes at once on two loaded cores (CI runs packages
	// in parallel, under -race) can outlast the 10 s default, and a lossy
	// client whose handshake is cut loses its messages by design: this
	// test is about many sessions, not handshake speed.
	slow := func(o *msgr.Options) { o.HandshakeTimeout = 2 * time.Minute }
	srv := env.NewMessenger(t, "osd.0", srvRec, slow)
	addr := env.Listen(t, srv)
	conns := env.n(1000)
	const perConn = 5
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := env.NewMessenger(t, msgr.EntityName(fmt.Sprintf("client.%d", i)), NewRecorder(t), func(o *msgr.Options) {
				slow(o)
				o.DefaultPolicy = msgr.LossyClient
			})
			c, err := cli.Connect(context.Background(), addr, "osd.0")
			if err != nil {
				errs <- err
				return
			}
			for j := range perConn {
				if err := c.Send(context.Background(), msgr.NewMessage(1, Payload(uint32(i), uint64(j), nil), nil)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitCount(t, srvRec, int64(conns*perConn), 60*time.Second, nil)
	n := 0
	for range srv.Conns() {
		n++
	}
	if n != conns {
		t.Fatalf("server has %d sessions, want %d", n, conns)
	}
}

func testPeerRestart(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	sendN(t, p.conn, 1, 0, 100, func(int) int { return 10 })
	waitCount(t, p.srvRec, 100, 10*time.Second, p.conn)
	// The server dies without a word and restarts on the same address:
	// a new instance with no session.
	p.srv.Kill()
	restarted := NewRecorder(t)
	srv2 := env.NewMessenger(t, "osd.0", restarted, nil)
	a, _ := msgr.ParseAddr(p.addr)
	if _, err := srv2.Listen(context.Background(), p.addr); err != nil {
		t.Fatalf("relisten on %s: %v", a, err)
	}
	// The client reconnects, hears SESSION_RESET, and must not replay
	// into the new instance as if nothing happened.
	ev := p.cliRec.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	if !errors.Is(ev.Err, msgr.ErrRemoteReset) {
		t.Fatalf("event %v: %v", ev.Kind, ev.Err)
	}
	// The session goes on, fresh, with the new instance.
	sendN(t, p.conn, 3, 0, 20, func(int) int { return 10 })
	waitCount(t, restarted, 20, 10*time.Second, p.conn)
}

func testDialerRestart(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	sendN(t, p.conn, 1, 0, 50, func(int) int { return 10 })
	waitCount(t, p.srvRec, 50, 10*time.Second, p.conn)
	// The client dies without a word (no CLOSE) and comes back: same
	// name, a new instance, dialing again.
	p.cli.Kill()
	cli2 := env.NewMessenger(t, "osd.1", NewRecorder(t), nil)
	c2, err := cli2.Connect(context.Background(), p.addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	ev := p.srvRec.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	if !errors.Is(ev.Err, msgr.ErrRemoteReset) {
		t.Fatalf("remote reset event err %v", ev.Err)
	}
	// The new instance's messages start a fresh sequence.
	before := p.srvRec.count.Load()
	sendN(t, c2, 2, 0, 10, func(int) int { return 1 })
	waitCount(t, p.srvRec, before+10, 10*time.Second, c2)
}

func testSimultaneousConnect(t *testing.T, env Env) {
	recA, recB := NewRecorder(t), NewRecorder(t)
	a := env.NewMessenger(t, "osd.1", recA, nil)
	b := env.NewMessenger(t, "osd.2", recB, nil)
	addrA, addrB := env.Listen(t, a), env.Listen(t, b)
	n := env.n(2000)
	var ca, cb *msgr.Conn
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var err error
		if ca, err = a.Connect(context.Background(), addrB, "osd.2"); err != nil {
			t.Error(err)
		}
	}()
	go func() {
		defer wg.Done()
		var err error
		if cb, err = b.Connect(context.Background(), addrA, "osd.1"); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	exchangeOneSession(t, a, b, ca, cb, recA, recB, n)
}

// exchangeOneSession sends n messages each way on a's session ca and b's
// cb, waits for them (the recorders check order and exactly-once), and
// checks that each side has that one session.
func exchangeOneSession(t *testing.T, a, b *msgr.Messenger, ca, cb *msgr.Conn, recA, recB *Recorder, n int) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sendN(t, ca, 1, 0, n, func(i int) int { return i % 100 }) }()
	go func() { defer wg.Done(); sendN(t, cb, 2, 0, n, func(i int) int { return i % 100 }) }()
	wg.Wait()
	waitCount(t, recB, int64(n), 30*time.Second, ca)
	waitCount(t, recA, int64(n), 30*time.Second, cb)
	count := func(m *msgr.Messenger) (k int) {
		for range m.Conns() {
			k++
		}
		return k
	}
	if count(a) != 1 || count(b) != 1 {
		t.Fatalf("sessions: a has %d, b has %d; want one each", count(a), count(b))
	}
}

// testSimultaneousConnectUnreachable: both sides dial, but the larger
// name's dial cannot reach the smaller (it hangs in the transport's
// connect). Its acceptor must take the smaller name's dial at once, not
// answer WAIT while its own dial cannot get through, and its own dial must
// then end: one link, no WAIT, no reconnect, exactly once both ways.
func testSimultaneousConnectUnreachable(t *testing.T, env Env) {
	ctx := context.Background()
	recA, recB := NewRecorder(t), NewRecorder(t)
	// Far above the deadlines below: were the hung dial answered with
	// WAITs, the session would not come up before the test gives up.
	long := func(o *msgr.Options) { o.HandshakeTimeout = 5 * time.Minute }
	a := env.NewMessenger(t, "osd.1", recA, long)
	var gate *Gate
	b := env.NewMessenger(t, "osd.2", recB, func(o *msgr.Options) {
		long(o)
		o.Transports = slices.Clone(o.Transports)
		for i, tr := range o.Transports {
			if tr.Scheme() == env.Scheme {
				gate = NewGate(tr)
				o.Transports[i] = gate
			}
		}
	})
	gate.HangDials(true)
	addrA, addrB := env.Listen(t, a), env.Listen(t, b)

	cb, err := b.Connect(ctx, addrA, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, "osd.2's dial hanging", func() bool { return gate.Hanging() == 1 })
	ca, err := a.Connect(ctx, addrB, "osd.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*msgr.Conn{ca, cb} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.WaitReady(wctx)
		cancel()
		if err != nil {
			t.Fatalf("session not up: %v (osd.1: %v; osd.2: %v)", err, ca, cb)
		}
	}
	Eventually(t, 10*time.Second, "osd.2's hung dial given up", func() bool { return gate.Hanging() == 0 })

	exchangeOneSession(t, a, b, ca, cb, recA, recB, env.n(500))

	// osd.2's connect loop ended with its abandoned dial: it would have
	// dialed again (every 50 ms at most) while the messages went.
	if d := gate.Dials(); d != 1 {
		t.Errorf("osd.2 dialed %d times, want 1", d)
	}
	sa, sb := ca.Stats(), cb.Stats()
	if sa.WaitsReceived != 0 || sb.WaitsSent != 0 {
		t.Errorf("WAITs: osd.1 got %d, osd.2 sent %d; want none", sa.WaitsReceived, sb.WaitsSent)
	}
	if sa.Reconnects != 0 || sb.Reconnects != 0 || sa.Faults != 0 || sb.Faults != 0 {
		t.Errorf("the link was replaced: osd.1 %+v; osd.2 %+v", sa, sb)
	}
}

func testKeepalive(t *testing.T, env Env) {
	p := newPair(t, env, nil, func(o *msgr.Options) {
		o.Keepalive, o.IdleTimeout = 5*time.Millisecond, 10*time.Second
	})
	Eventually(t, 10*time.Second, "keepalive RTT", func() bool { return p.conn.Stats().RTT > 0 })
}

func testCloseTellsPeer(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	sendN(t, p.conn, 1, 0, 10, func(int) int { return 1 })
	waitCount(t, p.srvRec, 10, 10*time.Second, p.conn)
	p.conn.Close()
	// 30 s, not 10: a lost event still fails, and a CI run with every
	// package under -race on two cores once took longer than 10 s.
	ev := p.srvRec.WaitEvent(t, msgr.EventReset, 30*time.Second)
	if !errors.Is(ev.Err, msgr.ErrClosedByPeer) {
		t.Fatalf("server saw %v", ev.Err)
	}
	if err := p.conn.Send(context.Background(), msgr.NewMessage(1, nil, nil)); !errors.Is(err, msgr.ErrClosed) {
		t.Fatalf("send on closed conn: %v", err)
	}
}

func testNoGoroutineLeak(t *testing.T, env Env) {
	before := runtime.NumGoroutine()
	rec := NewRecorder(t)
	o := msgr.Options{Name: "osd.0", Dispatcher: rec, Logger: Logger(t)}
	var release func()
	o.Transports, release = env.transports(t)
	defer release() // on failure; closing twice is harmless
	if env.Tweak != nil {
		env.Tweak(&o)
	}
	srv, err := msgr.New(o)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen(context.Background(), env.Scheme+"://"+env.hostOrAuto())
	if err != nil {
		t.Fatal(err)
	}
	o.Name, o.Dispatcher = "osd.1", NewRecorder(t)
	if env.Tweak != nil {
		env.Tweak(&o) // again: what it sets may depend on the name (a keyring)
	}
	cli, err := msgr.New(o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	sendN(t, c, 1, 0, 1000, func(i int) int { return i })
	waitCount(t, rec, 1000, 30*time.Second, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cli.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	release() // an RDMA transport's pollers are goroutines too
	Eventually(t, 10*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// testCloseWhileDown: osd.0 closes a lossless session while its link is
// down, so no CLOSE goes; osd.1, which knows osd.0's address, redials to
// resume. It must end the session as a delivered CLOSE would have made it
// (EventReset with ErrClosedByPeer, its queued messages dropped, no
// redial), and osd.0 must not take it back into a new session; a new
// session afterwards works. closerDialed: osd.0 dialed the session (and
// osd.1 learned osd.0's address by a Connect of its own), else osd.1 did.
func testCloseWhileDown(t *testing.T, env Env, closerDialed bool) {
	ctx := context.Background()
	recX, recY := NewRecorder(t), NewRecorder(t)
	x, gateX := newGated(t, env, "osd.0", recX)
	y, gateY := newGated(t, env, "osd.1", recY)
	addrX, addrY := env.Listen(t, x), env.Listen(t, y)

	var cx, cy *msgr.Conn
	var err error
	if closerDialed {
		if cx, err = x.Connect(ctx, addrY, "osd.1"); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cx)
		cy = onlyConn(t, y)
	} else {
		if cy, err = y.Connect(ctx, addrX, "osd.0"); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cy)
		cx = onlyConn(t, x)
	}
	// osd.1 learns where to redial (the same session, already open).
	if c, err := y.Connect(ctx, addrX, "osd.0"); err != nil || c != cy {
		t.Fatalf("osd.1's Connect: %v, %v; want its session %v", c, err, cy)
	}
	sendN(t, cy, 1, 0, 10, func(int) int { return 1 })
	waitCount(t, recX, 10, 10*time.Second, cy)
	// Acked, so that the messages queued below are all osd.1 has queued.
	Eventually(t, 10*time.Second, "osd.1's queue acked", func() bool { return cy.Stats().QueuedMsgs == 0 })
	accepts := len(eventsOf(recX, msgr.EventAccept))

	// osd.1's gate first: its dials fail before they reach osd.0 from now
	// on, so it counts no handshake failure of its own. osd.0's, when it
	// dials, may reach osd.1 before its gate goes down too: a handshake
	// that fails on osd.0.
	gateY.Down()
	gateX.Down()
	Eventually(t, 10*time.Second, "both sides to see the link fail", func() bool {
		return cx.Stats().Faults > 0 && cy.Stats().Faults > 0
	})
	cx.Close() // no link: the CLOSE cannot go
	const queued = 3
	sendN(t, cy, 1, 10, queued, func(int) int { return 1 })
	gateX.Up()
	gateY.Up()

	var ev msgr.Event
	Eventually(t, 30*time.Second, "osd.1 to hear of the close", func() bool {
		evs := append(eventsOf(recY, msgr.EventReset), eventsOf(recY, msgr.EventRemoteReset)...)
		if len(evs) > 0 {
			ev = evs[0]
		}
		return len(evs) > 0
	})
	if ev.Kind != msgr.EventReset || !errors.Is(ev.Err, msgr.ErrClosedByPeer) || ev.Conn != cy {
		t.Fatalf("osd.1 got %v (%v), on the closed session: %v; want EventReset with ErrClosedByPeer", ev.Kind, ev.Err, ev.Conn == cy)
	}
	if ev.Dropped != queued {
		t.Errorf("Dropped = %d, want the %d messages osd.1 queued", ev.Dropped, queued)
	}
	if err := cy.Send(ctx, msgr.NewMessage(1, nil, nil)); !errors.Is(err, msgr.ErrClosed) {
		t.Fatalf("send on the closed session: %v", err)
	}
	// Neither side keeps a session: osd.1's connect loop ended, osd.0 made
	// none for the redial.
	Eventually(t, 10*time.Second, "no sessions left", func() bool {
		return x.Stats().Sessions == 0 && y.Stats().Sessions == 0
	})
	if n := len(eventsOf(recY, msgr.EventRemoteReset)); n != 0 {
		t.Errorf("osd.1 got %d EventRemoteReset", n)
	}
	// Told closed is no failure: not for osd.1, and not for osd.0 when the
	// link it answered on closes (but for its own dials, above).
	checked := map[string]*msgr.Messenger{"osd.1": y}
	if !closerDialed {
		checked["osd.0"] = x
	}
	for name, m := range checked {
		if f := m.Stats().HandshakeFailures; f != ([msgr.NumHandshakeReasons]uint64{}) {
			t.Errorf("%s counted handshake failures %v", name, f)
		}
	}

	// A new session is accepted as any.
	cy2, err := y.Connect(ctx, addrX, "osd.0")
	if err != nil || cy2 == cy {
		t.Fatalf("new Connect: %v, %v (the closed session is %v)", cy2, err, cy)
	}
	sendN(t, cy2, 2, 0, 5, func(int) int { return 1 })
	waitCount(t, recX, 15, 10*time.Second, cy2)
	// The accept event may follow the session's first messages.
	Eventually(t, 10*time.Second, "osd.0's accept of the new session", func() bool {
		return len(eventsOf(recX, msgr.EventAccept)) > accepts
	})
	if n := len(eventsOf(recX, msgr.EventAccept)); n != accepts+1 {
		t.Errorf("osd.0 accepted %d sessions since the close, want 1 (the new one)", n-accepts)
	}
	if n := len(eventsOf(recY, msgr.EventReset)); n != 1 {
		t.Errorf("osd.1 got %d EventReset, want 1", n)
	}
}

func waitReady(t testing.TB, c *msgr.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("session not up: %v (%v)", err, c)
	}
}

// eventsOf is the events of kind k that r got so far.
func eventsOf(r *Recorder, k msgr.EventKind) []msgr.Event {
	var out []msgr.Event
	for _, ev := range r.Events() {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// newGated starts a messenger for env whose transport of env's scheme
// goes through a Gate.
func newGated(t *testing.T, env Env, name msgr.EntityName, rec *Recorder) (*msgr.Messenger, *Gate) {
	var gate *Gate
	m := env.NewMessenger(t, name, rec, func(o *msgr.Options) {
		o.Transports = slices.Clone(o.Transports)
		for i, tr := range o.Transports {
			if tr.Scheme() == env.Scheme {
				gate = NewGate(tr)
				o.Transports[i] = gate
			}
		}
	})
	return m, gate
}

// testCloseWhileDownNewSession: osd.0 dialed a lossless session, then
// closes it while its link is down; osd.1, which has no address of osd.0,
// waits in standby and cannot ask. When osd.0 opens a new session with
// it, osd.1 must end the old one as the CLOSE would have (EventReset with
// ErrClosedByPeer, its queued messages dropped) and accept the new one as
// a new Conn, not take it for a restart of osd.0 (EventRemoteReset).
func testCloseWhileDownNewSession(t *testing.T, env Env) {
	ctx := context.Background()
	recX, recY := NewRecorder(t), NewRecorder(t)
	x, gateX := newGated(t, env, "osd.0", recX)
	y, gateY := newGated(t, env, "osd.1", recY)
	addrY := env.Listen(t, y)
	cx, err := x.Connect(ctx, addrY, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, cx)
	cy := onlyConn(t, y)
	sendN(t, cx, 1, 0, 10, func(int) int { return 1 })
	waitCount(t, recY, 10, 10*time.Second, cx)

	gateX.Down()
	gateY.Down()
	Eventually(t, 10*time.Second, "both sides to see the link fail", func() bool {
		return cx.Stats().Faults > 0 && cy.Stats().Faults > 0
	})
	cx.Close()
	const queued = 3 // osd.1's, in standby: they wait for osd.0 to dial
	sendN(t, cy, 2, 0, queued, func(int) int { return 1 })
	gateX.Up()
	gateY.Up()

	cx2, err := x.Connect(ctx, addrY, "osd.1")
	if err != nil || cx2 == cx {
		t.Fatalf("new Connect: %v, %v (the closed session is %v)", cx2, err, cx)
	}
	sendN(t, cx2, 3, 0, 5, func(int) int { return 1 })
	waitCount(t, recY, 15, 10*time.Second, cx2)

	resets := eventsOf(recY, msgr.EventReset)
	Eventually(t, 10*time.Second, "osd.1's old session to end", func() bool {
		resets = eventsOf(recY, msgr.EventReset)
		return len(resets) > 0
	})
	if ev := resets[0]; len(resets) != 1 || ev.Conn != cy || !errors.Is(ev.Err, msgr.ErrClosedByPeer) || ev.Dropped != queued {
		t.Fatalf("osd.1's resets: %d, the first on the old session: %v, err %v, dropped %d; want one, ErrClosedByPeer, %d dropped",
			len(resets), ev.Conn == cy, ev.Err, ev.Dropped, queued)
	}
	if n := len(eventsOf(recY, msgr.EventRemoteReset)); n != 0 {
		t.Errorf("osd.1 got %d EventRemoteReset", n)
	}
	var accepts []msgr.Event
	Eventually(t, 10*time.Second, "osd.1's accept of the new session", func() bool {
		accepts = eventsOf(recY, msgr.EventAccept)
		return len(accepts) > 1
	})
	if len(accepts) != 2 || accepts[1].Conn == cy {
		t.Errorf("osd.1 accepted %d times, the second into the old Conn: %v; want twice, the second a new Conn",
			len(accepts), accepts[1].Conn == cy)
	}
	if cy2 := onlyConn(t, y); cy2 == cy {
		t.Errorf("osd.1 keeps the closed session")
	}
	if err := cy.Send(ctx, msgr.NewMessage(1, nil, nil)); !errors.Is(err, msgr.ErrClosed) {
		t.Fatalf("send on the closed session: %v", err)
	}
}
