package msgr

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Close ends the session: queued messages are dropped, the peer is told
// (a CLOSE frame, best effort) so it does not wait for a reconnect, and
// messages already received are still dispatched. No event is raised for a
// local close.
func (c *Conn) Close() error {
	c.closeWith(ErrClosed, false, true)
	return nil
}

// closeWith ends the conn. notify raises EventReset with err; tell sends
// CLOSE to the peer.
func (c *Conn) closeWith(err error, notify, tell bool) {
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return
	}
	c.closeLocked(err, notify, tell)
}

// closeLocked is closeWith once the caller has checked, under c.mu, that
// the conn is to close. It drops c.mu.
func (c *Conn) closeLocked(err error, notify, tell bool) {
	c.state = stateClosed
	c.closeErr = err
	ack := c.sess.inSeq // what the CLOSE acks (closeLink), before the reset
	released := c.resetSession(nil)
	// A batch collected before the close may be mid-write, pointing into
	// the released messages' fronts and payloads (a sender's own bytes,
	// registered memory a pool hands out again), and an RDMA peer may
	// still read a payload it was offered: they are let go of once the
	// link is closed (a transport's Close waits out its posted sends) and
	// no one writes on it (drainWriter). A link still attached is closed
	// when the peer ends it, at the latest after closeGrace.
	writer := c.link
	if writer == nil {
		writer = c.retired // a link that failed under the session
	}
	if lr := c.link; lr != nil {
		if tell {
			// The writer sends CLOSE and the peer ends the link
			// (writeBatch); a peer that does not answer gets closeGrace.
			c.applyLocked(lr, c.closeLink(ack))
			time.AfterFunc(closeGrace, func() {
				c.mu.Lock()
				c.detachLocked(lr)
				c.mu.Unlock()
			})
		} else {
			c.detachLocked(lr)
		}
	}
	c.wakeSendersLocked()
	c.ackTimer.Stop()
	close(c.closedCh)
	select {
	case <-c.readyCh:
	default:
		close(c.readyCh)
	}
	c.mu.Unlock()
	c.m.forget(c, tell)
	dropped := len(released)
	if writer != nil && dropped > 0 {
		c.m.wg.Go(func() {
			<-writer.closed
			writer.drainWriter()
			c.recycle(released)
		})
	} else {
		c.recycle(released)
	}
	if notify {
		c.pushEvent(Event{Kind: EventReset, Conn: c, Err: err, Dropped: dropped})
	}
	// The dispatch loop drains what was received, then ends.
	c.pushItem(dispatchItem{})
}

func (c *Conn) wakeSendersLocked() {
	if c.spaceWait != nil {
		close(c.spaceWait)
		c.spaceWait = nil
	}
}

// detachLocked ends a link: its goroutines stop, the transport closes it.
func (c *Conn) detachLocked(lr *linkRun) {
	if c.link == lr {
		c.link = nil
	}
	select {
	case <-lr.done:
	default:
		// Counted before done closes: the link's reader holds a count
		// until it sees done, so the messenger's Wait cannot be at zero.
		c.m.wg.Add(1)
		close(lr.done)
		go c.m.closeLink(lr)
		c.retired = lr
	}
}

// closeLink closes a detached link off the session's lock: a transport's
// Close may wait (an RDMA link drains its posted sends, up to
// drainTimeout), and under Conn.mu that wait would stall Send, Stats and
// the ticker. The link's writer, if blocked in a write, returns once the
// close lands; drainWriter waits for it either way.
func (m *Messenger) closeLink(lr *linkRun) {
	defer m.wg.Done()
	lr.link.Close()
	close(lr.closed)
}

// takeRetiredLocked returns the link detached last, if any, for the caller
// to drainWriter once it has dropped the lock and before it recycles
// messages or starts the next link. A batch collected before the link was
// detached is written outside the lock and points into its messages'
// fronts and payloads, and once the next link is attached the session
// releases those messages (the peer had them, or acks them on the new
// link): their owner may reuse them at once (OnRelease).
func (c *Conn) takeRetiredLocked() *linkRun {
	lr := c.retired
	c.retired = nil
	return lr
}

// fault handles a failed link: lossy sessions end, lossless ones wait for
// the next link (dialing it themselves when they can).
func (c *Conn) fault(lr *linkRun, err error) {
	c.mu.Lock()
	if c.link != lr {
		c.mu.Unlock()
		return
	}
	c.detachLocked(lr)
	if c.state == stateClosed {
		c.mu.Unlock()
		return
	}
	c.st.Faults++
	peer := c.peer
	c.m.log.Debug("msgr: link fault", "peer", peer, "remote", lr.link.RemoteAddr(), "err", err)
	if c.lossy {
		c.mu.Unlock()
		c.closeWith(&ConnError{Peer: peer, Addr: lr.link.RemoteAddr(), Op: "link", Err: err}, true, false)
		return
	}
	if c.addr != "" && !c.policy.Server {
		c.state = stateConnecting
		c.startRedialLocked()
	} else {
		c.state = stateStandby
	}
	c.mu.Unlock()
}

