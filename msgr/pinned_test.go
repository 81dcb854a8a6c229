package msgr_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

// TestHeldMessagesPinBounded: a dispatcher that holds a window of small
// messages without data, each of which arrived after a quiet spell (so each
// was read into a read chunk of its own on TCP), keeps at most 512 KiB of
// read chunks alive beside the one being read, plus about twice the held
// bytes in buffers of their own, instead of a chunk per message. Their
// fronts stay intact, and releasing them leaves nothing pinned.
func TestHeldMessagesPinBounded(t *testing.T) {
	const n, frontLen = 1000, 64
	var (
		mu   sync.Mutex
		held []*msgr.Message
	)
	got := make(chan struct{}, n)
	srv := tcpEnv.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) {
		mu.Lock()
		held = append(held, m)
		mu.Unlock()
		got <- struct{}{}
	}), nil)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }), nil)
	c, err := cli.Connect(context.Background(), tcpEnv.Listen(t, srv), "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	front := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, frontLen) }
	for i := range n {
		if err := c.Send(context.Background(), msgr.NewMessage(1, front(i), nil)); err != nil {
			t.Fatal(err)
		}
		// The next message goes once this one arrived: the receiver's
		// reader has gone idle and let its chunk go in between.
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d not delivered; %s", i, c)
		}
	}
	var sc *msgr.Conn
	for conn := range srv.Conns() {
		sc = conn
	}
	mu.Lock()
	defer mu.Unlock()
	own, shared := msgr.HeldMemoryForTest(held)
	pinned, _ := sc.PinnedForTest()
	t.Logf("%d held messages of %d bytes: %d bytes of read chunks pinned (%d counting the one being read), %d bytes of their own buffers",
		n, frontLen, pinned, shared, own)
	// 512 KiB of chunks moved past, and the one being read (4 KiB after a
	// quiet spell; 256 KiB at most).
	if limit := 512<<10 + 256<<10; shared > limit {
		t.Errorf("%d held messages keep %d bytes of read chunks alive, above %d", n, shared, limit)
	}
	if pinned > 512<<10 || pinned > int64(shared) {
		t.Errorf("the link counts %d bytes pinned; the held messages keep %d bytes of chunks alive", pinned, shared)
	}
	if own > 2*n*frontLen {
		t.Errorf("%d held messages of %d bytes take %d bytes of buffers of their own", n, frontLen, own)
	}
	for i, m := range held {
		if !bytes.Equal(m.Front, front(i)) {
			t.Fatalf("held message %d: front %x, want %x", i, m.Front, front(i))
		}
	}
	for _, m := range held {
		m.Release()
	}
	held = nil
	if p, _ := sc.PinnedForTest(); p != 0 {
		t.Errorf("%d bytes pinned with every message released", p)
	}
	if in := srv.Stats().Recv.InFlight; in != 0 {
		t.Errorf("%d bytes of the receive budget held with every message released", in)
	}
}
