package msgr

import (
	"fmt"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/wire"
)

// creditWindow is the credit-based flow control of one link, a state
// machine with no I/O: the conn feeds it what it sends, receives and
// consumes, and asks it what may be sent and what to grant.
//
// Credits are cumulative, as in RPC-over-RDMA v2. Each side advertises
//
//	limit = frames it has consumed + window
//
// which equals "frames received + receive slots ready". The sender may send
// while sent < limit. Every frame costs one credit, because on RDMA every
// send consumes one posted receive; control frames are consumed the moment
// they arrive, data frames when the dispatcher releases the message. The
// exception is KEEPALIVE, KEEPALIVE_ACK and CLOSE on a link that agreed
// CONTROL_SLOTS, which take slots of their own and never reach this
// window (engine.ctl). The last credit is kept for frames that carry a
// grant and nothing to dispatch (a grant that is due, and without
// CONTROL_SLOTS KEEPALIVE_ACK and CLOSE), so two sides that both run out
// can still tell each other about freed slots: neither can deadlock. Beside the message count a byte
// budget bounds receiver memory; a single message larger than the whole
// byte window may still go once every byte before it was consumed.
//
// Message limits travel mod 2^32; within a window that is unambiguous.
//
// The receive-side consumed counters are atomics: Message.Release updates
// them from dispatcher goroutines without taking the conn lock.
type creditWindow struct {
	// send side: what the peer allows us
	sentMsgs, sentBytes   uint64
	limitMsgs, limitBytes uint64
	peerWindowBytes       uint64 // the peer's byte window, from the handshake
	stalled               bool   // blocked on credit since the last grant

	// receive side: what we allow the peer. windowMsgs is the current
	// link's (reset), read without the lock by Message.Release; windowBytes
	// is fixed at init.
	windowMsgs                      atomic.Uint64
	windowBytes                     uint64
	recvMsgs                        atomic.Uint64
	recvBytes                       uint64
	consumedMsgs, consumedBytes     atomic.Int64 // may start negative: see reset
	advertisedMsgs, advertisedBytes atomic.Uint64
	dataConsumed                    atomic.Bool // a message was consumed since the last grant
	floorMsgs, floorBytes           uint64      // the handshake's promise (reset), for checkGrant
}

// reset starts the window of a new link, of window frames: what that
// link can post (RDMA) may differ from the last link's. Messages from
// earlier links that the dispatcher still holds count against the new
// window (consumed starts at minus their number), so a reconnect never
// doubles receiver memory, even onto a smaller window: the grant is then
// the one frame a grant needs until enough are released. The fold is one
// atomic add, so a concurrent Release is never lost. floorMsgs and
// floorBytes are a grant already promised to the peer in the handshake
// (nextGrant with the same window).
func (w *creditWindow) reset(window, floorMsgs, floorBytes uint64) {
	w.windowMsgs.Store(window)
	w.consumedMsgs.Add(-int64(w.recvMsgs.Swap(0)))
	w.consumedBytes.Add(-int64(w.recvBytes))
	w.recvBytes = 0
	w.sentMsgs, w.sentBytes, w.stalled = 0, 0, false
	w.limitMsgs, w.limitBytes, w.peerWindowBytes = 0, 0, 0
	w.floorMsgs, w.floorBytes = floorMsgs, floorBytes
	w.advertisedMsgs.Store(floorMsgs)
	w.advertisedBytes.Store(floorBytes)
	m, b := w.grant()
	w.advertisedMsgs.Store(m)
	w.advertisedBytes.Store(b)
}

// nextGrant is the grant a new link of window frames would start with
// (see reset), without touching the current link's state.
func (w *creditWindow) nextGrant(window uint64) (msgs, bytes uint64) {
	cm := w.consumedMsgs.Load() - int64(w.recvMsgs.Load()) + int64(window)
	cb := w.consumedBytes.Load() - int64(w.recvBytes) + int64(w.windowBytes)
	return uint64(max(cm, 1)), uint64(max(cb, 0))
}

// peerWindow records the peer's byte window and initial grant from the
// handshake.
func (w *creditWindow) peerWindow(windowBytes, grantMsgs, grantBytes uint64) {
	w.limitMsgs, w.limitBytes, w.peerWindowBytes = grantMsgs, grantBytes, windowBytes
}

// grant is what we advertise now: consumed + window, never below what was
// already advertised (grants are monotonic) nor below zero.
func (w *creditWindow) grant() (msgs, bytes uint64) {
	cm := w.consumedMsgs.Load() + int64(w.windowMsgs.Load())
	cb := w.consumedBytes.Load() + int64(w.windowBytes)
	msgs, bytes = uint64(max(cm, 1)), uint64(max(cb, 0))
	return max(msgs, w.advertisedMsgs.Load()), max(bytes, w.advertisedBytes.Load())
}

// stamp fills the grant fields of an outgoing frame and records them.
func (w *creditWindow) stamp(p *wire.Preamble) {
	w.dataConsumed.Store(false)
	m, b := w.grant()
	w.advertisedMsgs.Store(m)
	w.advertisedBytes.Store(b)
	p.GrantMsgs, p.GrantBytes = uint32(m), b
}

