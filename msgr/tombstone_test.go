package msgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
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

// TestTombstonesLastWith: a new session names the last session closed
// with its peer, while that one is remembered.
func TestTombstonesLastWith(t *testing.T) {
	ts, clk := newTestTombstones(time.Minute, 3)
	ts.add(3, "osd.1")
	clk.t = clk.t.Add(30 * time.Second)
	ts.add(5, "osd.1")
	ts.add(7, "osd.2")
	if got := ts.lastWith("osd.1"); got != 5 {
		t.Fatalf("last closed with osd.1: %d, want 5", got)
	}
	clk.t = clk.t.Add(30 * time.Second) // 3 expires: 5 is still the last
	if got := ts.lastWith("osd.1"); got != 5 {
		t.Fatalf("last closed with osd.1 after an older expired: %d, want 5", got)
	}
	ts.add(9, "osd.3")
	ts.add(11, "osd.3")
	ts.add(13, "osd.3") // the bound evicts 5 and 7
	if got, got2 := ts.lastWith("osd.1"), ts.lastWith("osd.2"); got != 0 || got2 != 0 {
		t.Fatalf("evicted sessions still named: osd.1 %d, osd.2 %d", got, got2)
	}
	if got := ts.lastWith("osd.3"); got != 13 {
		t.Fatalf("last closed with osd.3: %d, want 13", got)
	}
	if len(ts.byPeer) != 1 {
		t.Fatalf("%d peers indexed, want 1", len(ts.byPeer))
	}
	ts.clear()
	if ts.lastWith("osd.3") != 0 || len(ts.byPeer) != 0 {
		t.Fatal("clear kept the peer index")
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
	t.Cleanup(func() { m.Shutdown(context.Background()) }) // after rawDial's
	m.mu.Lock()
	m.tombs.add(777, "osd.1")
	m.mu.Unlock()

	replies := rawDial(t, m, rawRequest(777, 0), rawRequest(0, 0))
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

// TestClosedCookieEndsOldSession: a new session whose dialer names, in
// closed_cookie, the session it closed ends that session here as its
// CLOSE would have, and starts in a new Conn; a closed_cookie that names
// another session leaves the rules as they were (a new cookie: the dialer
// restarted, §6.4 rule 10).
func TestClosedCookieEndsOldSession(t *testing.T) {
	for _, tc := range []struct {
		name         string
		closedCookie uint64
		wantClosed   bool
	}{
		{"names it", 5, true},
		{"names another", 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := make(chan Event, 8)
			m, err := New(Options{Name: "osd.0", Dispatcher: eventsTo(events), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			// Before rawDial's cleanup, so after it: the dialer end closes
			// first, and Shutdown's CLOSE need not wait closeGrace.
			t.Cleanup(func() { m.Shutdown(context.Background()) })
			m.mu.Lock()
			old := m.newConn(LosslessPeer, "", "osd.1", 8)
			old.peerCookie, old.peerNonce, old.state = 5, 7, stateStandby
			m.byPeer["osd.1"] = old
			m.mu.Unlock()
			for range 2 {
				if err := old.TrySend(NewMessage(1, nil, nil)); err != nil {
					t.Fatal(err)
				}
			}

			replies := rawDial(t, m, rawRequest(0, tc.closedCookie))
			for _, want := range []wire.Tag{wire.TagHello, wire.TagAuthDone, wire.TagSessionReady} {
				if got := <-replies; got.tag != want {
					t.Fatalf("acceptor sent %v, want %v", got.tag, want)
				}
			}
			want := []EventKind{EventReset, EventAccept}
			if !tc.wantClosed {
				want = []EventKind{EventRemoteReset, EventAccept}
			}
			// The old Conn's event and the new one's come in either
			// order: different Conns dispatch in parallel (Dispatcher).
			got := map[EventKind]Event{}
			for range want {
				ev := <-events
				got[ev.Kind] = ev
			}
			for _, k := range want {
				ev, ok := got[k]
				wantDropped := 2 // both queued messages, by the close or the reset
				if k == EventAccept {
					wantDropped = 0
				}
				if !ok || ev.Dropped != wantDropped {
					t.Fatalf("events %v; want %v, with %v dropping %d", got, want, k, wantDropped)
				}
				if k == EventReset && (ev.Conn != old || !errors.Is(ev.Err, ErrClosedByPeer)) {
					t.Fatalf("reset of the new session, or with %v", ev.Err)
				}
				if k == EventAccept && (ev.Conn == old) == tc.wantClosed {
					t.Fatalf("accepted into the old Conn: %v, want %v", ev.Conn == old, !tc.wantClosed)
				}
			}
		})
	}
}

// rawRequest is a SESSION_REQUEST of osd.1's session with cookie 11.
func rawRequest(peerCookie, closedCookie uint64) []byte {
	return fuzzHS(wire.TagSessionReq, &msgrpb.SessionRequest{Cookie: 11, PeerCookie: peerCookie, ClosedCookie: closedCookie,
		WindowMsgs: 8, WindowBytes: 1 << 16, GrantMsgs: 8, GrantBytes: 1 << 16})
}

// rawDial is rawAccept of a dialer osd.1 (nonce 7, auth none) that
// writes HELLO, AUTH_REQUEST and reqs.
func rawDial(t *testing.T, m *Messenger, reqs ...[]byte) <-chan rawReply {
	t.Helper()
	return rawAccept(t, m, concat(fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "osd.1", InstanceNonce: 7}),
		fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"none"}}), concat(reqs...)))
}

// eventsTo is a Dispatcher that passes its events to a channel, dropping
// those that do not fit: a test sees the first ones and never blocks the
// messenger.
type eventsTo chan Event

func (eventsTo) Dispatch(m *Message) { m.Release() }
func (ch eventsTo) HandleEvent(ev Event) {
	select {
	case ch <- ev:
	default:
	}
}

// BenchmarkTombstonesMemory reports the heap a full set of tombstones
// takes, each with a peer name of its own of the longest kind (128 bytes),
// which the set keeps alive once the closed Conns are gone.
func BenchmarkTombstonesMemory(b *testing.B) {
	names := make([]EntityName, maxTombstones)
	for i := range names {
		s := fmt.Sprintf("osd.%d", i)
		names[i] = EntityName(s + strings.Repeat("x", 128-len(s)))
	}
	var perEntry float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ts := newTombstones(-1)
		for i, name := range names {
			ts.add(uint64(2*i+1), EntityName(strings.Clone(string(name))))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry = float64(after.HeapAlloc-before.HeapAlloc) / float64(ts.len())
		runtime.KeepAlive(ts)
	}
	b.ReportMetric(perEntry, "B/tombstone")
	b.ReportMetric(perEntry*maxTombstones/(1<<20), "MiB/full")
}
