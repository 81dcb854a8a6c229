package msgr

import (
	"errors"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Step tests of creditWindow, driven without I/O as etcd-raft drives its
// state machine, and a two-sided simulation of the flow control as conn.go
// runs it.

func newWindow(msgs, bytes uint64) *creditWindow {
	w := &creditWindow{windowBytes: bytes}
	w.reset(msgs, 0, 0)
	return w
}

func advertised(w *creditWindow) (uint64, uint64) {
	return w.advertisedMsgs.Load(), w.advertisedBytes.Load()
}

func wantAdvertised(t *testing.T, w *creditWindow, msgs, bytes uint64) {
	t.Helper()
	if m, b := advertised(w); m != msgs || b != bytes {
		t.Fatalf("advertised %d msgs %d bytes, want %d and %d (%v)", m, b, msgs, bytes, w)
	}
}

func wantProtocolErr(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("got %v, want a protocol error", err)
	}
}

func TestCreditResetGrantsWindow(t *testing.T) {
	w := newWindow(8, 1000)
	wantAdvertised(t, w, 8, 1000)
	if m, b := w.grant(); m != 8 || b != 1000 {
		t.Fatalf("grant %d %d", m, b)
	}
	if m, b := w.nextGrant(8); m != 8 || b != 1000 {
		t.Fatalf("nextGrant %d %d", m, b)
	}
	// Nothing may be sent before the peer's grant arrives.
	if w.canSendData(0) || w.canSendControl() {
		t.Fatal("can send before peerWindow")
	}
	if w.grantUrgent() || w.grantIdle() {
		t.Fatal("a grant is due on a fresh window")
	}
	_ = w.String()
}

func TestCreditSendKeepsLastCreditForControl(t *testing.T) {
	w := newWindow(8, 1000)
	w.peerWindow(1000, 4, 1000)
	for i := range 3 {
		if !w.canSendData(10) {
			t.Fatalf("data %d refused with %d of %d sent", i, w.sentMsgs, w.limitMsgs)
		}
		w.onSend(10)
	}
	if w.canSendData(0) {
		t.Fatal("data may spend the last credit")
	}
	if !w.canSendControl() {
		t.Fatal("control may not spend the last credit")
	}
	w.onSend(0)
	if w.canSendControl() || w.canSendData(0) {
		t.Fatal("can send beyond the limit")
	}
	// A grant of more room reopens both.
	if !w.onGrant(6, 1000) {
		t.Fatal("grant did not grow")
	}
	if !w.canSendData(10) || !w.canSendControl() {
		t.Fatal("grant did not reopen sending")
	}
}

func TestCreditByteBudget(t *testing.T) {
	w := newWindow(100, 1000)
	w.peerWindow(1000, 100, 1000)
	w.onSend(600)
	if !w.canSendData(400) {
		t.Fatal("refused a message that fits exactly")
	}
	if w.canSendData(401) {
		t.Fatal("a message beyond the byte credit may go although 600 bytes are outstanding")
	}
	w.onSend(400)
	if w.canSendData(1) {
		t.Fatal("byte credit exhausted, yet data may go")
	}
	if !w.canSendData(0) || !w.canSendControl() {
		t.Fatal("empty frames need no byte credit")
	}
	// Stale or smaller byte grants change nothing.
	if w.onGrant(100, 999) {
		t.Fatal("a smaller byte grant grew the limit")
	}
	if !w.onGrant(100, 1500) || !w.canSendData(500) || w.canSendData(501) {
		t.Fatalf("after a byte grant: %v", w)
	}
}

func TestCreditOnGrantWraps(t *testing.T) {
	w := newWindow(8, 1000)
	// Message limits travel as 32 bits; the window extends them.
	w.peerWindow(1000, 1<<32-2, 1000)
	w.sentMsgs = 1<<32 - 10
	w.stalled = true
	if !w.onGrant(3, 0) { // 2^32 + 3, wrapped
		t.Fatal("a wrapped grant did not grow the limit")
	}
	if w.limitMsgs != 1<<32+3 {
		t.Fatalf("limit %d, want %d", w.limitMsgs, uint64(1<<32+3))
	}
	if w.stalled {
		t.Fatal("a grant did not clear stalled")
	}
	// An old grant from before the wrap (or a duplicate) is ignored.
	for _, old := range []uint32{3, 2, 1<<32 - 1, 1<<32 - 2, 1<<31 + 4} {
		if w.onGrant(old, 0) {
			t.Fatalf("stale grant %d grew the limit to %d", old, w.limitMsgs)
		}
	}
	if w.limitMsgs != 1<<32+3 {
		t.Fatalf("limit %d after stale grants", w.limitMsgs)
	}
	// Far ahead, but within 2^31: taken.
	if !w.onGrant(3+1<<30, 0) || w.limitMsgs != 1<<32+3+1<<30 {
		t.Fatalf("limit %d", w.limitMsgs)
	}
}

