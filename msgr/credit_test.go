package msgr

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Step tests of creditWindow, driven without I/O as etcd-raft drives its
// state machine, and a two-sided simulation of the flow control as conn.go
// runs it.

func newWindow(msgs, bytes uint64) *creditWindow {
	w := &creditWindow{windowMsgs: msgs, windowBytes: bytes}
	w.reset(0, 0)
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
	if m, b := w.nextGrant(); m != 8 || b != 1000 {
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
	if m, b := w.nextGrant(); m != 5 || b != 700 {
		t.Fatalf("nextGrant %d %d, want 5 700", m, b)
	}
	if w.recvMsgs.Load() != 5 {
		t.Fatal("nextGrant changed the window")
	}
	w.peerWindow(1000, 8, 1000)
	w.onSend(10)
	w.reset(0, 0)
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
	w.reset(0, 0)
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
	w.reset(4, 100)
	wantAdvertised(t, w, 4, 100)
	w.reset(0, 0)
	wantAdvertised(t, w, 3, 0)
	// More messages outstanding than the window: the grant never goes
	// below one message (the reserved one, for a grant frame) nor below
	// zero bytes.
	w = newWindow(4, 100)
	for range 4 {
		w.onReceive(50)
	}
	w.reset(0, 0)
	w.reset(0, 0) // twice, as a failed handshake and its retry do
	if m, b := w.grant(); m < 1 || b > 1<<62 {
		t.Fatalf("grant %d %d", m, b)
	}
	if m, _ := w.nextGrant(); m < 1 {
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

// ---- Two-sided simulation ----

// The simulation drives two production engines (engine.go) against each
// other with the I/O of their Conns replaced by in-memory queues: this
// file only moves frames, fires timers and releases messages, as Conn's
// reader, writer, ack timer, tick and dispatcher do, and checks what must
// hold. It owns no copy of a protocol decision.

// simNode is one side: its engine and the shell around it.
type simNode struct {
	name    string
	e       engine
	in      []wire.Frame // frames in flight to this node
	dq      []simHeld    // delivered messages the dispatcher has not released
	sizes   []int        // sizes of the messages this node sends, by seq-1
	next    int          // next of sizes to enqueue
	scratch []wire.Frame // collect's

	timer         bool // the ack timer runs (fxArmAck)
	wake, running bool // the writer is kicked, or in its loop
	linkUp        bool
	link          int    // the link's generation, counting handshakes
	lastSeq       uint64 // the last seq delivered
	delivered     int
	consumedN     int
	sendQueueMsgs int
	framesSent    int
}

// simHeld is a message with the dispatcher.
type simHeld struct {
	size uint64
	link int // the link it arrived on
}

type simulation struct {
	t     *testing.T
	failf func(string)
	cfg   simConfig
	rng   *rand.Rand
	a, b  *simNode
	trace []string
	step  int

	handshakes, carried int // links, and links that began with messages held
}

type simConfig struct {
	seed        uint64
	windowMsgs  uint64
	windowBytes uint64
	msgs        int     // messages each side sends
	maxSize     int     // sizes up to this
	oversize    float64 // probability of a message above the byte window
	ticks       bool    // Conn.tick sets ackNow now and then
	keepalive   bool    // ticks send keepalives (and come often)
	faults      bool    // links fail and are re-established
	queueMsgs   int     // SendQueueMsgs
}

var simPayload = make([]byte, 1<<16)

// simClock is the engines' clock: constant, so transcripts do not depend
// on timing (keepalive stamps read seq=1).
func simClock() uint64 { return 1 }

func (s *simulation) logf(format string, args ...any) {
	if len(s.trace) >= 64 {
		s.trace = s.trace[1:]
	}
	s.trace = append(s.trace, fmt.Sprintf("%6d ", s.step)+fmt.Sprintf(format, args...))
}

func (s *simulation) fail(format string, args ...any) {
	s.t.Helper()
	if s.failf != nil { // a script prints the error and goes on
		s.failf(fmt.Sprintf(format, args...))
		return
	}
	s.t.Fatalf("seed %d (%+v): %s\nstate:\n  %s\n  %s\nlast steps:\n%s", s.cfg.seed, s.cfg, fmt.Sprintf(format, args...),
		s.a.state(), s.b.state(), strings.Join(s.trace, "\n"))
}

func (n *simNode) state() string {
	return fmt.Sprintf("%s: %v | next %d/%d | inflight-to %d dq %d delivered %d | ackNow %v armed %v timer %v kaAck %v kaPending %v wake %v running %v link %v",
		n.name, &n.e, n.next, len(n.sizes), len(n.in), len(n.dq), n.delivered,
		n.e.ackNow, n.e.ackArmed, n.timer, n.e.kaAck, n.e.kaPending, n.wake, n.running, n.linkUp)
}

func (s *simulation) peer(n *simNode) *simNode {
	if n == s.a {
		return s.b
	}
	return s.a
}

// kick is linkRun.kick: it wakes the writer of a live link.
func (n *simNode) kick() {
	if n.linkUp {
		n.wake = true
	}
}

// apply is Conn.applyLocked.
func (n *simNode) apply(fx effects) {
	if fx&fxArmAck != 0 {
		n.timer = true
	}
	if fx&fxWake != 0 {
		n.kick()
	}
}

// sendNext is Conn.Send of the next of sizes, without the queue bound.
func (n *simNode) sendNext() {
	n.e.enqueue(&Message{Front: simPayload[:n.sizes[n.next]]})
	n.next++
	n.kick()
}

// collect is one writeBatch: the frames go in flight to the peer.
func (s *simulation) collect(n *simNode) []wire.Frame {
	fr, fx := n.e.collect(n.scratch, maxBatchFrames, maxBatchBytes)
	n.scratch = fr
	n.apply(fx)
	n.framesSent += len(fr)
	p := s.peer(n)
	p.in = append(p.in, fr...)
	return fr
}

// handle is the reader's Conn.handleFrame and its dispatch.
func (s *simulation) handle(n *simNode, f wire.Frame) {
	_, v, fx, err := n.e.onFrame(&f, len(n.in) > 0, nil)
	if err != nil {
		s.fail("%s receiving %v seq %d size %d: %v", n.name, f.Tag, f.Seq, len(f.Front), err)
		return
	}
	switch v {
	case rxDeliver:
		if f.Seq != n.lastSeq+1 {
			s.fail("%s: delivered seq %d after %d", n.name, f.Seq, n.lastSeq)
			return
		}
		n.lastSeq = f.Seq
		if sizes := s.peer(n).sizes; f.Seq <= uint64(len(sizes)) && len(f.Front) != sizes[f.Seq-1] {
			s.fail("%s: message %d has %d bytes, sent %d", n.name, f.Seq, len(f.Front), sizes[f.Seq-1])
			return
		}
		n.delivered++
		n.dq = append(n.dq, simHeld{size: uint64(len(f.Front)), link: n.link})
	case rxClose:
		s.fail("%s: unexpected CLOSE", n.name)
		return
	}
	n.apply(fx)
}

// consume is Message.Release of the oldest message held: Conn.consumed.
func (n *simNode) consume() uint64 {
	h := n.dq[0]
	n.dq = n.dq[1:]
	n.consumedN++
	wake, arm := n.e.onRelease(int64(h.size))
	if wake {
		n.kick()
	}
	if arm {
		n.apply(n.e.armAck())
	}
	return h.size
}

// fireTimer is Conn.ackTimerFired.
func (n *simNode) fireTimer() {
	n.timer = false
	n.apply(n.e.onAckTimer())
}

// tick is Conn.tick on a link that just received (never idle).
func (n *simNode) tick(keepalive bool) {
	fx, dead := n.e.onTick(0, time.Hour, keepalive, false)
	if dead {
		panic("a link that just received is dead")
	}
	n.apply(fx)
}

// handshake is clientHandshake (a dials) and acceptSession (b). Each
// side's InSeq is read when its handshake frame goes out; with stale,
// messages that arrived on the old link after that, which the peer sends
// again and the receiver must drop as duplicates.
func (s *simulation) handshake(stale bool) {
	a, b := s.a, s.b
	s.handshakes++
	if len(a.dq)+len(b.dq) > 0 {
		s.carried++
	}
	inSeq := func(n *simNode) uint64 {
		in := n.e.sess.inSeq
		if stale && in > 0 {
			in -= 1 + uint64(s.rng.IntN(int(in)))
		}
		return in
	}
	gm, gb := a.e.cw.nextGrant()
	if gm < 1 {
		s.fail("dialer grant %d refused", gm)
		return
	}
	b.e.startLink(0, 0, a.e.cw.windowBytes, gm, gb, 0)
	rm, rb := advertised(&b.e.cw)
	if _, _, err := b.e.attach(inSeq(a), nil); err != nil {
		s.fail("acceptor attach: %v", err)
		return
	}
	a.e.startLink(gm, gb, b.e.cw.windowBytes, rm, rb, 0)
	if _, _, err := a.e.attach(inSeq(b), nil); err != nil {
		s.fail("dialer attach: %v", err)
		return
	}
	for _, n := range []*simNode{a, b} {
		n.linkUp, n.running, n.wake = true, false, true // startLink kicks the writer
		n.link++
	}
	s.logf("handshake: a grants %d/%d, b grants %d/%d", gm, gb, rm, rb)
}

func (s *simulation) fault() {
	for _, n := range []*simNode{s.a, s.b} {
		n.linkUp, n.running, n.wake = false, false, false
		n.in = nil
	}
	s.logf("link fault")
}

// checkCredits fails unless the credit the sender still holds, the frames
// in flight and the messages the receiver holds from this link fit the
// receiver's window: each of them needs a receive slot (on RDMA a posted
// receive) the receiver set aside when it granted the credit. Bytes alike,
// including an oversized message, sent only once everything before it was
// consumed.
func (s *simulation) checkCredits() {
	for _, r := range []*simNode{s.a, s.b} {
		snd := s.peer(r)
		if !r.linkUp {
			continue
		}
		msgs := int64(snd.e.cw.limitMsgs) - int64(snd.e.cw.sentMsgs) + int64(len(r.in))
		bytes := int64(snd.e.cw.limitBytes) - int64(snd.e.cw.sentBytes)
		for _, f := range r.in {
			bytes += int64(len(f.Front))
		}
		for _, h := range r.dq {
			if h.link == r.link {
				msgs++
				bytes += int64(h.size)
			}
		}
		if msgs > int64(r.e.cw.windowMsgs) || bytes > int64(r.e.cw.windowBytes) {
			s.fail("%s was granted room for %d messages and %d bytes beyond what it holds, more than its window of %d and %d",
				r.name, msgs, bytes, r.e.cw.windowMsgs, r.e.cw.windowBytes)
		}
		if snd.e.cw.sentMsgs > snd.e.cw.limitMsgs {
			s.fail("%s sent %d frames beyond its limit %d", snd.name, snd.e.cw.sentMsgs, snd.e.cw.limitMsgs)
		}
	}
}

func (n *simNode) done(peer *simNode) bool {
	return n.next == len(n.sizes) && n.e.sess.queued() == 0 && len(n.dq) == 0 && n.delivered == len(peer.sizes)
}

func newSimNode(name string, cfg simConfig, rng *rand.Rand) *simNode {
	n := &simNode{name: name, sendQueueMsgs: cfg.queueMsgs}
	n.e.init(cfg.windowMsgs, cfg.windowBytes, simClock)
	n.e.cw.reset(0, 0)
	for range cfg.msgs {
		size := rng.IntN(cfg.maxSize + 1)
		if rng.Float64() < cfg.oversize {
			size = int(cfg.windowBytes) + 1 + rng.IntN(int(cfg.windowBytes))
		}
		n.sizes = append(n.sizes, size)
	}
	return n
}

func newSimulation(t *testing.T, cfg simConfig) *simulation {
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	s := &simulation{t: t, cfg: cfg, rng: rng}
	s.a, s.b = newSimNode("a", cfg, rng), newSimNode("b", cfg, rng)
	s.handshake(false)
	return s
}

type simAction struct {
	weight float64
	name   string
	do     func()
}

// runSimulation drives two nodes with a seeded random schedule until every
// message was delivered, consumed and acked on both sides, and fails on a
// credit violation or when nothing moves any more.
func runSimulation(t *testing.T, cfg simConfig) *simulation {
	s := newSimulation(t, cfg)
	rng := s.rng
	// Consumers run at their own random speeds.
	speed := map[*simNode]float64{s.a: 0.05 + 3*rng.Float64(), s.b: 0.05 + 3*rng.Float64()}
	if rng.IntN(4) == 0 {
		speed[s.a] = 0.01 // one very slow consumer
	}
	progress := func() int {
		p := 0
		for _, n := range []*simNode{s.a, s.b} {
			p += n.next + n.delivered + n.consumedN + int(n.e.sess.outSeq) - n.e.sess.queued()
		}
		return p
	}
	last, lastStep := progress(), 0
	var acts []simAction
	for s.step = 0; ; s.step++ {
		if s.a.done(s.b) && s.b.done(s.a) {
			break
		}
		acts = acts[:0]
		for _, n := range []*simNode{s.a, s.b} {
			if n.linkUp && len(n.in) > 0 {
				acts = append(acts, simAction{3, "deliver to " + n.name, func() {
					f := n.in[0]
					n.in = n.in[1:]
					s.logf("%s <- %s", n.name, fmtSimFrame(f))
					s.handle(n, f)
				}})
			}
			if n.linkUp && (n.wake || n.running) {
				acts = append(acts, simAction{3, "write " + n.name, func() {
					if !n.running {
						n.wake, n.running = false, true
					}
					fr := s.collect(n)
					if len(fr) == 0 {
						n.running = false
						return
					}
					s.logf("%s -> %d frames, first %v, %v", n.name, len(fr), fr[0].Tag, &n.e.cw)
				}})
			}
			if len(n.dq) > 0 {
				acts = append(acts, simAction{speed[n], "consume " + n.name, func() {
					n.consume()
					s.logf("%s consumed, %v", n.name, &n.e.cw)
				}})
			}
			if n.timer {
				acts = append(acts, simAction{0.5, "ack timer " + n.name, n.fireTimer})
			}
			if n.next < len(n.sizes) && n.e.sess.queued() < n.sendQueueMsgs {
				acts = append(acts, simAction{2, "send " + n.name, n.sendNext})
			}
			if (cfg.ticks || cfg.keepalive) && n.linkUp {
				// Conn.tick: a lagging ack goes out at least once a
				// tick, and every few ticks a keepalive.
				w := 0.05
				if cfg.keepalive {
					w = 0.3
				}
				acts = append(acts, simAction{w, "tick " + n.name, func() {
					n.tick(cfg.keepalive)
					s.logf("%s tick", n.name)
				}})
			}
		}
		if cfg.faults {
			if s.a.linkUp {
				acts = append(acts, simAction{0.002, "fault", s.fault})
			} else {
				// Half the reconnects race a message on the old link.
				acts = append(acts, simAction{1, "handshake", func() { s.handshake(rng.IntN(2) == 0) }})
			}
		}
		if len(acts) == 0 {
			s.fail("deadlock: nothing can happen")
		}
		total := 0.0
		for _, a := range acts {
			total += a.weight
		}
		x := rng.Float64() * total
		i := 0
		for ; i < len(acts)-1 && x >= acts[i].weight; i++ {
			x -= acts[i].weight
		}
		acts[i].do()

		s.checkCredits()
		if p := progress(); p != last {
			last, lastStep = p, s.step
		} else if s.step-lastStep > 20000 {
			s.fail("no progress for 20000 steps: a deadlock")
		}
	}
	if s.a.delivered != len(s.b.sizes) || s.b.delivered != len(s.a.sizes) {
		s.fail("delivered %d and %d", s.a.delivered, s.b.delivered)
	}
	// Once everything is delivered and consumed the link goes quiet: the
	// last grants and acks go out, and nobody answers a grant with one.
	frames := 0
	for quiet := false; !quiet; {
		quiet = true
		for _, n := range []*simNode{s.a, s.b} {
			for len(n.in) > 0 {
				f := n.in[0]
				n.in = n.in[1:]
				s.handle(n, f)
				quiet = false
			}
			if n.timer {
				n.fireTimer()
				quiet = false
			}
			if n.wake || n.running {
				n.wake, n.running = false, false
				for fr := s.collect(n); len(fr) > 0; fr = s.collect(n) {
					frames += len(fr)
					quiet = false
				}
			}
		}
		s.checkCredits()
		if frames > 20 {
			s.fail("idle peers keep trading frames (%d so far)", frames)
		}
	}
	return s
}

func TestCreditSimulation(t *testing.T) {
	configs := []simConfig{
		// Small windows, where running out of credit is the rule.
		{windowMsgs: 4, windowBytes: 1000, msgs: 200, maxSize: 300, queueMsgs: 64},
		{windowMsgs: 5, windowBytes: 500, msgs: 150, maxSize: 400, oversize: 0.05, queueMsgs: 16},
		{windowMsgs: 16, windowBytes: 4000, msgs: 300, maxSize: 1000, oversize: 0.02, queueMsgs: 1000},
		{windowMsgs: 64, windowBytes: 1 << 16, msgs: 400, maxSize: 100, queueMsgs: 4096, ticks: true},
		// Byte-bound: big messages in a small byte window.
		{windowMsgs: 32, windowBytes: 1000, msgs: 150, maxSize: 900, oversize: 0.1, queueMsgs: 8},
		// Link faults: reconnects with messages outstanding on both sides.
		{windowMsgs: 4, windowBytes: 1000, msgs: 200, maxSize: 300, oversize: 0.05, queueMsgs: 64, faults: true},
		{windowMsgs: 8, windowBytes: 2000, msgs: 200, maxSize: 700, oversize: 0.05, queueMsgs: 16, faults: true, ticks: true},
	}
	seeds := 16
	if testing.Short() {
		seeds = 4
	}
	for ci, cfg := range configs {
		t.Run(fmt.Sprintf("config%d", ci), func(t *testing.T) {
			handshakes, carried, dupes := 0, 0, uint64(0)
			for seed := range seeds {
				cfg.seed = uint64(ci*1000 + seed)
				s := runSimulation(t, cfg)
				handshakes += s.handshakes
				carried += s.carried
				dupes += s.a.e.st.DuplicatesDropped + s.b.e.st.DuplicatesDropped
			}
			if cfg.faults && (carried == 0 || dupes == 0) {
				t.Fatalf("%d reconnects, %d with messages held by a dispatcher, %d duplicates dropped: want some of each",
					handshakes-seeds, carried, dupes)
			}
			t.Logf("%d seeds, %d reconnects, %d with messages held, %d duplicates dropped", seeds, handshakes-seeds, carried, dupes)
		})
	}
}

// TestCreditSimulationKeepalives runs the simulation with keepalive ticks.
// Keepalives once could spend the reserved credit (see
// TestCreditKeepalivesKeepGrantCredit): seed 0 then ended with both sides
// at sent == limit, each owing the other a KEEPALIVE_ACK and a grant.
func TestCreditSimulationKeepalives(t *testing.T) {
	for seed := range 40 {
		cfg := simConfig{seed: uint64(seed), windowMsgs: 4, windowBytes: 1000, msgs: 150, maxSize: 300, queueMsgs: 64, keepalive: true}
		runSimulation(t, cfg)
	}
}

// ---- Scripted simulation ----

var rewriteCreditScripts = flag.Bool("credit.rewrite", false, "rewrite the expected output of testdata/credit/*.txt")

// TestCreditScripts runs testdata/credit/*.txt, transcripts of the same two
// simulated nodes driven step by step, in the style of etcd-raft's
// interaction tests. Each case is a command, a "----" line and the expected
// output, ending at a blank line. Commands:
//
//	init msgs=N bytes=N        two nodes a (dialer) and b, handshake done
//	send a SIZE...             queue messages at a
//	write a                    a's writer runs (if kicked) until collect is empty
//	deliver b [N]              deliver N (default all) frames in flight to b
//	consume b [N]              b's dispatcher releases N (default all) messages
//	timer a                    a's ack timer fires (if armed)
//	tick a [keepalive]         a's Conn.tick
//	inject b TAG seq=N size=N  a frame to b that bypasses a's credit check
//	fault | handshake          the link fails | is re-established
//	state                      both nodes
//
// go test -run TestCreditScripts -credit.rewrite ./msgr rewrites the outputs.
func TestCreditScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "credit", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/credit")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			runCreditScript(t, file)
		})
	}
}

