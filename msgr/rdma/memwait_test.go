//go:build rdma

package rdma_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
)

// TestRDMAMemBudgetPushesBack: a receiver whose registered-memory budget
// is spent for now by messages its dispatcher still holds must push back
// (docs/messenger.md §5.3), not fault its links: a fault only made the
// lossless sessions reconnect and replay everything into the same
// shortage. Several senders send 10 MiB messages (an 11 MiB destination
// each) to a receiver with a 48 MiB budget; its dispatcher first holds
// every message, so the budget must run out, then lets them go a few at a
// time. Every message must arrive once, in order and intact, with no link
// fault and nothing replayed, and every destination must come back.
func TestRDMAMemBudgetPushesBack(t *testing.T) {
	eachRendezvous(t, func(t *testing.T, mode rdma.RendezvousMode) { testMemBudgetPushesBack(t, mode, false) })
}

// TestRDMAMemBudgetSenderWaits: the same senders on one transport whose
// own budget (48 MiB, a quarter of it for copies of payloads being sent)
// holds one 11 MiB copy at a time: each write waits for the copy before
// it to be moved, rather than fault its link.
func TestRDMAMemBudgetSenderWaits(t *testing.T) {
	eachRendezvous(t, func(t *testing.T, mode rdma.RendezvousMode) { testMemBudgetPushesBack(t, mode, true) })
}

// testMemBudgetPushesBack runs senders of 10 MiB messages against a
// receiver with a small budget, or, with smallSender, from a sender
// transport with one.
func testMemBudgetPushesBack(t *testing.T, mode rdma.RendezvousMode, smallSender bool) {
	const (
		senders = 4
		per     = 5
		size    = 10 << 20
		budget  = 48 << 20
	)
	small, big := rdma.Config{MemBudget: budget, Rendezvous: mode}, rdma.Config{Rendezvous: mode}
	if smallSender {
		small, big = big, small
	}
	trS, trC := ownTransport(t, small), ownTransport(t, big)
	lim := trS // the transport with the small budget
	if smallSender {
		lim = trC
	}
	// The senders end by the time the messengers' shutdowns (cleanups
	// registered later, so run first) are over.
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	rec := msgrtest.NewRecorder(t)
	rec.Hold(!smallSender)
	srv := tcpEnv.NewMessenger(t, "osd.0", rec, withTransport(trS, nil))
	addr := tcpEnv.Listen(t, srv)
	conns := make([]*msgr.Conn, senders)
	for i := range conns {
		m := tcpEnv.NewMessenger(t, msgr.EntityName(fmt.Sprintf("osd.%d", i+1)), msgrtest.NewRecorder(t), withTransport(trC, nil))
		conns[i] = connect(t, m, addr, "osd.0")
	}
	payloads := make([][]byte, senders)
	for i := range payloads {
		payloads[i] = fill(size, uint64(i+1))
	}
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sendAll(t, c, uint32(i+1), 0, per, func(int) []byte { return payloads[i] })
		}()
	}
	faults := func() (f, r uint64) {
		for _, c := range conns {
			st := c.Stats()
			f, r = f+st.Faults, r+st.Replayed
		}
		for c := range srv.Conns() {
			f += c.Stats().Faults
		}
		return f, r
	}
	// Nothing is released: the destinations fill the budget, and a
	// transfer must wait (or, before, a link faulted).
	if !smallSender {
		msgrtest.EventuallyDescribed(t, 60*time.Second, func() string {
			n, b := rec.Held()
			return fmt.Sprintf("waiting for the budget to run out: %d messages (%d bytes) held, %+v", n, b, trS.Stats())
		}, func() bool {
			f, _ := faults()
			return trS.Stats().MemWaits > 0 || f > 0
		})
		if n, _ := rec.Held(); n >= senders*per {
			t.Fatalf("all %d messages fit the budget of %d bytes: the test proves nothing", n, budget)
		}
	}
	// A slow consumer: it lets go of what it holds every few milliseconds
	// (pacing, not synchronisation).
	stop := make(chan struct{})
	released := make(chan struct{})
	go func() {
		defer close(released)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				rec.ReleaseHeld()
			}
		}
	}()
	ids := make([]uint32, senders)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	waitDelivered(t, rec, ids, per, 120*time.Second, conns[0])
	wg.Wait()
	close(stop)
	<-released
	rec.ReleaseHeld()
	if f, r := faults(); f != 0 || r != 0 {
		t.Fatalf("%d link faults, %d messages replayed while the budget was spent; want none (small-budget side %+v)", f, r, lim.Stats())
	}
	st := lim.Stats()
	t.Logf("small-budget side: %d waits for registered memory, high water %d of %d bytes", st.MemWaits, st.HighWaterBytes, budget)
	if st.HighWaterBytes > budget {
		t.Fatalf("registered %d bytes at once, above the budget of %d", st.HighWaterBytes, budget)
	}
	msgrtest.Eventually(t, 10*time.Second, "every rendezvous buffer back", func() bool {
		return trS.Stats().BuffersInUse == 0 && trC.Stats().BuffersInUse == 0
	})
}

// keeper holds every message it gets until open is closed, then releases
// them and every later one, counting them.
type keeper struct {
	mu   sync.Mutex
	held []*msgr.Message
	open bool
	got  atomic.Int64
}

func (k *keeper) Dispatch(m *msgr.Message) {
	k.got.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open {
		m.Release()
		return
	}
	k.held = append(k.held, m)
}

func (k *keeper) release() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.open = true
	for _, m := range k.held {
		m.Release()
	}
	k.held = nil
}

func (*keeper) HandleEvent(msgr.Event) {}

// TestRDMAMemWaitGivesUp: a receiver that holds every message keeps its
// budget spent: no memory comes back, as in a cycle of two OSDs each
// forwarding what it holds to the other (a stress probe wedged a cluster
// so, for good). The wait for memory gives up after memWaitMax and fails
// the link, as before waits, which lets go of what the link held; once
// the receiver lets go, everything arrives.
func TestRDMAMemWaitGivesUp(t *testing.T) {
	const (
		n      = 8
		size   = 10 << 20
		budget = 48 << 20
	)
	trS, trC := ownTransport(t, rdma.Config{MemBudget: budget}), ownTransport(t, rdma.Config{})
	k := &keeper{}
	srv := tcpEnv.NewMessenger(t, "osd.0", k, withTransport(trS, nil))
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withTransport(trC, nil))
	c := connect(t, cli, addr, "osd.0")
	data := fill(size, 5)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() { sendAll(t, c, 1, 0, n, func(int) []byte { return data }) })
	msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
		return fmt.Sprintf("the link to fail once the wait for memory gave up: %d faults, %d waits", c.Stats().Faults, trS.Stats().MemWaits)
	}, func() bool { return c.Stats().Faults > 0 && trS.Stats().MemWaits > 0 })
	k.release()
	msgrtest.EventuallyDescribed(t, 60*time.Second, func() string {
		return fmt.Sprintf("every message delivered: %d dispatched of %d", k.got.Load(), n)
	}, func() bool { return k.got.Load() >= n })
}
