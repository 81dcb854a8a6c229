package msgr_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestConnectionLimit: beyond Options.MaxConns accepted connections, new
// ones are closed at accept, counted and logged rate-limited; once one
// closes, a new session gets in and works.
func TestConnectionLimit(t *testing.T) {
	const limit = 3
	srv, addr, logs := newLoggedServer(t, echo, func(o *msgr.Options) { o.MaxConns = limit })
	a, err := msgr.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	// Peers that send a banner and sit in the handshake hold their slots.
	var held []net.Conn
	for range limit {
		held = append(held, holdInBanner(t, a.Host, "127.0.0.1"))
	}
	msgrtest.Eventually(t, 10*time.Second, "the held connections counted", func() bool {
		return srv.InboundStats().Open == limit
	})
	const over = 20
	for range over {
		r := dialRaw(t, addr)
		r.waitClosed(10 * time.Second)
	}
	if st := srv.InboundStats(); st.Refused != over || st.Open != limit {
		t.Fatalf("after %d connections over the limit: %+v", over, st)
	}
	if n := strings.Count(logs.String(), "connection limit reached"); n != 1 {
		t.Fatalf("%d log lines for %d refusals, want 1 (rate-limited):\n%s", n, over, logs.String())
	}

	// A slot frees when a held connection closes; a session takes it.
	held[0].Close()
	msgrtest.Eventually(t, 10*time.Second, "the closed connection released", func() bool {
		return srv.InboundStats().Open == limit-1
	})
	roundTrip(t, addr, "in", func() string { return fmt.Sprintf("%+v", srv.InboundStats()) })
	if st := srv.InboundStats(); st.Open != limit {
		t.Fatalf("with the session: %+v", st)
	}
	// Closing everything returns the count to zero.
	for c := range srv.Conns() {
		c.Close()
	}
	for _, h := range held[1:] {
		h.Close()
	}
	msgrtest.Eventually(t, 10*time.Second, "every slot released", func() bool {
		return srv.InboundStats().Open == 0
	})
}

// TestUnauthPerHostLimit: once more than half of MaxConns are open, one
// host may hold at most MaxUnauthPerHost accepted connections that have
// not authenticated; more from it are closed at accept and counted, while
// another host still gets in, and sessions that authenticated do not
// count. When a held connection goes, a session from that host gets in
// again. (wire's TestInboundPerHost has the bursts below half.)
func TestUnauthPerHostLimit(t *testing.T) {
	const perHost = 3 // with a session, the held connections fill half of MaxConns
	srv, addr, logs := newLoggedServer(t, echo, func(o *msgr.Options) { o.MaxUnauthPerHost, o.MaxConns = perHost, 2*(1+perHost) })
	a, err := msgr.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	describe := func() string { return fmt.Sprintf("%+v", srv.InboundStats()) }
	// An authenticated session first: it holds a connection but no
	// early place.
	roundTrip(t, addr, "before", describe)
	msgrtest.Eventually(t, 10*time.Second, "the session authenticated", func() bool {
		st := srv.InboundStats()
		return st.Open == 1 && st.Early == 0
	})
	hold := func(local string) net.Conn { return holdInBanner(t, a.Host, local) }
	var held []net.Conn
	for range perHost {
		held = append(held, hold("127.0.0.1"))
	}
	msgrtest.Eventually(t, 10*time.Second, "the held connections counted", func() bool {
		st := srv.InboundStats()
		return st.Open == 1+perHost && st.Early == perHost
	})
	const over = 5
	for range over {
		r := dialRaw(t, addr)
		r.waitClosed(10 * time.Second)
	}
	if st := srv.InboundStats(); st.RefusedPerHost != over || st.Refused != over || st.Early != perHost {
		t.Fatalf("after %d connections over the bound: %+v", over, st)
	}
	if n := strings.Count(logs.String(), "not yet authenticated"); n != 1 {
		t.Fatalf("%d log lines for %d refusals, want 1 (rate-limited):\n%s", n, over, logs.String())
	}
	// Another host is not held back.
	hold("127.0.0.2")
	msgrtest.Eventually(t, 10*time.Second, "the other host's connection counted", func() bool {
		return srv.InboundStats().Early == perHost+1
	})

	// A held connection goes: a new session from its host gets in.
	held[0].Close()
	msgrtest.Eventually(t, 10*time.Second, "the closed connection released", func() bool {
		return srv.InboundStats().Early == perHost
	})
	roundTrip(t, addr, "after", describe)
	if st := srv.InboundStats(); st.Early != perHost || st.RefusedPerHost != over {
		t.Fatalf("with the second session: %+v", st)
	}
}

// TestUnauthWrappedLinks: a transport that wraps the links of another (a
// gate over TCP here, as fault injection wraps them) passes on their
// listener's account, so that a session on them counts as authenticated,
// not as early for good.
func TestUnauthWrappedLinks(t *testing.T) {
	srv, addr, _ := newLoggedServer(t, echo, func(o *msgr.Options) {
		o.Transports = []wire.Transport{msgrtest.NewGate(tcp.Transport{})}
	})
	roundTrip(t, addr, "through the gate", func() string { return fmt.Sprintf("%+v", srv.InboundStats()) })
	if st := srv.InboundStats(); st.Open != 1 || st.Early != 0 {
		t.Fatalf("a session through a wrapped link: %+v, want 1 open, none early", st)
	}
}

// holdInBanner dials host from the address local, exchanges banners and
// goes quiet: a connection that sits in the handshake, never authenticated.
func holdInBanner(t *testing.T, host, local string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	if _, err := wire.ExchangeBanner(c, bn); err != nil {
		t.Fatalf("banner from %s: %v", local, err)
	}
	return c
}
