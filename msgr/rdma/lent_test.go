//go:build rdma

package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestRDMAAllocRegistered: Messenger.AllocRegistered hands out memory of
// the listener's domain, page-aligned and of its size rounded to a page
// (not to a power of two), that payloads are sent from with no copy, as
// many times as the holder likes; it stops at half the memory budget;
// memory given back is reused for the same size or a little less; and memory still held when the transport
// closes is deregistered then but stays readable until its last Release,
// which unmaps it.
func TestRDMAAllocRegistered(t *testing.T) { eachRendezvous(t, testAllocRegistered) }

func testAllocRegistered(t *testing.T, mode rdma.RendezvousMode) {
	const budget = 64 << 20
	trS := rdma.NewTransport("tcp", rdma.Config{Rendezvous: mode, MemBudget: budget})
	trC := rdma.NewTransport("tcp", rdma.Config{Rendezvous: mode})
	closed := false
	defer func() {
		if !closed {
			trS.Close()
			trC.Close()
		}
	}()
	p := connectPair(t, trS, trC, nil, nil)
	sc := onlyConn(t, p.srv)

	const n = 4<<20 + 100
	page := os.Getpagesize()
	want := int64((n + page - 1) &^ (page - 1))
	buf, err := p.srv.AllocRegistered(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(buf.B) != n || uintptr(unsafe.Pointer(&buf.B[0]))%wire.DataAlign != 0 {
		t.Fatalf("%d bytes at %p, want %d on a %d-byte boundary", len(buf.B), &buf.B[0], n, wire.DataAlign)
	}
	if st := trS.Stats(); st.LentBytes != want || st.LentRegions != 1 {
		t.Fatalf("lent %d bytes in %d regions, want %d in 1", st.LentBytes, st.LentRegions, want)
	}
	data := fill(n, 9)
	copy(buf.B, data)

	before := trS.Stats()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sends = 3
	for i := range sends {
		buf.Ref() // each message's, the test keeps its own
		m := msgr.NewMessage(1, msgrtest.Payload(2, uint64(i), data), nil)
		m.SetPayload(buf)
		if err := sc.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitDelivered(t, p.cliRec, []uint32{2}, sends, time.Minute, sc)
	after := trS.Stats()
	if z, c := after.ZeroCopySends-before.ZeroCopySends, after.CopiedSends-before.CopiedSends; z != sends || c != 0 {
		t.Fatalf("%d zero-copy and %d copied sends of a registered payload, want %d and 0", z, c, sends)
	}

	if _, err := p.srv.AllocRegistered(budget / 2); !errors.Is(err, rdma.ErrLentBudget) {
		t.Fatalf("an allocation past half the budget: %v, want ErrLentBudget", err)
	}
	buf.Release()
	msgrtest.Eventually(t, 10*time.Second, "the region given back", func() bool {
		return trS.Stats().LentRegions == 0
	})
	// A little smaller takes the region given back.
	reg := trS.Stats().RegisteredBytes
	held, err := p.srv.AllocRegistered(n - 2*page)
	if err != nil {
		t.Fatal(err)
	}
	if len(held.B) != n-2*page {
		t.Fatalf("%d bytes, want %d", len(held.B), n-2*page)
	}
	held.B = held.B[:n] // the region's, within its capacity
	if st := trS.Stats(); st.RegisteredBytes != reg || st.LentBytes != want {
		t.Fatalf("a region of a size given back was registered anew: %d bytes registered, then %d; %d lent", reg, st.RegisteredBytes, st.LentBytes)
	}
	copy(held.B, data)

	for _, m := range []*msgr.Messenger{p.cli, p.srv} {
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	trS.Close()
	trC.Close()
	closed = true
	if st := trS.Stats(); st.RegisteredBytes != 0 {
		t.Fatalf("%d bytes registered after Close", st.RegisteredBytes)
	}
	at := uintptr(unsafe.Pointer(&held.B[0]))
	if !bytes.Equal(held.B, data) || !isMapped(mappedRanges(t), at) {
		t.Fatal("memory still held lost its bytes when the transport closed")
	}
	held.Release()
	if isMapped(mappedRanges(t), at) {
		t.Fatal("lent memory still mapped after its last Release")
	}
	if _, err := p.srv.AllocRegistered(n); !errors.Is(err, msgr.ErrNoRegisteredMemory) {
		t.Fatalf("AllocRegistered of a messenger shut down: %v, want ErrNoRegisteredMemory", err)
	}
}

// TestAllocRegisteredOverTCP: a messenger that listens only on TCP has no
// registered memory to give.
func TestAllocRegisteredOverTCP(t *testing.T) {
	env := msgrtest.Env{Scheme: "tcp", Host: "127.0.0.1:0"}
	m := env.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Transports = []wire.Transport{tcp.Transport{}}
	})
	env.Listen(t, m)
	if _, err := m.AllocRegistered(1 << 20); !errors.Is(err, msgr.ErrNoRegisteredMemory) {
		t.Fatalf("AllocRegistered over TCP: %v, want ErrNoRegisteredMemory", err)
	}
}
