package msgr_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
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
		c, err := net.Dial("tcp", a.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
		if _, err := wire.ExchangeBanner(c, bn); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
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
