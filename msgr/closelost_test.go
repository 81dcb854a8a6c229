package msgr_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestCloseLostInFlight: the CLOSE of a lossless session fails on its way
// out, on a link that was up, so the peer sees its link end and redials.
// It must hear the session was closed, as the CLOSE would have told it.
func TestCloseLostInFlight(t *testing.T) {
	ctx := context.Background()
	gate := msgrtest.NewGate(tcp.Transport{})
	srvRec, cliRec := msgrtest.NewRecorder(t), msgrtest.NewRecorder(t)
	srv := tcpEnv.NewMessenger(t, "osd.0", srvRec, func(o *msgr.Options) {
		o.Transports = []wire.Transport{gate}
	})
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", cliRec, nil)
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(1, 0, nil), nil)); err != nil {
		t.Fatal(err)
	}
	msgrtest.Eventually(t, 10*time.Second, "the message acked", func() bool { return c.Stats().QueuedMsgs == 0 })
	var sc *msgr.Conn
	for sc = range srv.Conns() {
	}

	held, release := gate.HoldWrites(wire.TagClose)
	defer release(true)
	sc.Close()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no CLOSE written")
	}
	release(true) // the write fails: the link ends without the CLOSE

	ev := cliRec.WaitEvent(t, msgr.EventReset, 30*time.Second)
	if !errors.Is(ev.Err, msgr.ErrClosedByPeer) {
		t.Fatalf("the peer's session ended with %v, want ErrClosedByPeer", ev.Err)
	}
	for _, e := range cliRec.Events() {
		if e.Kind == msgr.EventRemoteReset {
			t.Fatalf("the peer got EventRemoteReset: %v", e.Err)
		}
	}
	if st := c.Stats(); st.Faults != 1 {
		t.Errorf("the peer saw %d faults, want the one link that ended without CLOSE", st.Faults)
	}
	msgrtest.Eventually(t, 10*time.Second, "no sessions left", func() bool {
		return srv.Stats().Sessions == 0 && cli.Stats().Sessions == 0
	})
}
