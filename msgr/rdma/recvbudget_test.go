//go:build rdma

package rdma_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
)

// TestRDMARecvBudgetBoundsRegistered: a messenger's receive budget
// (Options.MaxRecvBytes) bounds the registered memory its held messages
// take, as a stream link's bounds what it allocates: a rendezvous payload
// is charged before its destination is registered, and waits for the
// budget there. Before, each link read up to 16 payloads ahead into
// registered memory whatever the budget, so a daemon's client messages
// could take its whole RDMA budget from what its peers send it (two OSDs
// forwarding to each other then wedge: osd's
// TestReplicationCycleSmallRDMABudget). Four senders of 1 MiB messages to
// a receiver with an 8 MiB budget that holds them: the registered memory
// the receiver takes stays within the budget, and once it lets go every
// message arrives, with no fault.
func TestRDMARecvBudgetBoundsRegistered(t *testing.T) {
	eachRendezvous(t, testRecvBudgetBoundsRegistered)
}

func testRecvBudgetBoundsRegistered(t *testing.T, mode rdma.RendezvousMode) {
	const (
		senders = 4
		per     = 8
		size    = 1 << 20
		budget  = 8 << 20
	)
	trS, trC := ownTransport(t, rdma.Config{Rendezvous: mode}), ownTransport(t, rdma.Config{Rendezvous: mode})
	rec := msgrtest.NewRecorder(t)
	rec.Hold(true)
	srv := tcpEnv.NewMessenger(t, "osd.0", rec, withTransport(trS, func(o *msgr.Options) { o.MaxRecvBytes = budget }))
	addr := tcpEnv.Listen(t, srv)
	conns := make([]*msgr.Conn, senders)
	for i := range conns {
		m := tcpEnv.NewMessenger(t, msgr.EntityName(fmt.Sprintf("osd.%d", i+1)), msgrtest.NewRecorder(t), withTransport(trC, nil))
		conns[i] = connect(t, m, addr, "osd.0")
	}
	base := trS.Stats().RegisteredBytes // the links' own buffers
	data := fill(size, 3)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, c := range conns {
		wg.Go(func() { sendAll(t, c, uint32(i+1), 0, per, func(int) []byte { return data }) })
	}
	// The budget runs out: the rest wait on their links.
	msgrtest.EventuallyDescribed(t, 30*time.Second, func() string {
		n, b := rec.Held()
		return fmt.Sprintf("a link waiting for the budget: %d messages (%d bytes) held, %+v", n, b, srv.Stats().Recv)
	}, func() bool { return srv.Stats().Recv.Waiting > 0 })
	// What a waiting link had already registered is registered by now
	// (its transfers started before it waited).
	n, held := rec.Held()
	got := trS.Stats().RegisteredBytes - base
	// Each payload's destination is its size and front rounded up to a
	// sixteenth of a power of two: 1 MiB + 64 KiB.
	if limit := int64(budget + budget/16); got > limit {
		t.Fatalf("%d messages (%d bytes) held, but %d bytes of registered memory taken for them: over the budget of %d (and rounding, %d)", n, held, got, budget, limit)
	}
	if st := srv.Stats().Recv; st.Peak > budget {
		t.Fatalf("the budget held %d bytes at once, over its %d", st.Peak, budget)
	}
	rec.Hold(false)
	rec.ReleaseHeld()
	ids := make([]uint32, senders)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	waitDelivered(t, rec, ids, per, 60*time.Second, conns[0])
	for _, c := range conns {
		if f := c.Stats().Faults; f != 0 {
			t.Fatalf("%d link faults, want none: %v", f, c)
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "the budget back to nothing held", func() bool {
		return srv.Stats().Recv.InFlight == 0
	})
}

// TestRDMABudgetWaitEndsWithItsLink: a link whose rendezvous waits for
// the receive budget closes (its peer went away). Its wait must leave the
// budget with it: a waiter left behind would keep every link of the
// messenger waiting behind it (the budget serves waiters in order), and
// the bytes granted to it later would never come back.
func TestRDMABudgetWaitEndsWithItsLink(t *testing.T) {
	const (
		size   = 1 << 20
		budget = 2 << 20
	)
	trS, trC := ownTransport(t, rdma.Config{}), ownTransport(t, rdma.Config{})
	rec := msgrtest.NewRecorder(t)
	rec.Hold(true)
	srv := tcpEnv.NewMessenger(t, "osd.0", rec, withTransport(trS, func(o *msgr.Options) { o.MaxRecvBytes = budget }))
	addr := tcpEnv.Listen(t, srv)
	gone := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withTransport(trC, nil))
	c := connect(t, gone, addr, "osd.0")
	data := fill(size, 4)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		for i := range 4 {
			// Sends may fail once the messenger is killed.
			c.Send(t.Context(), msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), data), data))
		}
	})
	msgrtest.EventuallyDescribed(t, 30*time.Second, func() string {
		return fmt.Sprintf("osd.1's link waiting for the budget: %+v", srv.Stats().Recv)
	}, func() bool { return srv.Stats().Recv.Waiting > 0 })
	gone.Kill()
	msgrtest.EventuallyDescribed(t, 30*time.Second, func() string {
		return fmt.Sprintf("no waiter left once osd.1's link closed: %+v", srv.Stats().Recv)
	}, func() bool { return srv.Stats().Recv.Waiting == 0 })
	rec.Hold(false)
	rec.ReleaseHeld()
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("every byte back: %+v", srv.Stats().Recv)
	}, func() bool { return srv.Stats().Recv.InFlight == 0 })
	// Another sender gets through: nothing is left in front of it.
	other := tcpEnv.NewMessenger(t, "osd.2", msgrtest.NewRecorder(t), withTransport(trC, nil))
	c2 := connect(t, other, addr, "osd.0")
	sendAll(t, c2, 2, 0, 4, func(int) []byte { return data })
	waitDelivered(t, rec, []uint32{2}, 4, 30*time.Second, c2)
}

