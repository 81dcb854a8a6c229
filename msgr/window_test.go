package msgr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// The link windows tests run a lossless session over "mem" (no cap on the
// window, as tcp) and "memrdma" (a PostedTransport: at most 8 credits,
// each a posted receive, as rdma+*), with a configured window of 32.
const (
	wideWindow   = 32
	postedWindow = 8
)

// windowEnv is an Env of one mem and one memrdma network, shared by every
// messenger made from it; wrap may put a messenger's transports behind
// gates.
func windowEnv(mem *msgrtest.MemTransport, posted *msgrtest.PostedTransport, wrap func(wire.Transport) wire.Transport) msgrtest.Env {
	if wrap == nil {
		wrap = func(t wire.Transport) wire.Transport { return t }
	}
	return msgrtest.Env{Scheme: "mem", Transports: func() []wire.Transport { return []wire.Transport{wrap(mem), wrap(posted)} }}
}

func wideWindowOpts(o *msgr.Options) { o.RecvWindowMsgs = wideWindow }

// sendRun sends messages start..start+n-1 of sender id on c.
func sendRun(t *testing.T, c *msgr.Conn, id uint32, start, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := start; i < start+n; i++ {
		data := []byte(fmt.Sprintf("message %d of %d", i, id))
		if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(id, uint64(i), data), data)); err != nil {
			t.Fatalf("send %d of %d: %v", i, id, err)
		}
	}
}

func waitHeld(t *testing.T, rec *msgrtest.Recorder, n int, who string) {
	t.Helper()
	msgrtest.Eventually(t, 10*time.Second, fmt.Sprintf("%d messages held by %s", n, who), func() bool {
		held, _ := rec.Held()
		return held == n
	})
}

func waitNext(t *testing.T, rec *msgrtest.Recorder, id uint32, n uint64, who string) {
	t.Helper()
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%s has %d of sender %d's messages, want %d (%v)", who, rec.Next(id), id, n, rec.Err())
	}, func() bool { return rec.Next(id) >= n })
	if err := rec.Err(); err != nil {
		t.Fatalf("%s: %v", who, err)
	}
}

// waitWindow waits until the link attached to c has a receive window of w.
func waitWindow(t *testing.T, c *msgr.Conn, w uint64, who string) {
	t.Helper()
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%s: receive window %d, want %d (%v)", who, c.Stats().RecvWindowMsgs, w, c)
	}, func() bool { return c.Stats().RecvWindowMsgs == w })
}

func onlyConn(t *testing.T, m *msgr.Messenger) *msgr.Conn {
	t.Helper()
	var c *msgr.Conn
	msgrtest.Eventually(t, 10*time.Second, "the accepted session", func() bool {
		n := 0
		for cc := range m.Conns() {
			c, n = cc, n+1
		}
		return n == 1
	})
	return c
}