type scriptCase struct {
	line     int
	cmd      string
	expected string
}

func parseScript(t *testing.T, file string) []scriptCase {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var cases []scriptCase
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c := scriptCase{line: i + 1, cmd: l}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s:%d: %q not followed by ----", file, i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases
}

func runCreditScript(t *testing.T, file string) {
	cases := parseScript(t, file)
	var s *simulation
	var rewritten strings.Builder
	for _, c := range cases {
		var out []string
		printf := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
		fields := strings.Fields(c.cmd)
		node := func(i int) *simNode {
			if s == nil {
				t.Fatalf("%s:%d: init first", file, c.line)
			}
			if len(fields) <= i {
				t.Fatalf("%s:%d: missing node", file, c.line)
			}
			switch fields[i] {
			case "a":
				return s.a
			case "b":
				return s.b
			}
			t.Fatalf("%s:%d: no node %q", file, c.line, fields[i])
			return nil
		}
		count := func(i, all int) int {
			if len(fields) <= i {
				return all
			}
			n, err := strconv.Atoi(fields[i])
			if err != nil {
				t.Fatalf("%s:%d: %v", file, c.line, err)
			}
			return min(n, all)
		}
		kv := func(from int) map[string]uint64 {
			m := map[string]uint64{}
			for _, f := range fields[from:] {
				k, v, ok := strings.Cut(f, "=")
				if !ok {
					t.Fatalf("%s:%d: want key=value, got %q", file, c.line, f)
				}
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, c.line, err)
				}
				m[k] = n
			}
			return m
		}
		if s != nil {
			s.failf = func(msg string) { printf("error: %s", msg) }
		}
		switch fields[0] {
		case "init":
			args := kv(1)
			cfg := simConfig{windowMsgs: args["msgs"], windowBytes: args["bytes"], queueMsgs: 1 << 20}
			s = newSimulation(t, cfg)
			s.failf = func(msg string) { printf("error: %s", msg) }
			printf("%s", s.trace[len(s.trace)-1][7:])
		case "send":
			n := node(1)
			for _, f := range fields[2:] {
				size, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, c.line, err)
				}
				n.sizes = append(n.sizes, size)
				n.sendNext()
			}
			printf("%s queued %d", n.name, n.e.sess.queued())
		case "write":
			n := node(1)
			if !n.wake && !n.running {
				printf("%s: writer not woken", n.name)
				break
			}
			n.wake, n.running = false, true
			for {
				fr := s.collect(n)
				if len(fr) == 0 {
					n.running = false
					break
				}
				for _, f := range fr {
					printf("%s -> %s", n.name, fmtSimFrame(f))
				}
			}
			if len(out) == 0 {
				printf("%s -> nothing%s", n.name, ifStr(n.timer, " (ack timer armed)"))
			}
		case "deliver":
			n := node(1)
			for range count(2, len(n.in)) {
				f := n.in[0]
				n.in = n.in[1:]
				printf("%s <- %s", n.name, fmtSimFrame(f))
				s.handle(n, f)
			}
			if len(out) == 0 {
				printf("nothing in flight to %s", n.name)
			}
		case "consume":
			n := node(1)
			for range count(2, len(n.dq)) {
				size := n.consume()
				printf("%s released %d bytes; grant %s", n.name, size, grantState(&n.e.cw))
			}
			if len(out) == 0 {
				printf("%s holds nothing", n.name)
			}
		case "timer":
			n := node(1)
			if !n.timer {
				printf("%s: ack timer not armed", n.name)
				break
			}
			n.fireTimer()
			printf("%s: ack timer fired", n.name)
		case "tick":
			n := node(1)
			n.tick(len(fields) > 2 && fields[2] == "keepalive")
			printf("%s: tick", n.name)
		case "inject":
			n := node(1)
			args := kv(3)
			tag := map[string]wire.Tag{"MESSAGE": wire.TagMessage, "ACK": wire.TagAck, "KEEPALIVE": wire.TagKeepalive}[fields[2]]
			f := wire.Frame{Preamble: wire.Preamble{Tag: tag, Seq: args["seq"], Ack: args["ack"]}, Front: simPayload[:args["size"]]}
			printf("%s <- %s (injected)", n.name, fmtSimFrame(f))
			s.handle(n, f)
		case "fault":
			s.fault()
			printf("link down; in flight dropped")
		case "handshake":
			s.handshake(false)
			printf("%s", s.trace[len(s.trace)-1][7:])
		case "state":
			for _, n := range []*simNode{s.a, s.b} {
				e := &n.e
				printf("%s: %v", n.name, &e.cw)
				printf("   queued %d (sent on this link %d), in flight to it %d, held %d, inSeq %d%s%s%s", e.sess.queued(), e.sess.sent,
					len(n.in), len(n.dq), e.sess.inSeq, ifStr(e.sess.ackOwed(), ", ack owed"),
					ifStr(e.cw.grantUrgent(), ", grant urgent"), ifStr(e.cw.grantIdle(), ", grant idle"))
			}
		default:
			t.Fatalf("%s:%d: unknown command %q", file, c.line, fields[0])
		}
		got := strings.Join(out, "\n")
		if *rewriteCreditScripts {
			fmt.Fprintf(&rewritten, "%s\n----\n%s\n\n", c.cmd, got)
			continue
		}
		if got != c.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, c.line, c.cmd, got, c.expected)
		}
	}
	if *rewriteCreditScripts {
		// Comments are kept only at the top of the file.
		b, _ := os.ReadFile(file)
		var head strings.Builder
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "#") {
				break
			}
			head.WriteString(l + "\n")
		}
		if head.Len() > 0 {
			head.WriteString("\n")
		}
		if err := os.WriteFile(file, []byte(head.String()+rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fmtSimFrame(f wire.Frame) string {
	s := fmt.Sprintf("%v", f.Tag)
	if f.Tag == wire.TagMessage || f.Tag == wire.TagKeepalive || f.Tag == wire.TagKeepaliveAck {
		s += fmt.Sprintf(" seq=%d", f.Seq)
	}
	if f.Tag == wire.TagMessage {
		s += fmt.Sprintf(" size=%d", len(f.Front)+len(f.Data))
	}
	return s + fmt.Sprintf(" ack=%d grant=%d/%d", f.Ack, f.GrantMsgs, f.GrantBytes)
}

func grantState(w *creditWindow) string {
	m, b := w.grant()
	am, ab := advertised(w)
	s := fmt.Sprintf("%d/%d (advertised %d/%d)", m, b, am, ab)
	switch {
	case w.grantUrgent():
		s += ", urgent"
	case w.grantIdle():
		s += ", idle"
	}
	return s
}

func ifStr(c bool, s string) string {
	if c {
		return s
	}
	return ""
}