func TestCreditStampAndGrantOnWire(t *testing.T) {
	// The receiver's stamp, through the 32-bit preamble field, gives the
	// sender exactly the receiver's 64-bit advertisement.
	rx, tx := newWindow(16, 1<<20), newWindow(16, 1<<20)
	rx.consumedMsgs.Store(1<<32 - 5) // as after billions of frames
	rx.recvMsgs.Store(1<<32 - 5)
	var p wire.Preamble
	rx.stamp(&p)
	tx.peerWindow(1<<20, 1<<32-20, 1<<20)
	tx.onGrant(p.GrantMsgs, p.GrantBytes)
	if m, _ := advertised(rx); tx.limitMsgs != m {
		t.Fatalf("sender limit %d, receiver advertised %d", tx.limitMsgs, m)
	}
}

func TestCreditOnReceiveChecksLimits(t *testing.T) {
	w := newWindow(4, 100)
	for i := range 4 {
		if err := w.onReceive(10); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	wantProtocolErr(t, w.onReceive(0))

	w = newWindow(4, 100)
	if err := w.onReceive(60); err != nil {
		t.Fatal(err)
	}
	// 60 outstanding: 50 more exceed the byte credit.
	wantProtocolErr(t, w.onReceive(50))

	w = newWindow(4, 100)
	if err := w.onReceive(100); err != nil {
		t.Fatal(err)
	}
	if err := w.onReceive(0); err != nil {
		t.Fatalf("a control frame at a full byte window: %v", err)
	}
}

func TestCreditOversizedMessage(t *testing.T) {
	// Sender: a message larger than the whole byte window goes only once
	// the peer consumed everything sent before it.
	tx := newWindow(16, 1000)
	tx.peerWindow(100, 16, 100)
	if !tx.canSendData(500) {
		t.Fatal("an oversized message as the first one is refused")
	}
	tx.onSend(30)
	if tx.canSendData(500) {
		t.Fatal("an oversized message may go with 30 bytes unconsumed")
	}
	tx.onGrant(16, 120) // the peer consumed 20 of the 30
	if tx.canSendData(500) {
		t.Fatal("an oversized message may go with 10 bytes unconsumed")
	}
	tx.onGrant(16, 130) // all 30 consumed
	if !tx.canSendData(500) {
		t.Fatal("an oversized message is refused after everything was consumed")
	}
	tx.onSend(500)
	if tx.canSendData(1) {
		t.Fatal("data may follow an oversized message at once")
	}

	// Receiver: the same rule.
	rx := newWindow(16, 100)
	if err := rx.onReceive(500); err != nil {
		t.Fatalf("an oversized first message: %v", err)
	}
	rx.consumeData(500)
	if err := rx.onReceive(30); err != nil {
		t.Fatal(err)
	}
	wantProtocolErr(t, rx.onReceive(500)) // 30 bytes not consumed
	rx = newWindow(16, 100)
	if err := rx.onReceive(30); err != nil {
		t.Fatal(err)
	}
	rx.consumeData(30)
	if err := rx.onReceive(500); err != nil {
		t.Fatalf("oversized after everything consumed: %v", err)
	}
	// The next message, while the oversized one is held, is beyond credit.
	wantProtocolErr(t, rx.onReceive(1))
}

func TestCreditConsumeGrows(t *testing.T) {
	w := newWindow(8, 1000)
	for range 3 {
		if err := w.onReceive(100); err != nil {
			t.Fatal(err)
		}
	}
	w.consume(0) // control frames are consumed on arrival
	w.consumeData(100)
	if m, b := w.grant(); m != 10 || b != 1100 {
		t.Fatalf("grant %d %d, want 10 1100", m, b)
	}
	var p wire.Preamble
	w.stamp(&p)
	if p.GrantMsgs != 10 || p.GrantBytes != 1100 {
		t.Fatalf("stamped %d %d", p.GrantMsgs, p.GrantBytes)
	}
	wantAdvertised(t, w, 10, 1100)
	if w.dataConsumed.Load() {
		t.Fatal("stamp did not clear dataConsumed")
	}
}

func TestCreditGrantUrgentAtHalfWindow(t *testing.T) {
	w := newWindow(8, 1<<20)
	for range 8 {
		if err := w.onReceive(10); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		w.consumeData(10)
		if w.grantUrgent() {
			t.Fatalf("urgent after %d of 8 consumed", i+1)
		}
	}
	w.consumeData(10)
	if !w.grantUrgent() {
		t.Fatal("not urgent after half the window was consumed")
	}
	var p wire.Preamble
	w.stamp(&p)
	if w.grantUrgent() {
		t.Fatal("still urgent after the grant went out")
	}

	// Bytes: half the byte window freed is urgent too.
	w = newWindow(1000, 1000)
	if err := w.onReceive(499); err != nil {
		t.Fatal(err)
	}
	if err := w.onReceive(1); err != nil {
		t.Fatal(err)
	}
	w.consumeData(499)
	if w.grantUrgent() {
		t.Fatal("urgent at 499 of 1000 bytes")
	}
	w.consumeData(1)
	if !w.grantUrgent() {
		t.Fatal("not urgent at 500 of 1000 bytes")
	}

	// A window of one message: any consumption is urgent.
	w = newWindow(1, 0)
	if err := w.onReceive(0); err != nil {
		t.Fatal(err)
	}
	w.consume(0)
	if !w.grantUrgent() {
		t.Fatal("window 1: not urgent")
	}
}

func TestCreditGrantIdleAfterDrain(t *testing.T) {
	w := newWindow(100, 1<<20)
	for range 3 {
		if err := w.onReceive(10); err != nil {
			t.Fatal(err)
		}
	}
	w.consumeData(10)
	w.consumeData(10)
	if w.grantIdle() {
		t.Fatal("idle grant due with a message still held")
	}
	w.consumeData(10)
	if !w.grantIdle() {
		t.Fatal("no idle grant after every message was consumed")
	}
	if w.grantUrgent() {
		t.Fatal("3 of 100 is urgent")
	}
	var p wire.Preamble
	w.stamp(&p)
	if w.grantIdle() {
		t.Fatal("idle grant still due after it went out")
	}
	// Control frames alone never make a grant due, so two idle peers do
	// not trade grant frames forever.
	for range 10 {
		if err := w.onReceive(0); err != nil {
			t.Fatal(err)
		}
		w.consume(0)
		if w.grantIdle() || w.grantUrgent() {
			t.Fatalf("grant due after consuming control frames only (%v)", w)
		}
	}
	// Nor does a dropped duplicate.
	if err := w.onReceive(10); err != nil {
		t.Fatal(err)
	}
	w.consume(10)
	if w.grantIdle() {
		t.Fatal("grant due after dropping a duplicate")
	}
}

func TestCreditIdlePeersDoNotPingPong(t *testing.T) {
	// Two idle peers, one of which just consumed a message: one grant
	// frame goes, the other side consumes it, and that is the end.
	a, b := newWindow(8, 1000), newWindow(8, 1000)
	a.peerWindow(1000, 8, 1000)
	b.peerWindow(1000, 8, 1000)
	// b sends a message to a; a consumes it.
	var p wire.Preamble
	b.stamp(&p)
	b.onSend(10)
	if err := a.onReceive(10); err != nil {
		t.Fatal(err)
	}
	a.onGrant(p.GrantMsgs, p.GrantBytes)
	a.consumeData(10)
	frames := 0
	for turn, from, to := 0, a, b; turn < 20; turn, from, to = turn+1, to, from {
		if !(from.grantUrgent() || from.grantIdle()) || !from.canSendControl() {
			continue
		}
		frames++
		var p wire.Preamble
		from.stamp(&p)
		from.onSend(0)
		if err := to.onReceive(0); err != nil {
			t.Fatal(err)
		}
		to.onGrant(p.GrantMsgs, p.GrantBytes)
		to.consume(0)
	}
	if frames != 1 {
		t.Fatalf("%d grant frames between idle peers, want 1", frames)
	}
}

func TestCreditResetCarriesOutstanding(t *testing.T) {
	w := newWindow(8, 1000)
	for range 5 {
		if err := w.onReceive(100); err != nil {
			t.Fatal(err)
		}
	}
	w.consumeData(100)
	w.consumeData(100)
	// Three messages (300 bytes) are still with the dispatcher when the
	// link fails. The next link's grant leaves room for them.
	if m, b := w.nextGrant(8); m != 5 || b != 700 {
		t.Fatalf("nextGrant %d %d, want 5 700", m, b)
	}
	if w.recvMsgs.Load() != 5 {
		t.Fatal("nextGrant changed the window")
	}
	w.peerWindow(1000, 8, 1000)
	w.onSend(10)
	w.reset(8, 0, 0)
	wantAdvertised(t, w, 5, 700)
	if w.sentMsgs != 0 || w.sentBytes != 0 || w.limitMsgs != 0 || w.limitBytes != 0 || w.recvMsgs.Load() != 0 || w.recvBytes != 0 {
		t.Fatalf("reset left state: %v", w)
	}
	// The new link may fill what is left, no more.
	for range 5 {
		if err := w.onReceive(0); err != nil {
			t.Fatal(err)
		}
	}
	wantProtocolErr(t, w.onReceive(0))

	w = newWindow(8, 1000)
	for range 3 {
		if err := w.onReceive(100); err != nil {
			t.Fatal(err)
		}
	}
	w.reset(8, 0, 0)
	wantAdvertised(t, w, 5, 700)
	// The old messages are released on the new link: the credit comes back.
	for range 3 {
		w.consumeData(100)
	}
	if m, b := w.grant(); m != 8 || b != 1000 {
		t.Fatalf("after the old messages were consumed: grant %d %d, want 8 1000", m, b)
	}
	// Less than half the window, but everything is consumed: the grant
	// goes when the link is idle.
	if w.grantUrgent() || !w.grantIdle() {
		t.Fatalf("urgent %v idle %v, want an idle grant", w.grantUrgent(), w.grantIdle())
	}
}

func TestCreditResetFloor(t *testing.T) {
	w := newWindow(8, 1000)
	for range 5 {
		if err := w.onReceive(200); err != nil {
			t.Fatal(err)
		}
	}
	// A floor promised in the handshake is kept even where the window
	// (with 5 messages and 1000 bytes outstanding) would give less.
	w.reset(8, 4, 100)
	wantAdvertised(t, w, 4, 100)
	w.reset(8, 0, 0)
	wantAdvertised(t, w, 3, 0)
	// More messages outstanding than the window: the grant never goes
	// below one message (the reserved one, for a grant frame) nor below
	// zero bytes.
	w = newWindow(4, 100)
	for range 4 {
		w.onReceive(50)
	}
	w.reset(4, 0, 0)
	w.reset(4, 0, 0) // twice, as a failed handshake and its retry do
	if m, b := w.grant(); m < 1 || b > 1<<62 {
		t.Fatalf("grant %d %d", m, b)
	}
	if m, _ := w.nextGrant(4); m < 1 {
		t.Fatalf("nextGrant %d msgs", m)
	}
}

// TestCreditKeepalivesKeepGrantCredit: the last credit is reserved so a
// side can always tell the peer about freed slots. Keepalives that spend it
// can leave both sides with no credit at all: each consumed the other's
// keepalive, but neither may send the answer nor the grant.
func TestCreditKeepalivesKeepGrantCredit(t *testing.T) {
	s := newSimulation(t, simConfig{windowMsgs: 4, windowBytes: 1 << 20})
	both := []*simNode{s.a, s.b}
	// Both stream data until data credit runs out (the peers' dispatchers
	// are slow): each holds the reserved credit only.
	for _, n := range both {
		for range 5 {
			n.sizes = append(n.sizes, 100)
			n.sendNext()
		}
		for len(s.collect(n)) > 0 {
		}
	}
	for _, n := range both {
		for ; len(n.in) > 0; n.in = n.in[1:] {
			s.handle(n, n.in[0])
		}
	}
	// The keepalive ticks fire on both sides at about the same time.
	for _, n := range both {
		n.tick(true)
		for fr := s.collect(n); len(fr) > 0; fr = s.collect(n) {
			for _, f := range fr {
				if f.Tag == wire.TagKeepalive {
					t.Fatalf("%s: a keepalive spent the reserved credit: %v", n.name, &n.e.cw)
				}
			}
		}
	}
	for _, n := range both {
		if !n.e.cw.canSendControl() {
			t.Fatalf("%s: reserved credit lost: %v", n.name, &n.e.cw)
		}
	}
}
