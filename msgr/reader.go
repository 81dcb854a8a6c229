package msgr

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
)

// consumed returns a dispatched message's credit. It runs on the
// dispatcher's goroutine from Message.Release, and takes the lock only
// when a grant is due.
func (c *Conn) consumed(size int64) {
	switch wake, arm := c.onRelease(size); {
	case wake:
		c.mu.Lock()
		lr := c.link
		c.mu.Unlock()
		if lr != nil {
			lr.kick()
		}
	case arm:
		// Not urgent: batch it with acks, through the ack timer.
		c.mu.Lock()
		c.applyLocked(nil, c.armAck())
		c.mu.Unlock()
	}
}

// readLoop reads frames until the link fails.
func (lr *linkRun) readLoop() {
	c := lr.c
	defer c.m.wg.Done()
	fd, _ := c.m.opts.Dispatcher.(FastDispatcher)
	f := &lr.rframe
	for {
		*f = wire.Frame{}
		if err := lr.link.ReadFrame(f); err != nil {
			if errors.Is(err, auth.ErrOpen) {
				c.mu.Lock()
				c.st.SealFailures++
				c.mu.Unlock()
				c.m.ratelog.Log(c.m.log, slog.LevelWarn, "sealed frame refused",
					"msgr: closing connection on a sealed frame that does not open", "peer", c.Peer(), "remote", lr.link.RemoteAddr(), "err", err)
			} else if we := (*wire.Error)(nil); errors.As(err, &we) {
				c.m.ratelog.Log(c.m.log, slog.LevelWarn, fmt.Sprintf("bad input: wire %d", we.Kind),
					"msgr: closing connection on bad input", "peer", c.Peer(), "remote", lr.link.RemoteAddr(), "err", err)
			}
			c.fault(lr, err)
			return
		}
		if !lr.charge(f) {
			c.fault(lr, ErrClosed)
			return
		}
		lr.lastRecv.Store(c.m.coarseNow.Load())
		// deliverMu keeps dispatch in sequence order across links: the
		// reader of a replaced link may still be handing over message n
		// when the new link's reader has n+1.
		c.deliverMu.Lock()
		m, err := c.handleFrame(lr, f)
		if err == nil && m != nil {
			if fd != nil && fd.CanFastDispatch(m.Type) {
				fd.Dispatch(m)
			} else {
				c.pushItem(dispatchItem{m: m})
			}
		}
		f.Release() // what handleFrame did not hand to a message
		c.recycle(lr.released)
		lr.released = lr.released[:0]
		c.deliverMu.Unlock()
		if err != nil {
			c.m.ratelog.Log(c.m.log, slog.LevelWarn, "protocol error", "msgr: closing connection on protocol error",
				"peer", c.Peer(), "remote", lr.link.RemoteAddr(), "err", err)
			c.fault(lr, err)
			return
		}
	}
}

// charge takes a received message's bytes from the messenger's budget
// when its link did not (a link that honours LinkOptions.Budget charged
// them before reading the message; others, such as RDMA's, whose receive
// buffers are posted ahead, hand over frames already read). Over the
// budget the reader waits here before it hands the message on or reads
// the next frame. It reports false if the link ended meanwhile.
func (lr *linkRun) charge(f *wire.Frame) bool {
	b := lr.c.m.budget
	size := int64(len(f.Front) + len(f.Data))
	if b == nil || f.Tag != wire.TagMessage || size == 0 || f.Charge.Bytes() != 0 {
		return true
	}
	if !b.Grow(&f.Charge, size, lr.done) {
		f.Release()
		return false
	}
	return true
}

// handleFrame applies a received frame to the session and window and
// returns a message to dispatch, if any.
func (c *Conn) handleFrame(lr *linkRun, f *wire.Frame) (*Message, error) {
	c.mu.Lock()
	if c.link != lr || c.state == stateClosed {
		// A replaced link, or a conn closing while its CLOSE goes out.
		// The peer's CLOSE crossing ours answers it: the link is done.
		if c.link == lr && f.Tag == wire.TagClose {
			c.detachLocked(lr)
		}
		c.mu.Unlock()
		f.Release()
		return nil, nil
	}
	buffered := lr.buffered != nil && lr.buffered.Buffered()
	released, v, fx, err := c.onFrame(f, buffered, lr.released[:0])
	var m *Message
	switch {
	case err != nil:
		c.mu.Unlock()
		f.Release()
		c.recycle(released)
		lr.released = released[:0]
		return nil, err
	case v == rxClose:
		c.mu.Unlock()
		c.recycle(released)
		lr.released = released[:0]
		c.closeWith(ErrClosedByPeer, true, false)
		return nil, nil
	case v == rxDeliver:
		m = getMessage()
		m.Type, m.Front, m.Data, m.buf, m.charge = f.Type, f.Front, f.Data, f.Buf, f.Charge
		m.seq, m.conn, m.credit, m.size = f.Seq, c, true, int64(len(f.Front)+len(f.Data))
		m.tid = f.Tid
		if f.HasDataCRC {
			m.dataCRC, m.crcOf = f.DataCRC, f.Data
			m.chunkCRCs, m.chunkSize = f.DataChunkCRCs, f.DataChunk
		}
		f.Buf, f.Charge = nil, wire.Charge{} // the message's now
	}
	c.applyLocked(nil, fx&^fxWake)
	c.mu.Unlock()
	// The messages this frame acked go back to their owners after the
	// frame's own message is dispatched (readLoop): a fast-dispatched
	// request's reply goes out first, 0.1 µs sooner per hop.
	lr.released = released
	if fx&fxWake != 0 {
		lr.kick()
	}
	return m, nil
}

// recycle hands released messages back to their owners, outside the lock.
func (c *Conn) recycle(released []*Message) {
	for i, m := range released {
		m.recycle()
		released[i] = nil
	}
}
