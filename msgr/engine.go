package msgr

import (
	"fmt"
	"time"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// engine is the protocol core of one session: sequence numbers and acks
// (session), credits and grants (creditWindow), and the decisions around
// them (which frame goes next, when an ack or a grant may wait, when the
// writer must wake, when a silent link is dead). It is a state machine in
// the style of etcd-io/raft's RawNode: no goroutines, no I/O, no locks,
// no clock of its own. The Conn holds its lock around every call, feeds it
// events and carries out what it answers:
//
//	inputs                          outputs
//	enqueue (Send), withdraw        collect: the frames to write next
//	onFrame (a frame read)          rxDeliver: a message to dispatch
//	onRelease (Message.Release)     effects: wake the writer, arm the ack
//	onAckTimer, onTick                timer, wake blocked senders
//	startLink, attach, resetSession  errors: the peer broke the protocol
//	closeLink                       idle: the link is dead (onTick)
//
// The one exception to the lock is onRelease, which runs on dispatcher
// goroutines with no lock (Message.Release is on the hot path): it only
// touches creditWindow's atomics, and the Conn takes the lock for what it
// answers. Tests drive this same code (credit_test.go).
type engine struct {
	sess session
	cw   creditWindow
	st   ConnStats // the engine's counters; the Conn keeps its own in it too

	// clock is the shell's monotonic clock in ns, for keepalive stamps
	// and round trips; a test passes a fake one.
	clock func() uint64

	kaPending  bool // a keepalive is due (onTick)
	kaAck      bool // a keepalive to answer
	kaAckValue uint64
	// ctl: CONTROL_SLOTS was agreed on this link, so KEEPALIVE,
	// KEEPALIVE_ACK and CLOSE take no credit; each side keeps a receive
	// slot for each instead, which holds while at most one keepalive is
	// unanswered each way (kaOut: ours is).
	ctl        bool
	kaOut      bool
	ackNow     bool   // an ack-only frame may go without waiting
	ackArmed   bool   // the ack timer runs
	closeFrame bool   // CLOSE goes next, and is the link's last frame
	closeAck   uint64 // what CLOSE acks: the session's inSeq as it closed (reset since)
	closing    bool   // CLOSE was collected; the link ends
	oversize   uint64 // a queued message above peerMaxMsg: the session must end
	peerMaxMsg uint64 // the peer's MaxMessageSize, from the handshake

	// delivered is the last sequence number handed to the dispatcher,
	// kept apart from sess.inSeq so that the invariants build checks
	// delivery against sequencing rather than against itself.
	delivered uint64
}

// effects are what the engine asks of its shell after a step, beside
// frames and deliveries.
type effects uint8

const (
	fxWake   effects = 1 << iota // wake the link's writer: collect has work
	fxArmAck                     // start the ack timer (ackDelay), then onAckTimer
	fxSpace                      // acks or a withdrawal freed send-queue space: wake blocked senders
)

// verdict is what onFrame decided about a received frame.
type verdict uint8

const (
	rxNone    verdict = iota // consumed by the engine
	rxDeliver                // a message for the dispatcher, made from the frame
	rxClose                  // the peer closed the session
)

// init sets the session's byte window and the frame window it has until
// its first link (startLink sets each link's).
func (e *engine) init(windowMsgs, windowBytes uint64, clock func() uint64) {
	e.cw.windowMsgs.Store(windowMsgs)
	e.cw.windowBytes = windowBytes
	e.clock = clock
}

// enqueue queues m for sending; idle reports that nothing was queued or
// unacked before it (a request/response exchange rather than a stream).
func (e *engine) enqueue(m *Message) (idle bool) {
	idle = e.sess.queued() == 0
	e.sess.enqueue(m)
	return idle
}

// withdraw takes the message of ticket id out of the queue if no link has
// had it, and returns it for the shell to release (nil otherwise). The
// room it held goes to blocked senders, and the writer wakes: a message
// that waited for credit may have been what held the next ones back.
func (e *engine) withdraw(id uint64) (*Message, effects) {
	m := e.sess.withdraw(id)
	if m == nil {
		return nil, 0
	}
	e.st.Withdrawn++
	fx := fxSpace
	if e.sess.nextUnsent() != nil {
		fx |= fxWake
	}
	return m, fx
}

// startLink sets up the credits of a new link from the handshake: window
// is the frames this link can take (its transport's receives), floor is
// the grant this side already promised (a dialer's request), the rest is
// what the peer told us, and ctl whether the link agreed CONTROL_SLOTS.
// A failed attach leaves no harm: the next handshake starts over.
func (e *engine) startLink(window, floorMsgs, floorBytes, peerWindowBytes, peerGrantMsgs, peerGrantBytes, peerMaxMsg uint64, ctl bool) {
	e.cw.reset(window, floorMsgs, floorBytes)
	e.cw.peerWindow(peerWindowBytes, peerGrantMsgs, peerGrantBytes)
	e.peerMaxMsg = peerMaxMsg
	// A keepalive of an earlier link is answered there or not at all:
	// under CONTROL_SLOTS an answer the new link's peer never asked for
	// would take a slot it does not keep.
	e.ctl, e.kaOut, e.kaAck = ctl, false, false
}

// controlGoes reports whether a KEEPALIVE_ACK or CLOSE may go now, and
// takes its credit if it costs one: under CONTROL_SLOTS none, else it may
// spend the reserved credit.
func (e *engine) controlGoes() bool {
	if e.ctl {
		return true
	}
	if !e.cw.canSendControl() {
		return false
	}
	e.cw.onSend(0)
	return true
}

// attach makes the link set up by startLink the session's: what the peer
// has (peerInSeq) is released into released, the rest is sent again
// (replay of them), and the peer hears our ack at once.
func (e *engine) attach(peerInSeq uint64, released []*Message) (_ []*Message, replay int, err error) {
	released, replay, err = e.sess.rewind(peerInSeq, released)
	if err != nil {
		return released, 0, err
	}
	e.st.Replayed += uint64(replay)
	e.ackNow = true
	return released, replay, nil
}

// resetSession forgets the session (the peer lost it, or this side
// closes): every queued message is appended to released.
func (e *engine) resetSession(released []*Message) []*Message {
	e.delivered = 0
	return e.sess.reset(released)
}

// closeLink makes CLOSE the next frame collected; it acks ack, the last
// message received (the session is reset by then), so that the peer
// counts what we had as delivered, not dropped.
func (e *engine) closeLink(ack uint64) effects {
	e.closeFrame, e.closeAck = true, ack
	return fxWake
}

func (e *engine) armAck() effects {
	if e.ackArmed {
		return 0
	}
	e.ackArmed = true
	return fxArmAck
}

// collect appends the next batch of frames to fr[:0]: at most maxFrames
// frames and about maxBytes of payload. The frames point into queued
// messages, which stay queued until acked. Nothing collected and
// fxArmAck answered means an ack or grant waits for the timer.
func (e *engine) collect(fr []wire.Frame, maxFrames, maxBytes int) ([]wire.Frame, effects) {
	fr = fr[:0]
	cw := &e.cw
	var fx effects
	if e.closeFrame {
		// The last frame. Without CONTROL_SLOTS it may spend the
		// reserved credit, and without any credit the link just ends.
		e.closeFrame = false
		e.closing = true
		if e.controlGoes() {
			fr = append(fr, wire.Frame{Preamble: wire.Preamble{Tag: wire.TagClose}})
			e.stamp(fr)
			fr[0].Preamble.Ack = max(fr[0].Preamble.Ack, e.closeAck)
		}
		return fr, 0
	}
	// Without CONTROL_SLOTS a keepalive answer may spend the reserved
	// credit (it returns the credit its keepalive took); a keepalive may
	// not, or two stalled sides whose keepalives cross would both end
	// with no credit at all, and a sender silenced by our own
	// back-pressure is not idle (onTick). Under CONTROL_SLOTS neither
	// costs credit; our next keepalive waits for the answer to the last,
	// which frees the peer's slot for it.
	if e.kaAck && e.controlGoes() {
		e.kaAck = false
		fr = append(fr, wire.Frame{Preamble: wire.Preamble{Tag: wire.TagKeepaliveAck, Seq: e.kaAckValue}})
	}
	if e.kaPending {
		switch {
		case e.ctl && !e.kaOut:
			e.kaPending, e.kaOut = false, true
			fr = append(fr, wire.Frame{Preamble: wire.Preamble{Tag: wire.TagKeepalive, Seq: e.clock()}})
		case cw.canSendData(0):
			// Under CONTROL_SLOTS our last keepalive is unanswered: the
			// peer may not be reading (its reader waits for its receive
			// budget) and so never sees the answer. An ACK on credit
			// still tells it that we live.
			e.kaPending = false
			p := wire.Preamble{Tag: wire.TagKeepalive, Seq: e.clock()}
			if e.ctl {
				p = wire.Preamble{Tag: wire.TagAck}
			}
			fr = append(fr, wire.Frame{Preamble: p})
			cw.onSend(0)
		}
	}
	bytes := 0
	for len(fr) < maxFrames && bytes < maxBytes {
		m := e.sess.nextUnsent()
		if m == nil {
			break
		}
		size := uint64(m.Len())
		if e.peerMaxMsg > 0 && size > e.peerMaxMsg {
			// Queued before the peer told us its limit: it can never go.
			e.oversize = size
			break
		}
		if !cw.canSendData(size) {
			if !cw.stalled {
				cw.stalled = true
				e.st.CreditStalls++
			}
			break
		}
		crc, known, source := m.sendCRC()
		fr = append(fr, wire.Frame{
			Preamble: wire.Preamble{Tag: wire.TagMessage, Type: m.Type, Seq: m.out.seq, Tid: m.tid},
			Front:    m.Front, Data: m.Data, Buf: m.buf,
			DataCRC: crc, HasDataCRC: known, SourceCRC: source,
		})
		cw.onSend(size)
		e.sess.markSent()
		e.st.MsgsSent++
		e.st.BytesSent += size
		bytes += int(size)
	}
	if len(fr) == 0 {
		// Nothing to piggyback on: an explicit ack/grant frame. An urgent
		// grant goes now and may spend the last credit; an idle-time
		// grant (a full one, so it may too) and a mere ack (which may
		// not) wait up to ackDelay so they batch.
		idle := cw.grantIdle()
		switch {
		case cw.grantUrgent() && cw.canSendControl(), idle && e.ackNow && cw.canSendControl():
			e.st.GrantsSent++
			fr = append(fr, wire.Frame{Preamble: wire.Preamble{Tag: wire.TagAck}})
			cw.onSend(0)
		case e.sess.ackOwed() && e.ackNow && cw.canSendData(0):
			fr = append(fr, wire.Frame{Preamble: wire.Preamble{Tag: wire.TagAck}})
			cw.onSend(0)
		case e.sess.ackOwed() || idle:
			fx |= e.armAck()
		}
	}
	e.stamp(fr)
	return fr, fx
}

// more reports whether frames are left for another collect.
func (e *engine) more() bool { return e.sess.nextUnsent() != nil || e.closeFrame }

// stamp puts the current ack and grant on every frame of a batch.
func (e *engine) stamp(fr []wire.Frame) {
	for i := range fr {
		e.sess.stampAck(&fr[i].Preamble)
		e.cw.stamp(&fr[i].Preamble)
	}
	if len(fr) > 0 {
		e.ackNow = false
		if invariants.Enabled {
			e.cw.checkGrant()
		}
	}
}

// spent returns the credit of a received frame that is no message to
// deliver, after its buffer: on RDMA the buffer is a receive that must be
// posted again before a grant counts it (see Message.Release).
func (e *engine) spent(f *wire.Frame, size int64) {
	f.Release()
	e.cw.consume(size)
}

// spentOrSlotted is spent for a frame that took a credit; one that took a
// control slot (slotted) only gives its buffer back, which on RDMA posts
// the receive again for the peer's next control frame.
func (e *engine) spentOrSlotted(f *wire.Frame, slotted bool) {
	if slotted {
		f.Release()
		return
	}
	e.spent(f, 0)
}

// onFrame applies a received frame (after wire decoding) to the session.
// buffered says more frames are already read and waiting, so acks can
// wait for the end of the burst. The messages the frame acked are
// appended to released, for the shell to hand back to their owners. A
// frame that spends a credit and is no message to deliver (a duplicate,
// an ACK, a KEEPALIVE or its answer) is done with here (spent). On
// rxDeliver the shell makes a message of f; on an error, the link must
// end.
func (e *engine) onFrame(f *wire.Frame, buffered bool, released []*Message) (_ []*Message, v verdict, fx effects, err error) {
	size := uint64(len(f.Front) + len(f.Data))
	released, err = e.sess.onAck(f.Ack, released)
	// Under CONTROL_SLOTS a control frame took one of the slots kept
	// for it, not a credit (the tags carry no segments: wire.Parse).
	slotted := e.ctl && (f.Tag == wire.TagKeepalive || f.Tag == wire.TagKeepaliveAck || f.Tag == wire.TagClose)
	if err == nil && !slotted {
		err = e.cw.onReceive(size)
	}
	if err != nil {
		return released, rxNone, 0, err
	}
	if len(released) > 0 {
		fx |= fxSpace
	}
	if e.cw.onGrant(f.GrantMsgs, f.GrantBytes) {
		e.st.GrantsReceived++
		if e.sess.nextUnsent() != nil {
			fx |= fxWake
		}
	}
	switch f.Tag {
	case wire.TagMessage:
		deliver, err := e.sess.onMessage(f.Seq)
		if err != nil {
			return released, rxNone, fx, err
		}
		e.st.MsgsReceived++
		e.st.BytesReceived += size
		if deliver {
			if invariants.Enabled && f.Seq != e.delivered+1 {
				panic(fmt.Sprintf("msgr: invariant: delivering seq %d after %d", f.Seq, e.delivered))
			}
			e.delivered = f.Seq
			v = rxDeliver
			if f.SourceCRCMismatch {
				e.st.SourceCRCMismatches++
			}
		} else {
			e.st.DuplicatesDropped++
			e.spent(f, int64(size))
		}
		// Ack once the reader has drained what is buffered, so a burst
		// costs one ack frame: now if a quarter window is unacked, else
		// through the ack timer, so a reply (which carries the ack) can
		// go first without the writer waking for nothing.
		if !buffered {
			if e.sess.inSeq-e.sess.ackedSent >= e.cw.windowMsgs.Load()/4 {
				e.ackNow = true
				fx |= fxWake
			} else {
				fx |= e.armAck()
			}
		}
	case wire.TagAck:
		e.spent(f, 0)
	case wire.TagKeepalive:
		if slotted && e.kaAck {
			// Its slot holds the one we have not answered yet.
			return released, rxNone, fx, wire.Protocolf("KEEPALIVE before the answer to the last one")
		}
		e.kaAck, e.kaAckValue = true, f.Seq
		e.spentOrSlotted(f, slotted)
		fx |= fxWake
	case wire.TagKeepaliveAck:
		if slotted {
			if !e.kaOut {
				return released, rxNone, fx, wire.Protocolf("KEEPALIVE_ACK without a KEEPALIVE to answer")
			}
			e.kaOut = false
			if e.kaPending {
				fx |= fxWake
			}
		}
		if rtt := int64(e.clock() - f.Seq); rtt >= 0 {
			e.st.RTT = time.Duration(rtt)
		}
		e.spentOrSlotted(f, slotted)
	case wire.TagClose:
		return released, rxClose, fx, nil
	default:
		return released, rxNone, fx, wire.Protocolf("%v frame after the handshake", f.Tag)
	}
	if e.cw.grantUrgent() {
		fx |= fxWake
	}
	return released, v, fx, nil
}

// onRelease returns the credit of a dispatched message of size bytes.
// It runs without the Conn's lock (creditWindow's receive side is
// atomic): wake asks for the writer (an urgent grant), armAck for the
// ack timer (a grant to batch), which the shell arms through armAck
// under its lock.
func (e *engine) onRelease(size int64) (wake, armAck bool) {
	e.cw.consumeData(size)
	switch {
	case e.cw.grantUrgent():
		return true, false
	case e.cw.grantIdle():
		return false, true
	}
	return false, false
}

// onAckTimer: the ack timer fired. The timer is not stopped when a reply
// carries the ack (a Stop per message costs more): then there is nothing
// to send, and the writer is left asleep rather than woken 1000 times a
// second per Conn.
func (e *engine) onAckTimer() effects {
	e.ackArmed = false
	e.ackNow = true
	if e.sess.ackOwed() || e.cw.grantIdle() || e.cw.grantUrgent() {
		return fxWake
	}
	return 0
}

// onTick is the periodic tick of a link: idle is how long nothing has
// arrived on it, keepalive that a keepalive is due, budgetWait that the
// link's reader waits for the receive budget. dead reports that the link
// has been silent too long and must end.
func (e *engine) onTick(idle, idleTimeout time.Duration, keepalive, budgetWait bool) (fx effects, dead bool) {
	// A reader waiting for the budget does not read: the silence is our
	// back-pressure, not a dead link. Without CONTROL_SLOTS neither is
	// that of a peer we left with at most its reserved credit, which may
	// only send grants and keepalive answers. Under CONTROL_SLOTS a live
	// peer always answers our keepalive and sends its own, whatever its
	// credit: silence means the link is dead.
	starved := budgetWait || !e.ctl && e.cw.advertisedMsgs.Load()-e.cw.recvMsgs.Load() <= 1
	if idle > idleTimeout && !starved {
		return 0, true
	}
	if keepalive {
		e.kaPending = true
	}
	e.ackNow = true // a lagging ack goes out at least once a tick
	return fxWake, false
}

func (e *engine) String() string {
	return fmt.Sprintf("queued %d (%d sent on this link, seq up to %d) inSeq %d ackedSent %d window: %s",
		e.sess.queued(), e.sess.sent, e.sess.outSeq, e.sess.inSeq, e.sess.ackedSent, e.cw.String())
}
