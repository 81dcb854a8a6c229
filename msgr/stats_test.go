package msgr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestTransportStatsSurviveClose: the per-transport totals a metrics
// scrape reads count every message, and keep a session's counters once
// it closes, so that a counter never goes down.
func TestTransportStatsSurviveClose(t *testing.T) {
	ctx := context.Background()
	srv, addr, _ := newLoggedServer(t, msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }), func(o *msgr.Options) {
		o.Name, o.DefaultPolicy = "osd.1", msgr.StatelessServer
	})
	cli, err := msgr.New(msgr.Options{Name: "client.1", Transports: msgr.TCPOnly, DefaultPolicy: msgr.LossyClient,
		Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Shutdown(ctx)
	c, err := cli.Connect(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 10, 1000
	for range n {
		if err := c.Send(ctx, msgr.NewMessage(1, nil, make([]byte, size))); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return "the server to count the messages: " + strings.ReplaceAll(fmtStats(srv), "\n", " ")
	}, func() bool {
		ts := srv.TransportStats()["tcp"]
		return ts.MsgsReceived == n && ts.BytesReceived == n*size && ts.Sessions == 1
	})
	if ts := cli.TransportStats()["tcp"]; ts.MsgsSent != n || ts.BytesSent != n*size || ts.Sessions != 1 {
		t.Fatalf("client tcp totals %+v, want %d messages and %d bytes sent on one session", ts, n, n*size)
	}
	c.Close()
	msgrtest.Eventually(t, 10*time.Second, "both sessions to close", func() bool {
		return srv.TransportStats()["tcp"].Sessions == 0 && cli.TransportStats()["tcp"].Sessions == 0
	})
	if ts := srv.TransportStats()["tcp"]; ts.MsgsReceived != n || ts.BytesReceived != n*size {
		t.Errorf("server tcp totals after close %+v, want the %d messages still counted", ts, n)
	}
	if ts := cli.TransportStats()["tcp"]; ts.MsgsSent != n || ts.BytesSent != n*size {
		t.Errorf("client tcp totals after close %+v, want the %d messages still counted", ts, n)
	}
}

func fmtStats(m *msgr.Messenger) string { return fmt.Sprintf("%+v", m.TransportStats()) }

// TestHandshakeFailuresByReason: a connection that is not a messenger's
// counts as a banner failure; the reasons of other failures come from
// their errors.
func TestHandshakeFailuresByReason(t *testing.T) {
	srv, addr, _ := newLoggedServer(t, msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }), func(o *msgr.Options) {
		o.Name, o.DefaultPolicy = "osd.1", msgr.StatelessServer
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("a banner failure counted: %v", srv.Stats().HandshakeFailures)
	}, func() bool { return srv.Stats().HandshakeFailures[msgr.HandshakeBanner] == 1 })

	for _, tc := range []struct {
		err  error
		want msgr.HandshakeReason
	}{
		{fmt.Errorf("%w: bad key", msgr.ErrAuth), msgr.HandshakeAuth},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), msgr.HandshakeTimeout},
		{fmt.Errorf("read: %w", io.EOF), msgr.HandshakeClosed},
		{wire.Protocolf("a frame out of place"), msgr.HandshakeProtocol},
		{wire.ErrCRC, msgr.HandshakeCRC},
		{errors.New("msgr: refusing a session with our own name"), msgr.HandshakeOther},
	} {
		if got := msgr.HandshakeReasonOf(tc.err); got != tc.want {
			t.Errorf("reason of %v = %v, want %v", tc.err, got, tc.want)
		}
	}
	if s := msgr.NumHandshakeReasons.String(); s != "other" {
		t.Errorf("an out-of-range reason is %q, want other", s)
	}
}

// TestTransportStatsScrapeFreesRegistry: a scrape waiting on a session's
// lock (held for long by a link closing under it) leaves the registry's
// lock free, so a Connect meanwhile goes through.
func TestTransportStatsScrapeFreesRegistry(t *testing.T) {
	ctx := t.Context()
	discard := msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })
	server := func(name msgr.EntityName) string {
		_, addr, _ := newLoggedServer(t, discard, func(o *msgr.Options) { o.Name, o.DefaultPolicy = name, msgr.StatelessServer })
		return addr
	}
	addr1, addr2 := server("osd.1"), server("osd.2")
	cli, err := msgr.New(msgr.Options{Name: "client.1", Transports: msgr.TCPOnly, DefaultPolicy: msgr.LossyClient, Dispatcher: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Shutdown(context.Background())
	c1, err := cli.Connect(ctx, addr1, "")
	if err != nil {
		t.Fatal(err)
	}
	unlock := sync.OnceFunc(c1.LockForTest())
	defer unlock() // before Shutdown, which waits for the scrape
	scraped := make(chan map[string]msgr.TransportStats, 1)
	go func() { scraped <- cli.TransportStats() }()
	// The scrape is waiting on c1's lock once a goroutine's stack is in
	// Conn.Stats; before the fix it waited there holding the registry.
	msgrtest.Eventually(t, 10*time.Second, "the scrape to wait on the session's lock", func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "msgr.(*Conn).Stats")
	})
	msgrtest.Eventually(t, 10*time.Second, "the registry's lock to be free during the scrape", cli.RegistryFreeForTest)
	connected := make(chan error, 1)
	go func() {
		_, err := cli.Connect(ctx, addr2, "")
		connected <- err
	}()
	select {
	case err := <-connected:
		if err != nil {
			t.Fatalf("connect during the scrape: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("connect did not go through while a scrape waited on another session's lock")
	}
	unlock()
	if ts := (<-scraped)["tcp"]; ts.Sessions < 1 {
		t.Errorf("scrape %+v, want the first session counted", ts)
	}
}
