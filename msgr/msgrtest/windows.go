package msgrtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
)

// LinkWindows describes two transports for RunLinkWindows: a wide one,
// whose links take the configured window (tcp, mem), and a narrow one
// that caps it (MaxRecvWindow: rdma+*, a PostedTransport).
type LinkWindows struct {
	// Network makes the transports of one test: transports returns one
	// messenger's, both kinds (shared by both ends where the kind needs
	// it), and check, if not nil, tells whether the narrow one was ever
	// sent a frame it had no receive posted for.
	Network func(t *testing.T) (transports func() []wire.Transport, check func() error)
	// WideListen and NarrowListen are the server's listen addresses.
	WideListen, NarrowListen string
	// Window is the messengers' RecvWindowMsgs; NarrowWindow the narrow
	// transport's cap, below Window.
	Window, NarrowWindow int
}

// RunLinkWindows checks that a lossless session takes each link's window
// (docs/protocol.md §8.2, §8.10): it moves from the wide transport to the
// narrow one and back while both dispatchers hold more messages than the
// narrow window, and a dialer that restarted comes back over the narrow
// one (§6.4 rule 10) while the acceptor holds its old messages. Nothing
// is refused for the window, every message arrives once and in order, and
// nobody is granted a frame its peer has no receive for.
func RunLinkWindows(t *testing.T, lw LinkWindows) {
	t.Run("MoveBetweenTransports", func(t *testing.T) { testMoveBetweenWindows(t, lw) })
	t.Run("RestartedDialerOverNarrower", func(t *testing.T) { testRestartOverNarrower(t, lw) })
}

// windowPair is a server, listening on both transports, and its recorder.
type windowPair struct {
	lw                   LinkWindows
	transports           func() []wire.Transport
	check                func() error
	srv                  *msgr.Messenger
	srvRec               *Recorder
	wideAddr, narrowAddr string
}

