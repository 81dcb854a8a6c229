package msgr_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestRecvBudget: many lossless senders, faults on their links, and a slow
// dispatcher that holds what it gets and lets it go in bursts. The bytes
// of received messages held at once never exceed Options.MaxRecvBytes plus
// one message (the links stop reading instead), one message larger than
// the whole budget still gets through, and every message arrives exactly
// once, in order. Over TCP the link charges before it reads a message;
// over the in-memory transport the messenger charges what the link read.
func TestRecvBudget(t *testing.T) { overTCPAndMem(t, testRecvBudget) }

// overTCPAndMem runs test over TCP and over the in-memory transport.
func overTCPAndMem(t *testing.T, test func(*testing.T, msgrtest.Env)) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) { test(t, env) })
	}
}

func memTransports() func() []wire.Transport {
	mem := msgrtest.NewMemTransport()
	return func() []wire.Transport { return []wire.Transport{mem} }
}

func testRecvBudget(t *testing.T, env msgrtest.Env) { testRecvBudgetOver(t, env, 16) }

// testRecvBudgetOver is testRecvBudget where a message holds up to over
// bytes of the budget beyond its data (its front, and in secure mode what
// sealing adds).
func testRecvBudgetOver(t *testing.T, env msgrtest.Env, over int) {
	const (
		budget  = 1 << 20
		senders = 6
		perConn = 120
		maxMsg  = 96 << 10
		huge    = budget + budget/2 // one message above the whole budget
	)
	rec := msgrtest.NewRecorder(t)
	rec.Hold(true)
	// The most the dispatcher held at once, measured where it holds.
	var maxHeld atomic.Int64
	var srv *msgr.Messenger
	srv = env.NewMessenger(t, "osd.0", rec, func(o *msgr.Options) { o.MaxRecvBytes = budget })
	addr := env.Listen(t, srv)
	stop := make(chan struct{})
	released := make(chan struct{})
	go func() {
		// The slow dispatcher: every 2 ms it lets go of all it holds, but
		// not before the links first had to wait for the budget, so the
		// test meets the budget however slow the machine is (a loaded one
		// may not send 1 MiB in 2 ms).
		defer close(released)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				rec.Hold(false)
				rec.ReleaseHeld()
				return
			case <-tick.C:
				if _, bytes := rec.Held(); bytes > maxHeld.Load() {
					maxHeld.Store(bytes)
				}
				if srv.Stats().Recv.Stalls > 0 {
					rec.ReleaseHeld()
				}
			}
		}
	}()
	var once sync.Once
	stopDispatcher := func() { once.Do(func() { close(stop); <-released }) }
	defer stopDispatcher()

	rng := rand.New(rand.NewPCG(7, 7))
	conns := make([]*msgr.Conn, senders)
	for i := range conns {
		cli := env.NewMessenger(t, msgr.EntityName(fmt.Sprintf("osd.%d", i+1)), msgrtest.NewRecorder(t), func(o *msgr.Options) {
			o.Faults = msgr.FaultInjection{EveryNFrames: 150, Seed: int64(i + 1)}
		})
		c, err := cli.Connect(context.Background(), addr, "osd.0")
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for n := range perConn {
		for i, c := range conns {
			size := rng.IntN(maxMsg)
			if i == 0 && n == perConn/2 {
				size = huge
			}
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(n + j)
			}
			if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(uint32(i+1), uint64(n), data), data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	msgrtest.EventuallyDescribed(t, 60*time.Second, func() string {
		return fmt.Sprintf("every message delivered: %+v", srv.Stats().Recv)
	}, func() bool {
		for i := range senders {
			if rec.Next(uint32(i+1)) != perConn {
				return false
			}
		}
		return true
	})
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	st := srv.Stats().Recv
	t.Logf("budget %d: peak %d bytes held, %d stalls, the dispatcher held at most %d bytes", budget, st.Peak, st.Stalls, maxHeld.Load())
	// A message goes over the budget only when everything else held
	// belongs to frames waiting for it, and only one at a time: the peak
	// is at most the budget and the largest message (its data and front).
	if st.Limit != budget || st.Peak > int64(budget+huge+over) {
		t.Errorf("held %d bytes at once, over the budget %d plus one message", st.Peak, budget)
	}
	if held := maxHeld.Load(); held > budget+huge {
		t.Errorf("the dispatcher held %d bytes at once, over the budget %d plus one message", held, budget)
	}
	if st.Stalls == 0 {
		t.Errorf("the links never waited for the budget: %+v", st)
	}
	stopDispatcher()
	msgrtest.Eventually(t, 10*time.Second, "every byte released", func() bool {
		st := srv.Stats().Recv
		return st.InFlight == 0 && st.Waiting == 0
	})
}

// TestRecvBudgetWaitIsNotIdle: a link whose reader waits for the budget
// longer than IdleTimeout is silent by our choice; it is not dropped.
func TestRecvBudgetWaitIsNotIdle(t *testing.T) {
	rec := msgrtest.NewRecorder(t)
	rec.Hold(true)
	srv := tcpEnv.NewMessenger(t, "osd.0", rec, func(o *msgr.Options) {
		o.MaxRecvBytes = 64 << 10
		o.Keepalive, o.IdleTimeout = 100*time.Millisecond, time.Second
	})
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Keepalive, o.IdleTimeout = 100*time.Millisecond, time.Second
	})
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		data := make([]byte, 40<<10)
		if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), data), data)); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "the second message waiting for the budget", func() bool {
		n, _ := rec.Held()
		return n == 1 && srv.Stats().Recv.Waiting == 1
	})
	// Hold the first for several idle timeouts (of 1 s, which a loaded
	// machine's scheduling cannot reach between keepalives).
	held := time.NewTimer(3 * time.Second)
	<-held.C
	rec.Hold(false)
	rec.ReleaseHeld()
	msgrtest.Eventually(t, 10*time.Second, "both delivered", func() bool { return rec.Next(1) == 2 })
	for sc := range srv.Conns() {
		if st := sc.Stats(); st.Faults != 0 {
			t.Fatalf("the waiting link was dropped: %+v", st)
		}
	}
	if st := c.Stats(); st.Faults != 0 {
		t.Fatalf("the sender's link was dropped: %+v", st)
	}
}
