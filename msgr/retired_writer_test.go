package msgr_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// A message is released (OnRelease, and its owner reuses it at once) only
// after the writer of a detached link has left its last write: that batch
// was collected before the link failed and still points into the message,
// while the next link's handshake and acks release it. The client's writer
// waits before each batch (FaultInjection.Delay), so the server's injected
// faults often close a link between the collect and the write. Under -race
// the old writer's copy of a front the sender then rewrites is reported
// (5 of 5 runs without the drain in the handshake); without -race the test
// checks exactly-once, in-order delivery of reused messages across faults.
func TestReleasedMessageNotInOldLinksWrite(t *testing.T) {
	const n = 2000
	var got atomic.Uint64
	var bad atomic.Value
	srv := tcpEnv.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) {
		want := got.Load()
		if len(m.Front) != 8 || binary.LittleEndian.Uint64(m.Front) != want {
			bad.CompareAndSwap(nil, fmt.Sprintf("message %d has front %x", want, m.Front))
		}
		got.Add(1)
		m.Release()
	}), func(o *msgr.Options) { o.Faults = msgr.FaultInjection{EveryNFrames: 30, Seed: 1} })
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }), func(o *msgr.Options) {
		// Each write batch waits first, so a fault the server injects
		// often finds the writer between collecting a batch and writing it.
		o.Faults = msgr.FaultInjection{Delay: 200 * time.Microsecond}
		o.Reconnect = msgr.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	// Eight messages go round: each is rewritten as soon as it comes back.
	free := make(chan *msgr.Message, 8)
	for range cap(free) {
		m := &msgr.Message{Type: 1, Front: make([]byte, 8), Data: make([]byte, 512)}
		m.OnRelease = func(m *msgr.Message) { free <- m }
		free <- m
	}
	for i := range uint64(n) {
		var m *msgr.Message
		select {
		case m = <-free:
		case <-ctx.Done():
			t.Fatalf("message %d: none came back: %d delivered", i, got.Load())
		}
		binary.LittleEndian.PutUint64(m.Front, i)
		if err := c.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 60*time.Second, "every message delivered", func() bool { return got.Load() >= n })
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	if got.Load() != n {
		t.Fatalf("%d delivered, want %d", got.Load(), n)
	}
	st := c.Stats()
	if st.Faults == 0 {
		t.Fatalf("no faults injected: %+v", st)
	}
	t.Logf("%d faults, %d replayed", st.Faults, st.Replayed)
}