func (c *Conn) startRedialLocked() {
	if c.redialing || c.m.closing.Load() {
		return
	}
	c.redialing = true
	c.m.wg.Add(1)
	go c.connectLoop()
}

// errLinkLost: a dial succeeded, but its link failed before the connect
// loop saw it attached.
var errLinkLost = errors.New("msgr: the new link failed right after its handshake")

// connectLoop dials until a link is attached, backing off exponentially
// with jitter.
func (c *Conn) connectLoop() {
	defer c.m.wg.Done()
	c.mu.Lock()
	// A link that died soon after its handshake (a fault that recurs on
	// every link) keeps the backoff growing instead of starting over, so
	// such a session redials slowly rather than in a tight loop.
	backoff := c.m.opts.Reconnect.Min
	if c.lastBackoff > 0 && time.Since(c.attachedAt) < stableLink {
		backoff = min(2*c.lastBackoff, c.m.opts.Reconnect.Max)
	}
	c.mu.Unlock()
	// A first dial goes at once, not after a timer's wakeup: a new
	// session's handshake waits for nothing but the peer.
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	if backoff <= c.m.opts.Reconnect.Min {
		timer.Stop()
	} else {
		select {
		case <-timer.C:
		case <-c.closedCh:
		case <-c.m.done:
		}
	}
	for {
		c.mu.Lock()
		if c.state == stateClosed || c.link != nil || c.m.closing.Load() {
			c.redialing = false
			c.mu.Unlock()
			return
		}
		c.dial = dialConnecting
		addr, failed := c.addr, c.peerHSFailed
		c.mu.Unlock()

		err := c.m.dial(c, addr)
		if h := c.m.afterDial; h != nil {
			h(c, err)
		}

		if errors.Is(err, errAttached) {
			c.m.log.Debug("msgr: dial abandoned: the peer's link to us was accepted", "addr", addr)
		}
		c.mu.Lock()
		c.dial, c.dialAbort = dialIdle, nil
		c.lastBackoff = backoff
		// A lossless session is done only with a link attached now, not
		// merely with a dial that succeeded: the new link may already have
		// failed, and its fault left the redial to this loop, which still
		// held redialing. (A lossy one ends with the fault of its link.)
		if c.state == stateClosed || c.link != nil || c.m.closing.Load() || (err == nil && c.lossy) {
			c.redialing = false
			c.mu.Unlock()
			return
		}
		if err == nil {
			err = errLinkLost
		}
		c.mu.Unlock()
		if c.lossy {
			c.closeWith(&ConnError{Peer: c.Peer(), Addr: addr, Op: "dial", Err: err}, true, false)
			return
		}
		if errors.Is(err, errWait) {
			// Not a failure: the peer's dial has reached us. Its link
			// replaces the backoff, and no backoff grows.
			c.waitForPeerLink(timer, failed)
			continue
		}
		if !errors.Is(err, errAttached) {
			c.m.log.Debug("msgr: dial failed", "addr", addr, "err", err, "retry_in", backoff)
			if h := c.m.opts.OnDialError; h != nil {
				h(c, err)
			}
		}
		jitter := time.Duration(rand.Int64N(int64(backoff)/2 + 1))
		timer.Reset(backoff + jitter)
		select {
		case <-timer.C:
		case <-c.closedCh:
		case <-c.m.done:
		}
		backoff = min(2*backoff, c.m.opts.Reconnect.Max)
	}
}

// attachLocked makes lr the conn's link after a successful handshake.
// peerInSeq is what the peer has received; what it lacks is sent again.
func (c *Conn) attachLocked(lr *linkRun, peerInSeq uint64) ([]*Message, error) {
	if old := c.link; old != nil && old != lr {
		c.detachLocked(old)
	}
	released, _, err := c.attach(peerInSeq, nil)
	if err != nil {
		return released, err
	}
	c.attachedAt = time.Now()
	c.st.Mode = lr.mode
	// The idle clock starts now, not when startLink runs after the lock is
	// dropped: a tick in between must not see a link that never received.
	lr.lastRecv.Store(c.m.coarseNow.Load())
	if c.established {
		c.st.Reconnects++
	}
	c.link = lr
	c.state = stateOpen
	if !c.established {
		c.established = true
		close(c.readyCh)
	}
	c.wakeSendersLocked()
	c.wakeAttachWaiterLocked()
	return released, nil
}

// resetSessionLocked forgets the session because the peer lost it.
func (c *Conn) resetSessionLocked() []*Message {
	released := c.resetSession(nil)
	c.cookie = newCookie()
	c.peerCookie = 0
	c.wakeSendersLocked()
	return released
}
