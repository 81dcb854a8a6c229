package msgr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// cutProxy forwards TCP connections to a target until it is cut: then it
// drops every connection it carries and refuses new ones until restored,
// as a network partition would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if cut {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return "tcp://" + p.ln.Addr().String() }

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestStandbySessionsReaped: peers that dial in with ever new names and go
// away leave lossless sessions waiting for them; after StandbyTimeout
// those are closed, counted and logged once (rate-limited). A peer that
// comes back within the bound resumes its session: every message exactly
// once, no reset on either side.
func TestStandbySessionsReaped(t *testing.T) {
	const (
		bound    = time.Second
		vanished = 40
	)
	rec := msgrtest.NewRecorder(t)
	srv, addr, logs := newLoggedServer(t, rec, func(o *msgr.Options) {
		o.StandbyTimeout = bound
		o.Keepalive, o.IdleTimeout = 50*time.Millisecond, 2*time.Second
	})
	a, _ := msgr.ParseAddr(addr)
	proxy := newCutProxy(t, a.Host)

	cliRec := msgrtest.NewRecorder(t)
	cli := tcpEnv.NewMessenger(t, "osd.77", cliRec, nil)
	c, err := cli.Connect(context.Background(), proxy.addr(), "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	send := func(n int) {
		for range n {
			if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(77, uint64(sent), nil), nil)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	send(100)
	msgrtest.Eventually(t, 10*time.Second, "the first messages", func() bool { return rec.Next(77) == 100 })

	// Peers with new names that complete a handshake and leave.
	for i := range vanished {
		r := dialRaw(t, addr)
		idleHandshake(t, r.c, fmt.Sprintf("osd.%d", 1000+i), uint64(i+1))
		r.c.Close()
	}
	msgrtest.Eventually(t, 10*time.Second, "their sessions in standby", func() bool {
		return srv.Stats().Sessions == vanished+1
	})

	// osd.77 drops off the network for a while, well within the bound,
	// with messages queued meanwhile.
	proxy.setCut(true)
	msgrtest.Eventually(t, 10*time.Second, "every link down", func() bool {
		return srv.InboundStats().Open == 0
	})
	send(100)
	gone := time.NewTimer(bound / 4) // how long osd.77 stays away
	<-gone.C
	proxy.setCut(false)
	msgrtest.Eventually(t, 10*time.Second, "osd.77 resumed", func() bool { return rec.Next(77) == 200 })

	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("the vanished peers reaped: %+v", srv.Stats())
	}, func() bool {
		st := srv.Stats()
		return st.SessionsReaped == vanished && st.Sessions == 1
	})
	send(10)
	msgrtest.Eventually(t, 10*time.Second, "osd.77 still served", func() bool { return rec.Next(77) == 210 })
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	// The reaper counts a session in Stats before its event reaches the
	// dispatcher: wait for the events too (CI once saw 39 of 40).
	expired := func() int {
		n := 0
		for _, ev := range rec.Events() {
			switch {
			case ev.Kind == msgr.EventReset && errors.Is(ev.Err, msgr.ErrSessionExpired):
				if ev.Conn.Peer() == "osd.77" {
					t.Fatal("the session of a peer that came back in time was reaped")
				}
				n++
			case ev.Kind == msgr.EventRemoteReset || ev.Kind == msgr.EventReset:
				t.Fatalf("server: %v of %s: %v", ev.Kind, ev.Conn.Peer(), ev.Err)
			}
		}
		return n
	}
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%d sessions reported expired, want %d", expired(), vanished)
	}, func() bool { return expired() >= vanished })
	if n := expired(); n != vanished {
		t.Fatalf("%d sessions reported expired, want %d", n, vanished)
	}
	for _, ev := range cliRec.Events() {
		if ev.Kind == msgr.EventRemoteReset || ev.Kind == msgr.EventReset {
			t.Fatalf("osd.77 lost its session: %v %v", ev.Kind, ev.Err)
		}
	}
	if n := strings.Count(logs.String(), "session expired"); n != 1 {
		t.Fatalf("%d log lines for %d reaped sessions, want 1 (rate-limited):\n%s", n, vanished, logs.String())
	}

	// osd.77 leaves for good, telling us: nothing is left.
	c.Close()
	msgrtest.Eventually(t, 10*time.Second, "no session left", func() bool { return srv.Stats().Sessions == 0 })
}
