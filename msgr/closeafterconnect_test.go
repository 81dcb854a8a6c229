package msgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// eventChan is a dispatcher that releases messages and hands events on.
type eventChan chan Event

func (e eventChan) Dispatch(m *Message) { m.Release() }
func (e eventChan) HandleEvent(ev Event) {
	select {
	case e <- ev:
	default:
	}
}

// TestCloseRightAfterConnectTellsPeer: a session closed while its dial's
// goroutine has not yet come back from the handshake still ends with
// CLOSE, so the peer ends it as closed by us. The dial's context ends with
// the session; its handshake deadline (withLinkDeadline), were it still
// armed, would close the link under the session, and the peer would see a
// fault and keep the session for a redial that never comes
// (TestConformanceTCPSecure/CloseTellsPeer failed so, under load). The
// hook holds the dial's goroutine until the peer has seen the session end,
// which with the deadline armed is always after it fired.
func TestCloseRightAfterConnectTellsPeer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	events := make(eventChan, 16)
	srv, err := New(Options{Name: "osd.0", Transports: tcpOnly, Logger: quiet, Dispatcher: events})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	addr, err := srv.Listen(context.Background(), "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New(Options{Name: "osd.1", Transports: tcpOnly, Logger: quiet, Dispatcher: DispatchFunc(func(m *Message) { m.Release() })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cli.Kill)

	ended := make(chan struct{})
	hook := func(c *Conn) {
		c.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
		}
	}
	testHookConnected.Store(&hook)
	defer testHookConnected.Store(nil)

	if _, err := cli.Connect(context.Background(), addr, "osd.0"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Kind != EventReset {
				continue
			}
			close(ended)
			if !errors.Is(ev.Err, ErrClosedByPeer) {
				t.Fatalf("the peer's session ended with %v, want ErrClosedByPeer", ev.Err)
			}
			return
		case <-deadline:
			close(ended)
			t.Fatalf("the peer's session never ended: its stats %+v", srv.Stats())
		}
	}
}
