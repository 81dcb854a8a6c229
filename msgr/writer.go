package msgr

import (
	"errors"
	"fmt"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// kick wakes the writer; it never blocks.
func (lr *linkRun) kick() {
	select {
	case lr.wake <- struct{}{}:
	default:
	}
}

// drainWriter waits until no one writes on a detached link: whoever holds
// wmu finishes its batch, and a later one collects nothing (collect checks
// c.link). The link is closed, so the write ends soon. No-op on nil.
// REQUIRES: c.mu not held (a writer takes it under wmu).
func (lr *linkRun) drainWriter() {
	if lr != nil {
		lr.wmu.Lock()
		lr.wmu.Unlock() // an empty critical section: waiting is the point
	}
}

// applyLocked carries out what the engine answered: the ack timer and
// blocked senders now, lr's writer woken when asked (lr may be nil).
func (c *Conn) applyLocked(lr *linkRun, fx effects) {
	if fx&fxArmAck != 0 {
		c.ackTimer.Reset(ackDelay)
	}
	if fx&fxSpace != 0 {
		c.wakeSendersLocked()
	}
	if fx&fxWake != 0 && lr != nil {
		lr.kick()
	}
}

func (c *Conn) ackTimerFired() {
	c.mu.Lock()
	c.applyLocked(c.link, c.onAckTimer())
	c.mu.Unlock()
}

// writeLoop sends what collect gives it until the link ends.
func (lr *linkRun) writeLoop() {
	defer lr.c.m.wg.Done()
	for {
		select {
		case <-lr.wake:
		case <-lr.done:
			return
		}
		lr.wmu.Lock()
		for {
			wrote, stop, _ := lr.writeBatch(maxBatchBytes)
			if stop {
				lr.wmu.Unlock()
				return
			}
			if !wrote {
				break
			}
		}
		lr.wmu.Unlock()
	}
}

// writeBatch collects one batch of at most maxBytes of payload and writes
// it. stop reports that the link is done for (closing, or a write failed);
// more that the batch left messages (or a CLOSE) behind.
// REQUIRES: lr.wmu held, so batches reach the link in the order collected.
func (lr *linkRun) writeBatch(maxBytes int) (wrote, stop, more bool) {
	c := lr.c
	c.mu.Lock()
	fr := lr.frames[:0]
	if c.link == lr {
		var fx effects
		fr, fx = c.collect(fr, maxBatchFrames, maxBytes)
		lr.frames = fr
		c.applyLocked(nil, fx)
	}
	closing, oversize := c.closing, c.oversize
	more = c.more()
	c.mu.Unlock()
	var err error
	if len(fr) > 0 {
		err = lr.link.WriteFrames(fr)
		clear(fr) // drop references to message segments
	}
	switch {
	case closing && (len(fr) == 0 || err != nil):
		// No CLOSE went out: no answer will come.
		c.mu.Lock()
		c.detachLocked(lr)
		c.mu.Unlock()
		return true, true, false
	case closing:
		// The link stays until the peer, having read CLOSE, ends it (its
		// handleFrame closes; our reader then faults, which detaches), or
		// closeGrace passes (closeLocked). Ending it at once could lose
		// the CLOSE on a transport whose teardown overtakes what is in
		// flight: an RDMA peer may hear of the shutdown before its last
		// receive completes, and then its session waits for a redial that
		// never comes.
		return true, true, false
	case errors.Is(err, wire.ErrTooLarge):
		// The link can never carry this message (an RDMA payload over
		// the registered-memory budget, say): a redial would only fail
		// again, so the session ends.
		c.closeWith(fmt.Errorf("%w: %w", ErrMessageTooLarge, err), true, false)
		return true, true, false
	case err != nil:
		// A write fails when the peer has gone; its last frames (a
		// CLOSE, say) may still wait to be read. The reader reports the
		// fault when it reaches the end; this timer covers a reader that
		// never does.
		time.AfterFunc(writeFaultGrace, func() { c.fault(lr, err) })
		return true, true, false
	case oversize > 0:
		c.closeWith(fmt.Errorf("%w: a queued message of %d bytes exceeds the peer's limit of %d",
			ErrMessageTooLarge, oversize, c.peerMaxMessage()), true, true)
	}
	return len(fr) > 0, false, more
}

// writeInline writes what is queued from the caller's goroutine when the
// link is idle, saving the hand-off to the writer goroutine (a round trip
// of small messages pays it on both sides). It only goes ahead when the
// writer is not busy and the link says the write fits its send buffer, so
// the caller never waits on the network; otherwise the writer is kicked.
func (lr *linkRun) writeInline() {
	if lr.space == nil || !lr.wmu.TryLock() {
		lr.kick()
		return
	}
	if lr.space.WriteSpace() < 2*inlineMaxBytes {
		lr.wmu.Unlock()
		lr.kick()
		return
	}
	_, stop, more := lr.writeBatch(inlineMaxBytes)
	lr.wmu.Unlock()
	// What others queued after the batch was collected is theirs to
	// write: they found wmu held and kicked the writer.
	if more && !stop {
		lr.kick()
	}
}
