package msgr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestCloseMidWriteKeepsTheBytes: a session closed while its link writes
// a message (to a peer that stopped reading, say) lets go of the message,
// OnRelease, only once the write is over: the link is closed under it (at
// the latest closeGrace after the close) and no one writes on it. It
// released every dropped message at once, and a sender whose bytes those
// were (the SDK's PutObjectBytes) could change them while they were being
// written, or an RDMA peer still read them.
func TestCloseMidWriteKeepsTheBytes(t *testing.T) {
	ctx := context.Background()
	gate := msgrtest.NewGate(tcp.Transport{})
	srv := tcpEnv.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), nil)
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Transports = []wire.Transport{gate}
	})
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	held, release := gate.HoldWrites(wire.TagMessage)
	defer release(false)
	data := make([]byte, 64<<10)
	var released atomic.Bool
	m := msgr.NewMessage(1, msgrtest.Payload(1, 0, data), data)
	m.OnRelease = func(*msgr.Message) { released.Store(true) }
	if err := c.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the message was never written")
	}
	c.Close()
	if released.Load() {
		t.Fatal("the message was let go of while its write was still under way")
	}
	// The write ends as closeGrace closes the link under it; then the
	// message goes.
	msgrtest.Eventually(t, 10*time.Second, "the message released after its write", released.Load)
}
