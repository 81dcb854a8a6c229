package msgr

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

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
	// ticksDeaf counts this side's keepalive ticks since a frame last
	// arrived on the link: under CONTROL_SLOTS a live peer is never
	// silent for long, whatever the credits.
	ticksDeaf int
	closed    bool // a CLOSE arrived (scripts)
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
	overheld            int // links that began with a side holding at least its new window
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
	linkWindows bool    // each new link has a window of its own, 4 to 2×windowMsgs (its transport's)
	queueMsgs   int     // SendQueueMsgs
	ctl         bool    // the links agree CONTROL_SLOTS
}

var simPayload = make([]byte, 1<<16)

// simDeafTicks bounds, under CONTROL_SLOTS, the keepalive ticks a side may
// see with nothing arriving: its keepalive goes on the first and the
// answer comes back as soon as both writers and readers run, which the
// schedule makes near certain within a few ticks.
const simDeafTicks = 40

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
	n.ticksDeaf = 0
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
		if s.failf == nil {
			s.fail("%s: unexpected CLOSE", n.name)
			return
		}
		n.closed = true
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
	if keepalive {
		n.ticksDeaf++
	}
	n.apply(fx)
}

// handshake is clientHandshake (a dials) and acceptSession (b) on a link
// whose receive windows are wa and wb frames. Each side's InSeq is read
// when its handshake frame goes out; with stale, messages that arrived on
// the old link after that, which the peer sends again and the receiver
// must drop as duplicates.
func (s *simulation) handshake(stale bool, wa, wb uint64) {
	a, b := s.a, s.b
	s.handshakes++
	if len(a.dq)+len(b.dq) > 0 {
		s.carried++
	}
	if uint64(len(a.dq)) >= wa || uint64(len(b.dq)) >= wb {
		s.overheld++
	}
	inSeq := func(n *simNode) uint64 {
		in := n.e.sess.inSeq
		if stale && in > 0 {
			in -= 1 + uint64(s.rng.IntN(int(in)))
		}
		return in
	}
	gm, gb := a.e.cw.nextGrant(wa)
	if gm < 1 {
		s.fail("dialer grant %d refused", gm)
		return
	}
	b.e.startLink(wb, 0, 0, a.e.cw.windowBytes, gm, gb, 0, s.cfg.ctl)
	rm, rb := advertised(&b.e.cw)
	if _, _, err := b.e.attach(inSeq(a), nil); err != nil {
		s.fail("acceptor attach: %v", err)
		return
	}
	a.e.startLink(wa, gm, gb, b.e.cw.windowBytes, rm, rb, 0, s.cfg.ctl)
	if _, _, err := a.e.attach(inSeq(b), nil); err != nil {
		s.fail("dialer attach: %v", err)
		return
	}
	for _, n := range []*simNode{a, b} {
		n.linkUp, n.running, n.wake = true, false, true // startLink kicks the writer
		n.link++
		n.ticksDeaf = 0
	}
	windows := ""
	if wa != s.cfg.windowMsgs || wb != s.cfg.windowMsgs {
		windows = fmt.Sprintf(" (windows %d and %d)", wa, wb)
	}
	s.logf("handshake: a grants %d/%d, b grants %d/%d%s", gm, gb, rm, rb, windows)
}