// checkGrant panics if more was consumed than received (a credit
// returned twice), or if what we advertised lets the peer send more than
// the window holds: frames with no receive posted for them (on verbs a
// receiver-not-ready error) or beyond the memory the window bounds. An
// advertisement may stay at the handshake's promise, which a message
// read meanwhile on the old link can leave one above the formula, or at
// the one message always granted for a grant frame. Only the invariants
// build calls it.
func (w *creditWindow) checkGrant() {
	// Consumed before received: a Release comes after its receive.
	if c, r := w.consumedMsgs.Load(), w.recvMsgs.Load(); c > int64(r) {
		panic(fmt.Sprintf("msgr: invariant: consumed %d messages of %d received (%v)", c, r, w))
	}
	if c := w.consumedBytes.Load(); c > int64(w.recvBytes) {
		panic(fmt.Sprintf("msgr: invariant: consumed %d bytes of %d received (%v)", c, w.recvBytes, w))
	}
	am, ab := w.advertisedMsgs.Load(), w.advertisedBytes.Load()
	wm := w.windowMsgs.Load()
	cm := w.consumedMsgs.Load() + int64(wm)
	cb := w.consumedBytes.Load() + int64(w.windowBytes)
	if am > uint64(max(cm, 1)) && am != w.floorMsgs {
		panic(fmt.Sprintf("msgr: invariant: granted %d messages, %d consumed + window %d (%v)", am, cm-int64(wm), wm, w))
	}
	if ab > uint64(max(cb, 0)) && ab != w.floorBytes {
		panic(fmt.Sprintf("msgr: invariant: granted %d bytes, %d consumed + window %d (%v)", ab, cb-int64(w.windowBytes), w.windowBytes, w))
	}
}

// grantUrgent reports whether an explicit grant frame must go now: half
// the window (of messages or bytes) was freed since the last advertisement.
func (w *creditWindow) grantUrgent() bool {
	m, b := w.grant()
	am, ab := w.advertisedMsgs.Load(), w.advertisedBytes.Load()
	return m-am >= max(w.windowMsgs.Load()/2, 1) || (w.windowBytes > 0 && b-ab >= w.windowBytes/2)
}

// grantIdle reports whether a grant should go soon, batched like acks: the
// dispatcher has consumed every message received and the grant grew, so a
// sender waiting to push one message larger than what is left of its byte
// credit hears that everything before it was consumed. Consumption of
// control frames alone never makes a grant due, or two idle peers would
// trade grant frames forever.
func (w *creditWindow) grantIdle() bool {
	if !w.dataConsumed.Load() || w.consumedMsgs.Load() != int64(w.recvMsgs.Load()) {
		return false
	}
	m, b := w.grant()
	return m > w.advertisedMsgs.Load() || b > w.advertisedBytes.Load()
}

// canSendData reports whether a message of size bytes may go now. It keeps
// the last message credit for control frames.
func (w *creditWindow) canSendData(size uint64) bool {
	if w.sentMsgs+1 >= w.limitMsgs {
		return false
	}
	if w.sentBytes+size <= w.limitBytes {
		return true
	}
	// Larger than what is left: allowed only when the peer has consumed
	// everything we sent, so one oversized message can always make progress.
	return w.limitBytes >= w.peerWindowBytes && w.limitBytes-w.peerWindowBytes >= w.sentBytes
}

// canSendControl reports whether a frame without a message may go.
func (w *creditWindow) canSendControl() bool { return w.sentMsgs < w.limitMsgs }

// onSend records a sent frame of size payload bytes.
func (w *creditWindow) onSend(size uint64) {
	w.sentMsgs++
	w.sentBytes += size
}

// onGrant applies a grant from a received frame. Message limits are
// extended from 32 bits relative to the current limit.
func (w *creditWindow) onGrant(msgs32 uint32, bytes uint64) (grew bool) {
	delta := int32(msgs32 - uint32(w.limitMsgs))
	if delta > 0 {
		w.limitMsgs += uint64(delta)
		grew = true
	}
	if bytes > w.limitBytes {
		w.limitBytes = bytes
		grew = true
	}
	if grew {
		w.stalled = false
	}
	return grew
}

// onReceive accounts for a received frame, checking the peer kept within
// what we granted.
func (w *creditWindow) onReceive(size uint64) error {
	recv := w.recvMsgs.Add(1)
	w.recvBytes += size
	if adv := w.advertisedMsgs.Load(); recv > adv {
		return wire.Protocolf("peer sent frame %d beyond its credit limit %d", recv, adv)
	}
	if adv := w.advertisedBytes.Load(); size > 0 && w.recvBytes > adv {
		// The oversized-message exception: everything before it consumed.
		if c := w.consumedBytes.Load(); c < 0 || uint64(c) != w.recvBytes-size {
			return wire.Protocolf("peer sent %d bytes beyond its byte limit %d", w.recvBytes, adv)
		}
	}
	return nil
}

// consume returns the credit of a control frame or a dropped duplicate.
func (w *creditWindow) consume(size int64) {
	w.consumedMsgs.Add(1)
	w.consumedBytes.Add(size)
}

// consumeData returns the credit of a dispatched message.
func (w *creditWindow) consumeData(size int64) {
	w.consume(size)
	w.dataConsumed.Store(true)
}

func (w *creditWindow) String() string {
	m, b := w.grant()
	return fmt.Sprintf("send %d/%d msgs %d/%d bytes; recv %d msgs, granting %d msgs %d bytes",
		w.sentMsgs, w.limitMsgs, w.sentBytes, w.limitBytes, w.recvMsgs.Load(), m, b)
}