func newWindowPair(t *testing.T, lw LinkWindows) *windowPair {
	p := &windowPair{lw: lw, srvRec: NewRecorder(t)}
	p.transports, p.check = lw.Network(t)
	p.srv = p.messenger(t, "osd.0", p.srvRec, nil)
	for _, l := range []struct {
		addr *string
		on   string
	}{{&p.wideAddr, lw.WideListen}, {&p.narrowAddr, lw.NarrowListen}} {
		var err error
		if *l.addr, err = p.srv.Listen(context.Background(), l.on); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// messenger starts a messenger with both transports, each passed through
// wrap if it is not nil.
func (p *windowPair) messenger(t *testing.T, name msgr.EntityName, d msgr.Dispatcher, wrap func(wire.Transport) wire.Transport) *msgr.Messenger {
	ts := p.transports
	if wrap != nil {
		ts = func() []wire.Transport {
			var out []wire.Transport
			for _, tr := range p.transports() {
				out = append(out, wrap(tr))
			}
			return out
		}
	}
	return Env{Transports: ts}.NewMessenger(t, name, d, func(o *msgr.Options) { o.RecvWindowMsgs = p.lw.Window })
}

func (p *windowPair) checkNarrow(t *testing.T) {
	t.Helper()
	if p.check == nil {
		return
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

func testMoveBetweenWindows(t *testing.T, lw LinkWindows) {
	p := newWindowPair(t, lw)
	wide, narrow := uint64(lw.Window), uint64(lw.NarrowWindow)
	gates := map[string]*Gate{}
	cliRec := NewRecorder(t)
	cli := p.messenger(t, "osd.1", cliRec, func(tr wire.Transport) wire.Transport {
		g := NewGate(tr)
		gates[tr.Scheme()] = g
		return g
	})
	wideScheme, narrowScheme := schemeOf(t, p.wideAddr), schemeOf(t, p.narrowAddr)

	c, err := cli.Connect(context.Background(), p.wideAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	sc := onlyConn(t, p.srv)
	p.srvRec.Hold(true)
	cliRec.Hold(true)
	held := 2*lw.NarrowWindow + 4 // more than the narrow window, less than the wide
	sendRun(t, c, 1, 0, held)
	sendRun(t, sc, 2, 0, held)
	waitHeld(t, p.srvRec, held, "osd.0")
	waitHeld(t, cliRec, held, "osd.1")
	waitWindow(t, c, wide, "osd.1 over "+wideScheme)
	waitWindow(t, sc, wide, "osd.0 over "+wideScheme)

	// The peer comes back over the narrow transport, as an OSD whose
	// cluster network moved from tcp to rdma+verbs.
	gates[wideScheme].Down()
	Eventually(t, 10*time.Second, "the first link's fault", func() bool { return c.Stats().Faults == 1 })
	if c2, err := cli.Connect(context.Background(), p.narrowAddr, "osd.0"); err != nil || c2 != c {
		t.Fatalf("Connect over %s: %v, %v; want the session %v", narrowScheme, c2, err, c)
	}
	waitWindow(t, c, narrow, "osd.1 over "+narrowScheme)
	waitWindow(t, sc, narrow, "osd.0 over "+narrowScheme)
	sendRun(t, c, 1, held, 30)
	sendRun(t, sc, 2, held, 30)
	// Each side holds more frames of an earlier link than the new
	// window: its grant is the one frame a grant frame needs, and no
	// message can go until the dispatcher lets go.
	for who, conn := range map[string]*msgr.Conn{"osd.1": c, "osd.0": sc} {
		if st := conn.Stats(); st.SendCredits > 1 {
			t.Fatalf("%s may send %d frames while its peer holds %d messages on a window of %d", who, st.SendCredits, held, narrow)
		}
	}
	for _, rec := range []*Recorder{p.srvRec, cliRec} {
		rec.Hold(false)
		rec.ReleaseHeld()
	}
	waitNext(t, p.srvRec, 1, uint64(held+30), "osd.0")
	waitNext(t, cliRec, 2, uint64(held+30), "osd.1")
	p.checkNarrow(t)

	// And back over the wide transport: the window grows back.
	gates[narrowScheme].Down()
	gates[wideScheme].Up()
	Eventually(t, 10*time.Second, "the second link's fault", func() bool { return c.Stats().Faults == 2 })
	if _, err := cli.Connect(context.Background(), p.wideAddr, "osd.0"); err != nil {
		t.Fatal(err)
	}
	waitWindow(t, c, wide, "osd.1 back over "+wideScheme)
	waitWindow(t, sc, wide, "osd.0 back over "+wideScheme)
	sendRun(t, c, 1, held+30, 10)
	sendRun(t, sc, 2, held+30, 10)
	waitNext(t, p.srvRec, 1, uint64(held+40), "osd.0")
	waitNext(t, cliRec, 2, uint64(held+40), "osd.1")
	if st := c.Stats(); st.Faults != 2 {
		t.Fatalf("%d link faults, want the 2 the test made", st.Faults)
	}
}

func testRestartOverNarrower(t *testing.T, lw LinkWindows) {
	p := newWindowPair(t, lw)
	narrow := uint64(lw.NarrowWindow)
	cli := p.messenger(t, "osd.1", NewRecorder(t), nil)
	c, err := cli.Connect(context.Background(), p.wideAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	p.srvRec.Hold(true)
	held := lw.NarrowWindow + 4
	sendRun(t, c, 1, 0, held)
	waitHeld(t, p.srvRec, held, "osd.0")
	sc := onlyConn(t, p.srv)
	waitWindow(t, sc, uint64(lw.Window), "osd.0 over "+schemeOf(t, p.wideAddr))

	cli.Kill()
	cli2 := p.messenger(t, "osd.1", NewRecorder(t), nil)
	c2, err := cli2.Connect(context.Background(), p.narrowAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	ev := p.srvRec.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	if !errors.Is(ev.Err, msgr.ErrRemoteReset) || ev.Conn != sc {
		t.Fatalf("event %+v, want osd.0's session reset for the restarted peer", ev)
	}
	waitWindow(t, sc, narrow, "osd.0 over the narrow transport")
	waitWindow(t, c2, narrow, "osd.1 (restarted) over the narrow transport")
	sendRun(t, c2, 2, 0, 10)
	// The old incarnation's messages still take their room.
	if st := c2.Stats(); st.SendCredits > 1 {
		t.Fatalf("the restarted peer may send %d frames while osd.0 holds %d messages on a window of %d", st.SendCredits, held, narrow)
	}
	p.srvRec.Hold(false)
	if n := p.srvRec.ReleaseHeld(); n != held {
		t.Fatalf("released %d held messages, want %d", n, held)
	}
	waitNext(t, p.srvRec, 2, 10, "osd.0")
	p.checkNarrow(t)
}

func schemeOf(t *testing.T, addr string) string {
	t.Helper()
	a, err := msgr.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	return a.Scheme
}

// sendRun sends messages start..start+n-1 of sender id on c.
func sendRun(t *testing.T, c *msgr.Conn, id uint32, start, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := start; i < start+n; i++ {
		data := fmt.Appendf(nil, "message %d of %d", i, id)
		if err := c.Send(ctx, msgr.NewMessage(1, Payload(id, uint64(i), data), data)); err != nil {
			t.Fatalf("send %d of %d: %v", i, id, err)
		}
	}
}

func waitHeld(t *testing.T, rec *Recorder, n int, who string) {
	t.Helper()
	Eventually(t, 10*time.Second, fmt.Sprintf("%d messages held by %s", n, who), func() bool {
		held, _ := rec.Held()
		return held == n
	})
}

func waitNext(t *testing.T, rec *Recorder, id uint32, n uint64, who string) {
	t.Helper()
	EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%s has %d of sender %d's messages, want %d (%v)", who, rec.Next(id), id, n, rec.Err())
	}, func() bool { return rec.Next(id) >= n })
	if err := rec.Err(); err != nil {
		t.Fatalf("%s: %v", who, err)
	}
}

// waitWindow waits until the link attached to c has a receive window of w.
func waitWindow(t *testing.T, c *msgr.Conn, w uint64, who string) {
	t.Helper()
	EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%s: receive window %d, want %d (%v)", who, c.Stats().RecvWindowMsgs, w, c)
	}, func() bool { return c.Stats().RecvWindowMsgs == w })
}

// onlyConn waits for m's one session.
func onlyConn(t *testing.T, m *msgr.Messenger) *msgr.Conn {
	t.Helper()
	var c *msgr.Conn
	Eventually(t, 10*time.Second, "the accepted session", func() bool {
		n := 0
		for cc := range m.Conns() {
			c, n = cc, n+1
		}
		return n == 1
	})
	return c
}
