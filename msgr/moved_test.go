package msgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestConnectToAMovedPeer: Connect with a peer's new address moves its
// open session there, as a new map says it moved. The session stayed on
// its link to the old address, which does not fail for up to IdleTimeout
// when the old host died (here the old instance is alive, and would get
// everything sent), and every redial went there.
func TestConnectToAMovedPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	oldRec, newRec := msgrtest.NewRecorder(t), msgrtest.NewRecorder(t)
	old := tcpEnv.NewMessenger(t, "osd.0", oldRec, nil)
	oldAddr := tcpEnv.Listen(t, old)
	cliRec := msgrtest.NewRecorder(t)
	cli := tcpEnv.NewMessenger(t, "osd.1", cliRec, nil)
	c, err := cli.Connect(ctx, oldAddr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(1, 0, nil), nil)); err != nil {
		t.Fatal(err)
	}
	msgrtest.Eventually(t, 10*time.Second, "the first message at the old address", func() bool { return oldRec.Next(1) == 1 })

	moved := tcpEnv.NewMessenger(t, "osd.0", newRec, nil)
	newAddr := tcpEnv.Listen(t, moved)
	again, err := cli.Connect(ctx, newAddr, "osd.0")
	if err != nil || again != c {
		t.Fatalf("Connect to the new address: %v (same session %v)", err, again == c)
	}
	// A new instance there: it does not know the session, which starts
	// over (what was queued is dropped, as after any restart).
	cliRec.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second)
	if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(2, 0, nil), nil)); err != nil {
		t.Fatal(err)
	}
	msgrtest.Eventually(t, 10*time.Second, "the next message at the new address", func() bool { return newRec.Next(2) == 1 })
	if oldRec.Next(2) != 0 {
		t.Fatal("the message after the move went to the old address")
	}
	if got := c.Addr(); got != newAddr {
		t.Fatalf("the session's address is %s, want %s", got, newAddr)
	}
}
