package msgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// closer releases every message and closes its session on the n-th.
type closer struct {
	n    int
	seen int
}

func (c *closer) Dispatch(m *msgr.Message) {
	c.seen++
	conn := m.Conn()
	m.Release()
	if c.seen == c.n {
		conn.Close()
	}
}

func (*closer) HandleEvent(msgr.Event) {}

// TestCloseAcksWhatItReceived: a session closed by the side that received
// every message tells the sender so in its CLOSE, and the sender's
// EventReset counts none of them Dropped ("not delivered": an application
// that resends what was dropped would send them twice). The CLOSE went
// out after the session was reset, acking nothing.
func TestCloseAcksWhatItReceived(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 10
	srv := tcpEnv.NewMessenger(t, "osd.0", &closer{n: n}, nil)
	addr := tcpEnv.Listen(t, srv)
	rec := msgrtest.NewRecorder(t)
	cli := tcpEnv.NewMessenger(t, "osd.1", rec, nil)
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), nil), nil)); err != nil {
			t.Fatal(err)
		}
	}
	ev := rec.WaitEvent(t, msgr.EventReset, 20*time.Second)
	if ev.Dropped != 0 {
		t.Fatalf("the sender counts %d of %d delivered messages dropped (%v)", ev.Dropped, n, ev.Err)
	}
}
