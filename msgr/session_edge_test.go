package msgr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

var tcpEnv = msgrtest.Env{Scheme: "tcp", Host: "127.0.0.1:0"}

// A lossless dialer meeting a server that treats it as a lossy client is
// refused once, with a reason, and does not retry in a loop.
func TestPolicyMismatchIsFatal(t *testing.T) {
	srv := tcpEnv.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Policies = map[string]msgr.Policy{"osd": msgr.StatelessServer}
	})
	addr := tcpEnv.Listen(t, srv)
	rec := msgrtest.NewRecorder(t)
	cli := tcpEnv.NewMessenger(t, "osd.1", rec, nil)
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.WaitEvent(t, msgr.EventReset, 10*time.Second)
	var re *msgr.RefusedError
	if !errors.As(ev.Err, &re) || !errors.Is(ev.Err, msgr.ErrRefused) || re.Peer != "osd.0" || !strings.Contains(re.Reason, "policy mismatch") {
		t.Fatalf("reset event error %v, want a *RefusedError from osd.0 for a policy mismatch", ev.Err)
	}
	if errors.Is(ev.Err, msgr.ErrRemoteReset) || errors.Is(ev.Err, msgr.ErrAuth) {
		t.Fatalf("a policy refusal %v matches ErrRemoteReset or ErrAuth", ev.Err)
	}
	<-c.Done()
	if st := c.Stats(); st.Reconnects != 0 {
		t.Fatalf("dialer kept retrying: %+v", st)
	}
}

// Sizes are exchanged in the handshake: a message the peer would refuse is
// refused at Send, and one queued before the handshake ends the session with
// a clear error instead of a reconnect loop.
func TestPeerMaxMessage(t *testing.T) {
	srv := tcpEnv.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), func(o *msgr.Options) { o.MaxMessageSize = 1 << 20 })
	addr := tcpEnv.Listen(t, srv)
	rec := msgrtest.NewRecorder(t)
	cli := tcpEnv.NewMessenger(t, "osd.1", rec, nil)
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	// Queued before the handshake completes (on a fast loopback the
	// handshake may win the race: then Send refuses it outright, as below).
	big := make([]byte, 2<<20)
	switch err := c.Send(context.Background(), msgr.NewMessage(1, nil, big)); {
	case err == nil:
		ev := rec.WaitEvent(t, msgr.EventReset, 10*time.Second)
		if !errors.Is(ev.Err, msgr.ErrMessageTooLarge) {
			t.Fatalf("reset with %v, want ErrMessageTooLarge", ev.Err)
		}
	case !errors.Is(err, msgr.ErrMessageTooLarge):
		t.Fatal(err)
	}
	// On a live session Send refuses it outright.
	c2, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c2.Send(context.Background(), msgr.NewMessage(1, nil, big)); !errors.Is(err, msgr.ErrMessageTooLarge) {
		t.Fatalf("Send of 2 MiB to a 1 MiB peer: %v", err)
	}
}

func TestConnectToSelfRefused(t *testing.T) {
	m := tcpEnv.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), nil)
	addr := tcpEnv.Listen(t, m)
	if _, err := m.Connect(context.Background(), addr, "osd.0"); err == nil {
		t.Fatal("connecting to our own name succeeded")
	}
}

// A sender stalled on credit keeps answering keepalives, so a receiver that
// holds its messages does not time the link out.
func TestStalledSenderStaysAlive(t *testing.T) {
	// An idle timeout that a loaded machine's scheduling cannot reach:
	// with CONTROL_SLOTS the link lives on keepalives alone, no exemption.
	const idle = time.Second
	tweak := func(o *msgr.Options) {
		o.Keepalive, o.IdleTimeout = 50*time.Millisecond, idle
		o.RecvWindowMsgs = 8
	}
	rec := msgrtest.NewRecorder(t)
	rec.Hold(true)
	srv := tcpEnv.NewMessenger(t, "osd.0", rec, tweak)
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), tweak)
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), nil), nil)); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "credit stall", func() bool { return c.Stats().CreditStalls > 0 })
	start := time.Now()
	msgrtest.Eventually(t, 10*time.Second, "three idle timeouts to pass", func() bool {
		if st := c.Stats(); st.Faults > 0 {
			t.Fatalf("stalled link faulted: %+v", st)
		}
		return time.Since(start) > 3*idle
	})
	rec.Hold(false)
	rec.ReleaseHeld()
	msgrtest.Eventually(t, 10*time.Second, "all delivered", func() bool { return rec.Next(1) == 20 })
}
