package msgr

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestTombstones(ttl time.Duration, max int) (*tombstones, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	t := newTombstones(ttl)
	t.max, t.now = max, clk.now
	return t, clk
}

func TestTombstonesExpire(t *testing.T) {
	ts, clk := newTestTombstones(time.Minute, 100)
	ts.add(3, "osd.1")
	clk.t = clk.t.Add(30 * time.Second)
	ts.add(5, "osd.2")
	clk.t = clk.t.Add(30*time.Second - 1)
	if !ts.closed(3, "osd.1") || !ts.closed(5, "osd.2") {
		t.Fatal("a session closed less than the TTL ago is forgotten")
	}
	// Asked again (an answer lost on the way), the same answer.
	if !ts.closed(3, "osd.1") {
		t.Fatal("a tombstone went once asked")
	}
	clk.t = clk.t.Add(1)
	if ts.closed(3, "osd.1") {
		t.Fatal("a session closed the TTL ago is still remembered")
	}
	if !ts.closed(5, "osd.2") {
		t.Fatal("the younger tombstone expired with the older")
	}
	if ts.len() != 1 || len(ts.order) != 1 {
		t.Fatalf("%d entries (%d in order) after one expired, want 1", ts.len(), len(ts.order))
	}
	clk.t = clk.t.Add(time.Hour)
	ts.add(7, "osd.3") // pruning runs on add too
	if ts.len() != 1 || !ts.closed(7, "osd.3") {
		t.Fatalf("%d entries, want the new one only", ts.len())
	}
}

func TestTombstonesNoTTL(t *testing.T) {
	ts, clk := newTestTombstones(-1, 100) // StandbyTimeout < 0: standby for ever
	ts.add(3, "osd.1")
	clk.t = clk.t.Add(1000 * time.Hour)
	if !ts.closed(3, "osd.1") {
		t.Fatal("expired with no TTL")
	}
}

func TestTombstonesCountBound(t *testing.T) {
	ts, _ := newTestTombstones(time.Minute, 3)
	for c := uint64(1); c <= 5; c++ {
		ts.add(c, "osd.1")
	}
	if ts.len() != 3 || len(ts.order) != 3 {
		t.Fatalf("%d entries (%d in order), want the bound 3", ts.len(), len(ts.order))
	}
	for c := uint64(1); c <= 5; c++ {
		if got, want := ts.closed(c, "osd.1"), c > 2; got != want {
			t.Errorf("cookie %d remembered %v, want %v (the oldest go first)", c, got, want)
		}
	}
	ts.add(4, "osd.1") // already there: no second entry to evict a live one
	if ts.len() != 3 || len(ts.order) != 3 || !ts.closed(3, "osd.1") {
		t.Fatalf("re-adding a cookie: %d entries (%d in order)", ts.len(), len(ts.order))
	}
}

func TestTombstonesMatchPeer(t *testing.T) {
	ts, _ := newTestTombstones(time.Minute, 100)
	ts.add(3, "osd.1")
	if ts.closed(3, "osd.2") {
		t.Fatal("another peer presenting the cookie matched")
	}
	if ts.closed(4, "osd.1") {
		t.Fatal("another cookie of the peer matched")
	}
	ts.clear()
	if ts.len() != 0 || ts.closed(3, "osd.1") {
		t.Fatal("clear kept entries")
	}
}