// TestRDMABudgetInlineBehindRendezvous: a small message that arrives
// inline behind a payload waiting for the receive budget, with a payload
// larger than the whole budget behind it. The inline one used to be
// charged once handed up, by then behind the large payload, which the
// budget had let go first (it leads once nothing else is held) and which
// could only be delivered after it: every link of the messenger stopped
// for good (found by a reviewer). Charged at the link, in arrival order,
// all three arrive.
func TestRDMABudgetInlineBehindRendezvous(t *testing.T) {
	const budget = 2 << 20
	trS, trC := ownTransport(t, rdma.Config{}), ownTransport(t, rdma.Config{})
	rec := msgrtest.NewRecorder(t)
	rec.Hold(true)
	srv := tcpEnv.NewMessenger(t, "osd.0", rec, withTransport(trS, func(o *msgr.Options) { o.MaxRecvBytes = budget }))
	addr := tcpEnv.Listen(t, srv)
	holder := connect(t, tcpEnv.NewMessenger(t, "osd.2", msgrtest.NewRecorder(t), withTransport(trC, nil)), addr, "osd.0")
	c := connect(t, tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withTransport(trC, nil)), addr, "osd.0")
	describe := func() string {
		n, b := rec.Held()
		return fmt.Sprintf("%d messages (%d bytes) held, %+v; sender %+v", n, b, srv.Stats().Recv, c.Stats())
	}
	// 1.5 MiB held: the next 1 MiB must wait.
	sendAll(t, holder, 2, 0, 1, func(int) []byte { return fill(1536<<10, 9) })
	msgrtest.EventuallyDescribed(t, 30*time.Second, describe, func() bool { n, _ := rec.Held(); return n == 1 })
	sizes := []int{1 << 20, 8 << 10, 3 << 20} // waits; inline; over the whole budget
	posted := trS.Stats().RecvsPosted
	sendAll(t, c, 1, 0, len(sizes), func(i int) []byte { return fill(sizes[i], uint64(i)) })
	// All three are in the link's queue, each in its receive buffer, the
	// first waiting for the budget.
	msgrtest.EventuallyDescribed(t, 30*time.Second, describe, func() bool {
		return srv.Stats().Recv.Waiting > 0 && trS.Stats().RecvsPosted <= posted-int64(len(sizes))
	})
	rec.ReleaseHeld() // the 1 MiB goes, and is held
	msgrtest.EventuallyDescribed(t, 30*time.Second, describe, func() bool { return rec.Next(1) >= 1 })
	rec.Hold(false)
	rec.ReleaseHeld()
	waitDelivered(t, rec, []uint32{1}, uint64(len(sizes)), 30*time.Second, c)
	msgrtest.EventuallyDescribed(t, 10*time.Second, describe, func() bool { return srv.Stats().Recv.InFlight == 0 })
}
