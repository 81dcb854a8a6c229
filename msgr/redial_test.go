package msgr

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// A link that fails after its handshake attached it but before the connect
// loop that dialed it looks again must still be redialed: its fault sees
// the loop running and leaves the redial to it. The hook makes that
// interleaving certain; in the conformance suite it needed a loaded machine.
func TestRedialWhenNewLinkFailsBeforeConnectLoopReturns(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got atomic.Int64
	srv, err := New(Options{Name: "osd.0", Transports: tcpOnly, Logger: quiet, Dispatcher: DispatchFunc(func(m *Message) {
		got.Add(1)
		m.Release()
	})})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen(ctx, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New(Options{Name: "osd.1", Transports: tcpOnly, Logger: quiet, Dispatcher: DispatchFunc(func(m *Message) { m.Release() }),
		Reconnect: Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cli.Shutdown(sctx)
		srv.Shutdown(sctx)
	}()
	var broke atomic.Bool
	cli.afterDial = func(c *Conn, err error) {
		if err != nil || broke.Swap(true) {
			return
		}
		c.mu.Lock()
		lr := c.link
		c.mu.Unlock()
		if lr == nil {
			t.Error("dial succeeded without a link attached")
			return
		}
		// Break the first link and let its reader report the fault before
		// the connect loop goes on.
		lr.link.Close()
		if !pollUntil(time.Now().Add(10*time.Second), func() bool { return c.Stats().Faults != 0 }) {
			t.Error("the broken link was not reported as a fault")
		}
	}
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, NewMessage(1, []byte("after the fault"), nil)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	if !pollUntil(deadline, func() bool { return got.Load() != 0 }) {
		t.Fatalf("message not delivered: the session was not redialed after its new link failed: %v", c)
	}
	// Connect returns once the first link is attached, while the hook may
	// still be breaking it: the message can go out on that link, before
	// the redial. So the redial is waited for, not assumed done.
	redialed := func() bool {
		st := c.Stats()
		return broke.Load() && st.Faults != 0 && st.Reconnects != 0
	}
	if !pollUntil(deadline, redialed) {
		t.Fatalf("the first link was not broken and redialed: %+v", c.Stats())
	}
}

// pollUntil checks cond every millisecond until it holds or deadline
// passes, and reports whether it held.
func pollUntil(deadline time.Time, cond func() bool) bool {
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	return true
}