// linkWindow is the receive window of one side of a new link: the
// configured one, or with linkWindows one as a transport that posts more
// or fewer receives than the last link's would give.
func (s *simulation) linkWindow() uint64 {
	if !s.cfg.linkWindows {
		return s.cfg.windowMsgs
	}
	return 4 + s.rng.Uint64N(2*s.cfg.windowMsgs-3) // 4: Options' least, and windowFor's
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
		msgs := int64(snd.e.cw.limitMsgs) - int64(snd.e.cw.sentMsgs)
		bytes := int64(snd.e.cw.limitBytes) - int64(snd.e.cw.sentBytes)
		// Under CONTROL_SLOTS the control frames in flight take the
		// receiver's slots, not credits: one each of KEEPALIVE,
		// KEEPALIVE_ACK and CLOSE.
		var slots [3]int
		for _, f := range r.in {
			bytes += int64(len(f.Front))
			switch {
			case !s.cfg.ctl:
				msgs++
			case f.Tag == wire.TagKeepalive:
				slots[0]++
			case f.Tag == wire.TagKeepaliveAck:
				slots[1]++
			case f.Tag == wire.TagClose:
				slots[2]++
			default:
				msgs++
			}
		}
		if r.e.kaAck && slots[0] > 0 {
			s.fail("%s has a KEEPALIVE in flight to %s, which has not answered the last", snd.name, r.name)
		}
		if slots[0] > 1 || slots[1] > 1 || slots[2] > 1 {
			s.fail("%s has %d KEEPALIVEs, %d KEEPALIVE_ACKs and %d CLOSEs in flight to %s: more than its slots",
				snd.name, slots[0], slots[1], slots[2], r.name)
		}
		if s.cfg.ctl && s.cfg.keepalive && r.ticksDeaf > simDeafTicks {
			s.fail("%s heard nothing on a live link for %d keepalive ticks", r.name, r.ticksDeaf)
		}
		for _, h := range r.dq {
			if h.link == r.link {
				msgs++
				bytes += int64(h.size)
			}
		}
		if w := r.e.cw.windowMsgs.Load(); msgs > int64(w) || bytes > int64(r.e.cw.windowBytes) {
			s.fail("%s was granted room for %d messages and %d bytes beyond what it holds, more than its window of %d and %d",
				r.name, msgs, bytes, w, r.e.cw.windowBytes)
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
	n.e.cw.reset(cfg.windowMsgs, 0, 0)
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
	s.handshake(false, s.linkWindow(), s.linkWindow())
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
				acts = append(acts, simAction{1, "handshake", func() { s.handshake(rng.IntN(2) == 0, s.linkWindow(), s.linkWindow()) }})
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
		// Each link a window of its own (a peer back over another
		// transport), often smaller than what the dispatcher holds.
		{windowMsgs: 8, windowBytes: 2000, msgs: 200, maxSize: 300, queueMsgs: 64, faults: true, linkWindows: true},
		{windowMsgs: 16, windowBytes: 4000, msgs: 300, maxSize: 500, oversize: 0.03, queueMsgs: 32, faults: true, ticks: true, linkWindows: true},
	}
	// A config with faults must show reconnects with messages held and
	// duplicates dropped (a reconnect while the peer has not heard the
	// ack of what arrived), and one with link windows a reconnect onto a
	// window no larger than what is held. Each seed shows them or not; -short
	// runs 4 seeds and more only while a config has not shown them yet,
	// up to the 16 seeds of a full run, where the checks below apply alike.
	const maxSeeds = 16
	minSeeds := maxSeeds
	if testing.Short() {
		minSeeds = 4
	}
	for ci, cfg := range configs {
		// Both modes: CONTROL_SLOTS agreed, and a peer without it.
		for _, ctl := range []bool{true, false} {
			cfg.ctl = ctl
			t.Run(fmt.Sprintf("config%d/ctl=%v", ci, ctl), func(t *testing.T) {
				handshakes, carried, overheld, dupes := 0, 0, 0, uint64(0)
				shown := func() bool {
					return (!cfg.faults || carried > 0 && dupes > 0) && (!cfg.linkWindows || overheld > 0)
				}
				seeds := 0
				for ; seeds < maxSeeds && (seeds < minSeeds || !shown()); seeds++ {
					cfg.seed = uint64(ci*1000 + seeds)
					s := runSimulation(t, cfg)
					handshakes += s.handshakes
					carried += s.carried
					overheld += s.overheld
					dupes += s.a.e.st.DuplicatesDropped + s.b.e.st.DuplicatesDropped
				}
				if cfg.faults && (carried == 0 || dupes == 0) {
					t.Fatalf("%d reconnects, %d with messages held by a dispatcher, %d duplicates dropped: want some of each",
						handshakes-seeds, carried, dupes)
				}
				if cfg.linkWindows && overheld == 0 {
					t.Fatalf("%d reconnects, none onto a window no larger than what a dispatcher held", handshakes-seeds)
				}
				t.Logf("%d seeds, %d reconnects, %d with messages held (%d of them at least the new window), %d duplicates dropped",
					seeds, handshakes-seeds, carried, overheld, dupes)
			})
		}
	}
}

// TestCreditSimulationKeepalives runs the simulation with keepalive ticks,
// in both modes. Without CONTROL_SLOTS keepalives once could spend the
// reserved credit (see TestCreditKeepalivesKeepGrantCredit): seed 0 then
// ended with both sides at sent == limit, each owing the other a
// KEEPALIVE_ACK and a grant. Under CONTROL_SLOTS the simulation also
// checks that a side always hears from its peer within a few keepalive
// ticks (simDeafTicks), here with oversized messages and slow consumers
// that starve both sides of credit and bytes, and across reconnects onto
// smaller windows.
func TestCreditSimulationKeepalives(t *testing.T) {
	configs := []simConfig{
		{windowMsgs: 4, windowBytes: 1000, msgs: 150, maxSize: 300, queueMsgs: 64, keepalive: true},
		{windowMsgs: 4, windowBytes: 500, msgs: 100, maxSize: 400, oversize: 0.2, queueMsgs: 16, keepalive: true},
		{windowMsgs: 8, windowBytes: 2000, msgs: 150, maxSize: 500, oversize: 0.05, queueMsgs: 32, keepalive: true, faults: true, linkWindows: true},
	}
	for ci, cfg := range configs {
		for _, ctl := range []bool{true, false} {
			for seed := range 40 {
				cfg.seed, cfg.ctl = uint64(ci*1000+seed), ctl
				runSimulation(t, cfg)
			}
		}
	}
}
