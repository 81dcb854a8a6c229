package msgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// gateTransport is TCP whose dials can be refused (a peer out of reach)
// and whose dialed links can swallow what is written on them (frames that
// left this side and were lost on the way).
type gateTransport struct {
	tcp.Transport
	refuse, swallow atomic.Bool
}

type gateLink struct {
	wire.Link
	g *gateTransport
}

var errGateRefused = errors.New("gate: refused")

func (g *gateTransport) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	if g.refuse.Load() {
		return nil, errGateRefused
	}
	l, err := g.Transport.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return &gateLink{Link: l, g: g}, nil
}

func (l *gateLink) WriteFrames(frames []wire.Frame) error {
	if l.g.swallow.Load() {
		return nil
	}
	return l.Link.WriteFrames(frames)
}

func (l *gateLink) EndHandshake() {
	if h, ok := l.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// received is what a peer's dispatcher got: fronts and seqs, in order.
type received struct {
	mu     sync.Mutex
	fronts []string
	seqs   []uint64
}

func (r *received) Dispatch(m *Message) {
	r.mu.Lock()
	r.fronts = append(r.fronts, string(m.Front))
	r.seqs = append(r.seqs, m.Seq())
	r.mu.Unlock()
	m.Release()
}

func (r *received) HandleEvent(Event) {}

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
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var rec received
	srv, err := New(Options{Name: "osd.0", Transports: tcpOnly, Logger: quiet, Dispatcher: &rec})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen(ctx, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateTransport{}
	cli, err := New(Options{Name: "osd.1", Transports: []wire.Transport{g}, Logger: quiet,
		Dispatcher: DispatchFunc(func(m *Message) { m.Release() }),
		Reconnect:  Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}, SendQueueMsgs: 4})
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, cli, srv)
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	wait := func(what string, cond func() bool) {
		t.Helper()
		if !pollUntil(deadline, cond) {
			t.Fatalf("%s: %v", what, c)
		}
	}
	send := func(front string, opt ...func(*Message)) Ticket {
		t.Helper()
		m := NewMessage(1, []byte(front), nil)
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

	// b is written and lost on the way: it may have arrived, as far as
	// this side knows, so it stays for the replay.
	g.swallow.Store(true)
	tB := send("b")
	wait("b written", func() bool { return c.Stats().MsgsSent == 2 })
	if c.Withdraw(tB) {
		t.Fatal("withdrew a message written to a link")
	}

	// The link goes down and stays down.
	g.refuse.Store(true)
	c.mu.Lock()
	lr := c.link
	c.mu.Unlock()
	lr.link.Close()
	wait("link down", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.link == nil })
	g.swallow.Store(false)
	if c.Withdraw(tB) {
		t.Fatal("withdrew a message to replay")
	}

	tC := send("c")
	var releasedD atomic.Int32
	tD := send("d", func(m *Message) { m.OnRelease = func(*Message) { releasedD.Add(1) } })
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
	go func() { sent <- c.Send(ctx, NewMessage(1, []byte("g"), nil)) }()
	wait("g blocked", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.spaceWait != nil })
	if !c.Withdraw(tF) {
		t.Fatal("withdraw of f failed")
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Until(deadline)):
		t.Fatal("the blocked sender did not get f's room")
	}

	other, err := cli.Connect(ctx, "tcp://127.0.0.1:1", "osd.9")
	if err != nil {
		t.Fatal(err)
	}
	if other.Withdraw(tC) || c.Withdraw(Ticket{}) {
		t.Fatal("withdrew with a ticket of another conn, or the zero ticket")
	}

	g.refuse.Store(false)
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
