package msgr_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// received is what a peer's dispatcher got: fronts and seqs, in order.
type received struct {
	mu     sync.Mutex
	fronts []string
	seqs   []uint64
}

func (r *received) Dispatch(m *msgr.Message) {
	r.mu.Lock()
	r.fronts = append(r.fronts, string(m.Front))
	r.seqs = append(r.seqs, m.Seq())
	r.mu.Unlock()
	m.Release()
}

func (r *received) HandleEvent(msgr.Event) {}

func (r *received) get() ([]string, []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.fronts), slices.Clone(r.seqs)
}

// TestWithdraw: while a lossless session's link is down, messages no link
// had can be withdrawn, and the peer then gets the rest in order, under
// consecutive seqs, once the link is back; one a link had (and lost) is
// refused and still delivered exactly once. The queue's counts follow,
// and a sender blocked on a full queue gets the room.
func TestWithdraw(t *testing.T) {
	mem := msgrtest.NewMemTransport()
	for _, tc := range []struct {
		env msgrtest.Env
		tr  wire.Transport // what the dialer's gate wraps
	}{
		{tcpEnv, tcp.Transport{}},
		{msgrtest.Env{Scheme: "mem", Transports: func() []wire.Transport { return []wire.Transport{mem} }}, mem},
	} {
		t.Run(tc.env.Scheme, func(t *testing.T) { testWithdraw(t, tc.env, tc.tr) })
	}
}

func testWithdraw(t *testing.T, env msgrtest.Env, tr wire.Transport) {
	ctx := context.Background()
	var rec received
	srv := env.NewMessenger(t, "osd.0", &rec, nil)
	addr := env.Listen(t, srv)
	gate := msgrtest.NewGate(tr)
	cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Transports = []wire.Transport{gate}
		o.SendQueueMsgs = 4
	})
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		msgrtest.EventuallyDescribed(t, 10*time.Second, func() string { return what + ": " + c.String() }, cond)
	}
	send := func(front string, opt ...func(*msgr.Message)) msgr.Ticket {
		t.Helper()
		m := msgr.NewMessage(1, []byte(front), nil)
		for _, f := range opt {
			f(m)
		}
		tk, err := c.SendTicket(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	delivered := func(n int) func() bool {
		return func() bool { f, _ := rec.get(); return len(f) >= n }
	}

	tA := send("a")
	wait("a delivered", delivered(1))
	wait("a acked", func() bool { return c.Stats().QueuedMsgs == 0 })
	if c.Withdraw(tA) {
		t.Fatal("withdrew a delivered message")
	}

	// b is written and lost on the way: as far as this side knows it may
	// have arrived, so it stays for the replay.
	gate.Swallow(true)
	tB := send("b")
	wait("b written", func() bool { return c.Stats().MsgsSent == 2 })
	if c.Withdraw(tB) {
		t.Fatal("withdrew a message written to a link")
	}

	// The link goes down and stays down.
	gate.Down()
	wait("link down", func() bool { return c.Stats().Faults != 0 })
	gate.Swallow(false)
	if c.Withdraw(tB) {
		t.Fatal("withdrew a message to replay")
	}

	tC := send("c")
	var releasedD atomic.Int32
	tD := send("d", func(m *msgr.Message) { m.OnRelease = func(*msgr.Message) { releasedD.Add(1) } })
	send("e")
	if !c.Withdraw(tD) || c.Withdraw(tD) {
		t.Fatal("withdraw of d: want true once, then false")
	}
	if n := releasedD.Load(); n != 1 {
		t.Fatalf("d released %d times by its withdrawal, want once", n)
	}
	if st := c.Stats(); st.QueuedMsgs != 3 || st.QueuedBytes != 3 || st.Withdrawn != 1 {
		t.Fatalf("after withdrawing d: queued %d (%d bytes), withdrawn %d; want 3 (3), 1", st.QueuedMsgs, st.QueuedBytes, st.Withdrawn)
	}

	// A full queue (b c e f) blocks the next sender until f is withdrawn.
	tF := send("f")
	sent := make(chan error, 1)
	go func() { sent <- c.Send(ctx, msgr.NewMessage(1, []byte("g"), nil)) }()
	wait("g blocked", c.SenderWaitsForTest)
	if !c.Withdraw(tF) {
		t.Fatal("withdraw of f failed")
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked sender did not get f's room")
	}

	other, err := cli.Connect(ctx, addr, "osd.9")
	if err != nil {
		t.Fatal(err)
	}
	if other.Withdraw(tC) || c.Withdraw(msgr.Ticket{}) {
		t.Fatal("withdrew with a ticket of another conn, or the zero ticket")
	}

	gate.Up()
	wait("all delivered", delivered(5))
	wait("all acked", func() bool { return c.Stats().QueuedMsgs == 0 })
	fronts, seqs := rec.get()
	if !slices.Equal(fronts, []string{"a", "b", "c", "e", "g"}) || !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("peer got %q seqs %v, want a b c e g, seqs 1-5", fronts, seqs)
	}
	if st := c.Stats(); st.Withdrawn != 2 || st.QueuedBytes != 0 || st.Reconnects == 0 {
		t.Fatalf("stats %+v: want 2 withdrawn, nothing queued, a reconnect", st)
	}
	if c.Withdraw(tB) || c.Withdraw(tC) {
		t.Fatal("withdrew a delivered message")
	}
}