// TestSessionMovesBetweenWindows: a lossless session that came up over a
// transport with a wide window comes back over one that posts fewer
// receives while both dispatchers hold more messages than the new window,
// then over the wide one again. Each link takes its transport's window at
// both ends; what is held still counts against it, so neither side is
// granted a frame its peer has no receive for; everything is delivered
// once, in order.
func TestSessionMovesBetweenWindows(t *testing.T) {
	mem, posted := msgrtest.NewMemTransport(), msgrtest.NewPostedTransport("memrdma", postedWindow)
	srvEnv := windowEnv(mem, posted, nil)
	gates := map[string]*msgrtest.Gate{}
	cliEnv := windowEnv(mem, posted, func(t wire.Transport) wire.Transport {
		g := msgrtest.NewGate(t)
		gates[t.Scheme()] = g
		return g
	})
	srvRec, cliRec := msgrtest.NewRecorder(t), msgrtest.NewRecorder(t)
	srv := srvEnv.NewMessenger(t, "osd.0", srvRec, wideWindowOpts)
	wideAddr := srvEnv.Listen(t, srv)
	narrowAddr, err := srv.Listen(context.Background(), "memrdma://narrow")
	if err != nil {
		t.Fatal(err)
	}
	cli := cliEnv.NewMessenger(t, "osd.1", cliRec, wideWindowOpts)

	c, err := cli.Connect(context.Background(), wideAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	sc := onlyConn(t, srv)
	srvRec.Hold(true)
	cliRec.Hold(true)
	const held = 20 // more than postedWindow
	sendRun(t, c, 1, 0, held)
	sendRun(t, sc, 2, 0, held)
	waitHeld(t, srvRec, held, "osd.0")
	waitHeld(t, cliRec, held, "osd.1")
	waitWindow(t, c, wideWindow, "osd.1 over mem")
	waitWindow(t, sc, wideWindow, "osd.0 over mem")

	// The peer comes back over memrdma, as an OSD whose cluster network
	// moved from tcp to rdma+verbs.
	gates["mem"].Down()
	msgrtest.Eventually(t, 10*time.Second, "the mem link's fault", func() bool { return c.Stats().Faults == 1 })
	if c2, err := cli.Connect(context.Background(), narrowAddr, "osd.0"); err != nil || c2 != c {
		t.Fatalf("Connect over memrdma: %v, %v; want the session %v", c2, err, c)
	}
	waitWindow(t, c, postedWindow, "osd.1 over memrdma")
	waitWindow(t, sc, postedWindow, "osd.0 over memrdma")
	sendRun(t, c, 1, held, 30)
	sendRun(t, sc, 2, held, 30)
	// Each side holds 20 frames of an earlier link, more than the new
	// window: its grant is the one frame a grant frame needs, and no
	// message can go until the dispatcher lets go.
	for who, conn := range map[string]*msgr.Conn{"osd.1": c, "osd.0": sc} {
		if st := conn.Stats(); st.SendCredits > 1 {
			t.Fatalf("%s may send %d frames while its peer holds %d messages on a window of %d", who, st.SendCredits, held, postedWindow)
		}
	}
	for _, rec := range []*msgrtest.Recorder{srvRec, cliRec} {
		rec.Hold(false)
		rec.ReleaseHeld()
	}
	waitNext(t, srvRec, 1, held+30, "osd.0")
	waitNext(t, cliRec, 2, held+30, "osd.1")
	if err := posted.Err(); err != nil {
		t.Fatal(err)
	}
	if most := posted.MostTaken(); most <= 4 || most > postedWindow {
		t.Fatalf("at most %d receives of a memrdma link taken at once, want more than 4 and at most %d", most, postedWindow)
	}

	// And back over mem: the window grows back.
	gates["memrdma"].Down()
	gates["mem"].Up()
	msgrtest.Eventually(t, 10*time.Second, "the memrdma link's fault", func() bool { return c.Stats().Faults == 2 })
	if _, err := cli.Connect(context.Background(), wideAddr, "osd.0"); err != nil {
		t.Fatal(err)
	}
	waitWindow(t, c, wideWindow, "osd.1 back over mem")
	waitWindow(t, sc, wideWindow, "osd.0 back over mem")
	sendRun(t, c, 1, held+30, 10)
	sendRun(t, sc, 2, held+30, 10)
	waitNext(t, srvRec, 1, held+40, "osd.0")
	waitNext(t, cliRec, 2, held+40, "osd.1")
	if st := c.Stats(); st.Faults != 2 {
		t.Fatalf("%d link faults, want the 2 the test made", st.Faults)
	}
}

// TestRestartedDialerOverSmallerWindow: a peer that restarts and comes
// back over a transport with a smaller window than its old session's is
// accepted (its session reset, §6.4 rule 10), not refused for the window,
// and the messages of its old incarnation the acceptor still holds count
// against the new link's window until they are released.
func TestRestartedDialerOverSmallerWindow(t *testing.T) {
	mem, posted := msgrtest.NewMemTransport(), msgrtest.NewPostedTransport("memrdma", postedWindow)
	env := windowEnv(mem, posted, nil)
	srvRec := msgrtest.NewRecorder(t)
	srv := env.NewMessenger(t, "osd.0", srvRec, wideWindowOpts)
	wideAddr := env.Listen(t, srv)
	narrowAddr, err := srv.Listen(context.Background(), "memrdma://narrow")
	if err != nil {
		t.Fatal(err)
	}
	cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), wideWindowOpts)
	c, err := cli.Connect(context.Background(), wideAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	srvRec.Hold(true)
	const held = 12 // more than postedWindow
	sendRun(t, c, 1, 0, held)
	waitHeld(t, srvRec, held, "osd.0")
	sc := onlyConn(t, srv)
	waitWindow(t, sc, wideWindow, "osd.0 over mem")

	cli.Kill()
	cli2 := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), wideWindowOpts)
	c2, err := cli2.Connect(context.Background(), narrowAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	ev := srvRec.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	if !errors.Is(ev.Err, msgr.ErrRemoteReset) || ev.Conn != sc {
		t.Fatalf("event %+v, want osd.0's session reset for the restarted peer", ev)
	}
	waitWindow(t, sc, postedWindow, "osd.0 over memrdma")
	waitWindow(t, c2, postedWindow, "osd.1 (restarted) over memrdma")
	sendRun(t, c2, 2, 0, 10)
	if st := c2.Stats(); st.SendCredits > 1 {
		t.Fatalf("the restarted peer may send %d frames while osd.0 holds %d messages on a window of %d", st.SendCredits, held, postedWindow)
	}
	srvRec.Hold(false)
	if n := srvRec.ReleaseHeld(); n != held {
		t.Fatalf("released %d held messages, want %d", n, held)
	}
	waitNext(t, srvRec, 2, 10, "osd.0")
	if err := posted.Err(); err != nil {
		t.Fatal(err)
	}
}
