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
