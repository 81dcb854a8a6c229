package msgr

import (
	"errors"
	"time"
)

// Simultaneous connect (docs/protocol.md §6.4 rule 7, §6.5 step 5).
//
// Both sides of a lossless session may dial each other at once. The
// acceptor with the larger name answers the smaller one's dial with WAIT,
// but only while its own dial has reached the peer: the peer's HELLO came
// back on it, so the peer's messenger is running its handshake and will
// accept it (the smaller name accepts whatever it is dialing). A dial still
// in the transport's connect, or backing off, may never get through (the
// peer unreachable from here, a connect that hangs), so the acceptor
// accepts instead. Its own dial then finds the session attached and is
// abandoned before it asks for the session: asking would make the peer
// replace the working link with this one.
//
// A dialer that got WAIT waits for the peer's link to attach, not for a
// blind backoff. The wait ends early if a handshake from the peer fails
// here (its dial will not attach), and is bounded by HandshakeTimeout,
// which bounds the peer's dial too; then it dials again.

// dialPhase is how far a session's dial in flight has got.
type dialPhase uint8

const (
	dialIdle       dialPhase = iota // no dial in flight
	dialConnecting                  // the transport's dial, or the handshake before the peer's HELLO
	dialReached                     // the peer's HELLO came: its messenger is running our handshake
	dialRequested                   // SESSION_REQUEST went out: the peer may attach this link
)

func (p dialPhase) String() string {
	switch p {
	case dialIdle:
		return "idle"
	case dialConnecting:
		return "connecting"
	case dialReached:
		return "reached"
	case dialRequested:
		return "requested"
	}
	return "dialPhase(?)"
}

// errAttached: a dial found its session attached (the peer's dial got
// through first) and was abandoned. No failure: the session is up.
var errAttached = errors.New("msgr: the session got a link meanwhile; dial abandoned")

// dialAdvanceLocked moves the dial in flight on to p, or abandons it with
// errAttached if a link was attached meanwhile.
func (c *Conn) dialAdvanceLocked(p dialPhase) error {
	if c.link != nil {
		return errAttached
	}
	c.dial = p
	return nil
}

// waitForOwnDialLocked is rule 7: answer the peer's dial with WAIT,
// because this side's dial, which wins, has reached the peer.
func (c *Conn) waitForOwnDialLocked(self, peer EntityName) bool {
	return c.dial >= dialReached && c.link == nil && self > peer
}

// abandonDialLocked ends this side's dial once an accepted link is
// attached, unless it has asked for the session already (the peer may
// have attached it: closing it would fault the session). A dial stuck in
// the transport's connect returns at once instead of at its timeout.
func (c *Conn) abandonDialLocked() {
	if c.dial < dialRequested && c.dialAbort != nil {
		c.dialAbort()
	}
}

// waitForPeerLink follows a WAIT: it returns once a link is attached, a
// handshake from the peer failed here (since failed was read, as the dial
// began: the failure may come before the WAIT), the conn or messenger
// closes, or HandshakeTimeout passes. REQUIRES: timer stopped or fired.
func (c *Conn) waitForPeerLink(timer *time.Timer, failed uint64) {
	c.mu.Lock()
	if c.link != nil || c.state == stateClosed || c.peerHSFailed != failed {
		c.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	c.attachWait = ch
	c.mu.Unlock()
	timer.Reset(c.m.opts.HandshakeTimeout)
	select {
	case <-ch:
		timer.Stop()
	case <-timer.C:
	case <-c.closedCh:
	case <-c.m.done:
	}
	c.mu.Lock()
	if c.attachWait == ch {
		c.attachWait = nil
	}
	c.mu.Unlock()
}

func (c *Conn) wakeAttachWaiterLocked() {
	if c.attachWait != nil {
		close(c.attachWait)
		c.attachWait = nil
	}
}

// peerHandshakeFailed wakes the dial of ours that waits, after a WAIT, for
// peer's link: a handshake from peer just failed here, and the link we
// wait for may have been that one.
func (m *Messenger) peerHandshakeFailed(peer EntityName) {
	m.mu.Lock()
	c := m.byPeer[peer]
	m.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.peerHSFailed++
	c.wakeAttachWaiterLocked()
	c.mu.Unlock()
}