// TestMessengerTombstones: which closes leave a tombstone, and a
// messenger's are gone once it shuts down.
func TestMessengerTombstones(t *testing.T) {
	m, err := New(Options{Name: "osd.0", Dispatcher: DispatchFunc(func(m *Message) { m.Release() }),
		Logger: slog.New(slog.DiscardHandler), Transports: tcpOnly})
	if err != nil {
		t.Fatal(err)
	}
	if m.tombs.ttl != defaultStandbyTimeout {
		t.Errorf("tombstones last %v, want StandbyTimeout %v", m.tombs.ttl, defaultStandbyTimeout)
	}
	open := func(peer EntityName, policy Policy, peerCookie uint64) *Conn {
		m.mu.Lock()
		c := m.newConn(policy, "", peer, 8)
		c.peerCookie = peerCookie
		if policy.Lossy {
			m.lossyIn[c] = struct{}{}
		} else {
			m.byPeer[peer] = c
		}
		m.mu.Unlock()
		return c
	}
	closed := open("osd.1", LosslessPeer, 9)
	closed.Close()
	open("osd.2", LosslessPeer, 0).Close()                                // never handshaken: the peer knows no cookie of ours
	open("client.1", StatelessServer, 9).Close()                          // lossy: never resumed
	open("osd.3", LosslessPeer, 9).closeWith(ErrIdleTimeout, true, false) // no CLOSE meant
	m.mu.Lock()
	n, ok := m.tombs.len(), m.tombs.closed(closed.cookie, "osd.1")
	m.mu.Unlock()
	if n != 1 || !ok {
		t.Fatalf("%d tombstones (osd.1's: %v), want osd.1's only", n, ok)
	}
	open("osd.4", LosslessPeer, 9) // closed by the shutdown: not remembered
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := m.tombs.len(); n != 0 {
		t.Fatalf("%d tombstones after shutdown", n)
	}
}

// TestClosedAnswerOlderDialer drives the acceptor as a dialer that
// predates SessionReset.closed would: told closed, it asks again with
// peer_cookie 0 on the same link, and that request starts a new session,
// as any SESSION_RESET's second request does.
func TestClosedAnswerOlderDialer(t *testing.T) {
	accepted := make(chan Event, 4)
	m, err := New(Options{
		Name:       "osd.0",
		Dispatcher: eventsTo(accepted),
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	m.mu.Lock()
	m.tombs.add(777, "osd.1")
	m.mu.Unlock()

	cli, srv := net.Pipe()
	defer cli.Close()
	link := wire.NewStreamLink(srv, wire.KnownFeatures, m.linkOptions(nil))
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- m.accept(link, m.opts.RecvWindowMsgs, "tcp") }()
	type reply struct {
		tag   wire.Tag
		front []byte
	}
	replies := make(chan reply, 16)
	go func() {
		r := wire.NewReaderLink(cli, wire.KnownFeatures, wire.Limits{MaxFront: 1 << 16, MaxData: 1 << 20})
		for {
			var f wire.Frame
			if err := r.ReadFrame(&f); err != nil {
				close(replies)
				return
			}
			replies <- reply{f.Tag, append([]byte(nil), f.Front...)}
			f.Release()
		}
	}()
	req := func(peerCookie uint64) []byte {
		return fuzzHS(wire.TagSessionReq, &msgrpb.SessionRequest{Cookie: 11, PeerCookie: peerCookie,
			WindowMsgs: 8, WindowBytes: 1 << 16, GrantMsgs: 8, GrantBytes: 1 << 16})
	}
	in := concat(fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "osd.1", InstanceNonce: 7}),
		fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"none"}}), req(777), req(0))
	if _, err := cli.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := <-acceptErr; err != nil {
		t.Fatalf("accept: %v", err)
	}
	for _, want := range []wire.Tag{wire.TagHello, wire.TagAuthDone, wire.TagSessionReset, wire.TagSessionReady} {
		got := <-replies
		if got.tag != want {
			t.Fatalf("acceptor sent %v, want %v", got.tag, want)
		}
		if got.tag == wire.TagSessionReset {
			var reset msgrpb.SessionReset
			if err := proto.Unmarshal(got.front, &reset); err != nil {
				t.Fatal(err)
			}
			if !reset.Closed || reset.Fatal {
				t.Fatalf("SESSION_RESET %v, want closed and not fatal", &reset)
			}
		}
	}
	if ev := <-accepted; ev.Kind != EventAccept {
		t.Fatalf("event %v, want an accept of the new session", ev.Kind)
	}
}

// eventsTo is a Dispatcher that passes its events to a channel.
type eventsTo chan Event

func (eventsTo) Dispatch(m *Message)     { m.Release() }
func (ch eventsTo) HandleEvent(ev Event) { ch <- ev }
