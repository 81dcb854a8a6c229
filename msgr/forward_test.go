package msgr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// relay sends every message it receives on to out, unchanged and not
// released: a successful Send makes the message the messenger's.
type relay struct {
	out    atomic.Pointer[msgr.Conn]
	failed atomic.Int64
}

func (r *relay) Dispatch(m *msgr.Message) {
	if err := r.out.Load().Send(context.Background(), m); err != nil {
		r.failed.Add(1)
		m.Release()
	}
}

func (r *relay) HandleEvent(msgr.Event) {}

// TestForwardUnchangedReturnsTheCredit: a received message sent on as it
// is (Message.DataCRC's "sent on unchanged") gives back its receive
// credit when the messenger is done with it, as Release would: the
// upstream session had its credits used up after a window of messages
// and stalled for good.
func TestForwardUnchangedReturnsTheCredit(t *testing.T) { testForwardUnchanged(t, tcpEnv) }

func testForwardUnchanged(t *testing.T, env msgrtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const window = 16
	small := func(o *msgr.Options) { o.RecvWindowMsgs = window }
	sink := msgrtest.NewRecorder(t)
	dst := env.NewMessenger(t, "osd.2", sink, small)
	dstAddr := env.Listen(t, dst)
	r := &relay{}
	mid := env.NewMessenger(t, "osd.1", r, small)
	midAddr := env.Listen(t, mid)
	out, err := mid.Connect(ctx, dstAddr, "osd.2")
	if err != nil {
		t.Fatal(err)
	}
	r.out.Store(out)
	src := env.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), small)
	in, err := src.Connect(ctx, midAddr, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	const n = 10 * window
	for i := range n {
		data := []byte{byte(i), 1, 2, 3}
		if err := in.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(7, uint64(i), data), data)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
		return "every message through the relay"
	}, func() bool { return sink.Next(7) == n })
	if err := sink.Err(); err != nil || r.failed.Load() != 0 {
		t.Fatalf("%v; %d sends failed", err, r.failed.Load())
	}
}
