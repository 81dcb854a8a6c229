package msgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestConnCreditsWithinWindow: the credit either side holds never exceeds
// the other's window, from the handshake's grants on, through a stall on
// a receiver that holds everything, to the quiet after the stream:
// one credit more than the window is a frame the receiver has no room
// for (on RDMA verbs, no posted receive: a receiver-not-ready error).
func TestConnCreditsWithinWindow(t *testing.T) {
	overTCPAndMem(t, func(t *testing.T, env msgrtest.Env) {
		const window, msgs = 4, 20
		rec := msgrtest.NewRecorder(t)
		srv := env.NewMessenger(t, "osd.0", rec, func(o *msgr.Options) { o.RecvWindowMsgs = window })
		addr := env.Listen(t, srv)
		cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), func(o *msgr.Options) { o.RecvWindowMsgs = window })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := cli.Connect(ctx, addr, "osd.0")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		var sc *msgr.Conn // the server's side
		msgrtest.Eventually(t, 10*time.Second, "the server's conn", func() bool {
			for sc = range srv.Conns() {
			}
			return sc != nil && sc.Stats().SendCredits > 0
		})
		within := func(when string) bool {
			t.Helper()
			for _, c := range []*msgr.Conn{c, sc} {
				if st := c.Stats(); st.SendCredits > window {
					t.Fatalf("%s: %v holds %d credits on a window of %d", when, c, st.SendCredits, window)
				}
			}
			return true
		}
		for _, c := range []*msgr.Conn{c, sc} {
			if st := c.Stats(); st.SendCredits != window {
				t.Fatalf("after the handshake: %d credits, want the window, %d (%v)", st.SendCredits, window, c)
			}
		}
		rec.Hold(true)
		for i := range msgs {
			data := []byte("credit")
			if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), data), data)); err != nil {
				t.Fatal(err)
			}
			within("streaming")
		}
		msgrtest.Eventually(t, 10*time.Second, "the sender stalled on credit", func() bool {
			return within("stalled") && c.Stats().CreditStalls > 0
		})
		if held, _ := rec.Held(); held > window {
			t.Fatalf("the receiver holds %d messages on a window of %d", held, window)
		}
		rec.Hold(false)
		rec.ReleaseHeld()
		msgrtest.Eventually(t, 10*time.Second, "everything delivered and acked", func() bool {
			return within("draining") && rec.Next(1) == msgs && c.Stats().QueuedMsgs == 0
		})
		within("quiet")
	})
}
