package msgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestLinkCloseOffTheSessionLock: a link whose transport takes its time
// to close (an RDMA link drains its posted sends) does not hold up the
// session meanwhile: Stats and Send return while the failed link's Close
// still waits.
func TestLinkCloseOffTheSessionLock(t *testing.T) {
	ctx := context.Background()
	srv := tcpEnv.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), nil)
	addr := tcpEnv.Listen(t, srv)
	gate := msgrtest.NewGate(tcp.Transport{})
	cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Transports = []wire.Transport{gate}
	})
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, msgr.NewMessage(1, []byte("first"), nil)); err != nil {
		t.Fatal(err)
	}
	msgrtest.Eventually(t, 10*time.Second, "first message acked", func() bool { return c.Stats().QueuedMsgs == 0 })

	closing, release := gate.HoldCloses()
	defer release()
	srv.Kill() // the link fails under the client; its Close is held
	select {
	case <-closing:
	case <-time.After(10 * time.Second):
		t.Fatal("the failed link was never closed")
	}
	done := make(chan error, 1)
	go func() {
		_ = c.Stats()
		done <- c.Send(ctx, msgr.NewMessage(1, []byte("queued while the link closes"), nil))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Send while the link closes: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stats or Send blocked behind a link's Close")
	}

	release()
}
