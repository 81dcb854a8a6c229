package msgr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Lock order (docs/architecture.md §4.1), acquired downwards only:
//
//	Conn.deliverMu  a link's reader, from sequencing a frame to dispatching it
//	linkRun.wmu     whoever collects and writes a batch: the writer goroutine,
//	                or a sender writing inline, which only TryLocks it
//	Messenger.mu
//	Conn.mu
//
// NB: acceptSession locks a new link's wmu under Conn.mu, and holds it
// while it waits for the retired link's (drainWriter): nothing else can
// reach the new link's wmu yet but by TryLock, so no one waits the other
// way round.
//
// No lock is held while calling a Dispatcher or OnRelease, except
// deliverMu around the receive path (fast dispatch, and then OnRelease of
// messages acked by the frame). Link.WriteFrames runs under wmu (and
// deliverMu when a fast handler writes inline), Link.ReadFrame under none.
// Link.Close and address getters are called under Conn.mu and must not
// block. slog handlers run under Conn.mu (fault's log) and under a new
// link's wmu (acceptSession's log of a restarted peer): a Logger must not
// call into msgr.

type connState uint8

const (
	stateConnecting connState = iota // no link yet, or redialing
	stateOpen                        // a link is attached
	stateStandby                     // lossless, link down, waiting for the peer
	stateClosed
)

func (s connState) String() string {
	switch s {
	case stateConnecting:
		return "connecting"
	case stateOpen:
		return "open"
	case stateStandby:
		return "standby"
	case stateClosed:
		return "closed"
	}
	return fmt.Sprintf("connState(%d)", uint8(s))
}

// Conn is one session with one peer. It outlives links: under a lossless
// policy a fault makes it reconnect (or wait for the peer to) and resume
// where it was.
type Conn struct {
	m      *Messenger
	policy Policy
	lossy  bool // policy.Lossy, readable without the lock
	side   bool // a lossy side session we dialed beside a lossless one (ConnectPolicy)

	deliverMu sync.Mutex // held by a reader from sequencing to dispatch

	mu        sync.Mutex
	addr      string // address to dial; "" for a conn we only accepted
	scheme    string // the transport it was created over, kept if it moves: TransportStats never go down
	peer      EntityName
	peerNonce uint64
	state     connState
	closeErr  error
	// engine (under mu, but for onRelease) is the session's protocol
	// state; the Conn feeds it and carries out what it answers.
	engine
	cookie      uint64 // our session incarnation
	peerCookie  uint64 // the peer's, 0 until the first handshake
	link        *linkRun
	dial        dialPhase // how far our dial in flight has got (connrace.go)
	dialAbort   func()    // abandons the dial in flight; nil when there is none
	redialing   bool      // the connect loop runs
	ackTimer    *time.Timer
	attachedAt  time.Time     // when the current (or last) link was attached
	lastBackoff time.Duration // the redial delay last used
	spaceWait   chan struct{} // closed when queue space frees; nil if no waiter
	attachWait  chan struct{} // closed when a link attaches, after a WAIT (waitForPeerLink); nil if no waiter
	// peerHSFailed counts handshakes from the peer that failed here
	// (peerHandshakeFailed), for waitForPeerLink.
	peerHSFailed uint64
	readyCh      chan struct{} // closed once the session is up, or closed
	closedCh     chan struct{}
	established  bool
	// retired (under mu) is the last link detached; its writer may still
	// be in a write (takeRetiredLocked).
	retired *linkRun

	standbySince time.Time // when tick first saw the conn in standby; zero otherwise

	dq      dispatchQueue
	drainFn func() // c.drain, bound once so that starting it allocates nothing
}

// ConnStats are a Conn's counters.
type ConnStats struct {
	MsgsSent, MsgsReceived   uint64
	BytesSent, BytesReceived uint64
	Faults, Reconnects       uint64
	Replayed                 uint64 // messages sent again after a reconnect
	Withdrawn                uint64 // messages withdrawn before any link had them (Withdraw)
	DuplicatesDropped        uint64
	CreditStalls             uint64 // times sending stopped for lack of credit
	GrantsSent               uint64 // explicit ACK frames carrying a grant
	GrantsReceived           uint64 // frames that raised our send limit
	SendCredits              int64  // messages we may still send on this link
	SendBytesCredit          int64
	RecvWindowMsgs           uint64 // the current (or last) link's receive window, frames
	QueuedMsgs               int
	QueuedBytes              int64
	RTT                      time.Duration // last keepalive round trip
	// Mode is the connection mode of the current (or last) link.
	Mode Mode
	// SealFailures counts sealed frames that did not open (secure mode):
	// altered, replayed or reordered on the way. Each faulted its link.
	SealFailures uint64
	// WaitsSent counts the peer's dials answered with WAIT (both sides
	// dialed, and ours had reached the peer); WaitsReceived, our dials
	// that got WAIT.
	WaitsSent, WaitsReceived uint64
	// SourceCRCMismatches counts messages delivered whose data did not
	// match the CRC their sender's source recorded (Message.SetSourceCRC).
	SourceCRCMismatches uint64
}

// linkRun is one link attached to a Conn, with its reader and writer.
type linkRun struct {
	c        *Conn
	link     wire.Link
	wake     chan struct{}
	done     chan struct{}
	closed   chan struct{} // closed once the transport's Close of link returned (closeLink)
	lastRecv atomic.Int64  // coarse clock of the last frame received
	frames   []wire.Frame  // writer scratch
	rframe   wire.Frame    // reader scratch; a field so it is not allocated per frame
	released []*Message    // reader scratch: acked by the frame in hand, recycled after its dispatch
	buffered interface{ Buffered() bool }
	// wmu is held by whoever collects and writes a batch: the writer
	// goroutine, or a sender writing inline (writeInline).
	wmu   sync.Mutex
	space interface{ WriteSpace() int } // nil: never write inline
	mode  Mode                          // the link's connection mode
}

func newCookie() uint64 { return rand.Uint64() | 1 }

// newConn creates a session; window is its receive window in messages
// until its first link, whose transport sets it (startLink).
func (m *Messenger) newConn(policy Policy, addr string, peer EntityName, window int) *Conn {
	c := &Conn{
		m: m, policy: policy, lossy: policy.Lossy, addr: addr, peer: peer,
		cookie:   newCookie(),
		readyCh:  make(chan struct{}),
		closedCh: make(chan struct{}),
	}
	c.drainFn = c.drain
	if a, err := ParseAddr(addr); err == nil {
		c.scheme = a.Scheme
	}
	c.engine.init(uint64(window), uint64(m.opts.RecvWindowBytes), m.monotonic)
	c.ackTimer = time.AfterFunc(time.Hour, c.ackTimerFired)
	c.ackTimer.Stop()
	m.wg.Add(1) // until the dispatch queue's end (dispatchQueue)
	return c
}

// Peer is the peer's entity name (empty until the first handshake of a
// conn dialed without one).
func (c *Conn) Peer() EntityName {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peer
}

// Addr is the address this conn dials, or the peer's remote address for an
// accepted conn.
func (c *Conn) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addr == "" && c.link != nil {
		return c.link.link.RemoteAddr()
	}
	return c.addr
}

// Policy is the conn's policy.
func (c *Conn) Policy() Policy { return c.policy }

// Stats returns a snapshot of the conn's counters.
func (c *Conn) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.SendCredits = int64(c.cw.limitMsgs) - int64(c.cw.sentMsgs)
	s.SendBytesCredit = int64(c.cw.limitBytes) - int64(c.cw.sentBytes)
	s.RecvWindowMsgs = c.cw.windowMsgs.Load()
	s.QueuedMsgs = c.sess.queued()
	s.QueuedBytes = c.sess.queuedBytes
	return s
}

// WaitReady blocks until the session is established (or was, before a
// fault), the conn closed, or ctx ends.
func (c *Conn) WaitReady(ctx context.Context) error {
	select {
	case <-c.readyCh:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed && !c.established {
		return c.closeErr
	}
	return nil
}

// Done is closed when the conn is closed.
func (c *Conn) Done() <-chan struct{} { return c.closedCh }

// Err is why the conn closed, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// Send queues m for the peer and returns without waiting for the network.
// Messages are delivered in order; under a lossless policy exactly once,
// across link faults. When the conn already holds SendQueueMsgs messages
// or SendQueueBytes bytes for the peer, Send blocks until the peer acks
// enough or ctx ends (back-pressure). On success the messenger owns m; on
// error the caller keeps it.
func (c *Conn) Send(ctx context.Context, m *Message) error {
	_, err := c.send(ctx, m, true)
	return err
}

// TrySend is Send that returns ErrWouldBlock instead of waiting.
func (c *Conn) TrySend(m *Message) error {
	_, err := c.send(context.Background(), m, false)
	return err
}

// Ticket names a message sent with SendTicket, for Withdraw. The zero
// Ticket names none.
type Ticket struct {
	c  *Conn
	id uint64
}

// SendTicket is Send that also returns a Ticket with which the caller can
// withdraw m while no link has had it: a request whose caller stopped
// waiting for the reply.
func (c *Conn) SendTicket(ctx context.Context, m *Message) (Ticket, error) {
	id, err := c.send(ctx, m, true)
	if err != nil {
		return Ticket{}, err
	}
	return Ticket{c: c, id: id}, nil
}

// Withdraw takes the message of t out of the send queue if it has not been
// written to any link yet, and reports whether it did, as time.Timer.Stop
// does. A withdrawn message never reaches the peer and takes no sequence
// number (the messages queued after it move up one), its room in the queue
// goes to blocked senders, and the messenger releases it as if a reset had
// dropped it (OnRelease, or back to the pool). Once a link had it, even one
// that failed since, it may have arrived, so it stays and is delivered
// exactly once like any other: Withdraw is false, as it is for a message
// acked, dropped or withdrawn already, and for a Ticket of another Conn.
func (c *Conn) Withdraw(t Ticket) bool {
	if t.c != c || t.id == 0 {
		return false
	}
	c.mu.Lock()
	m, fx := c.withdraw(t.id)
	c.applyLocked(c.link, fx)
	c.mu.Unlock()
	if m == nil {
		return false
	}
	m.recycle()
	return true
}

// AllocPayload returns a buffer of n bytes for a message's data
// (Message.SetPayload). On a transport with registered memory (RDMA) a
// large payload in such a buffer goes to the peer with no copy at all; on
// others, or while the conn has no link, it is an ordinary pooled buffer and
// is copied once, like any payload. The caller holds one reference.
func (c *Conn) AllocPayload(n int) (*wire.Buffer, error) {
	c.mu.Lock()
	var pa wire.PayloadAllocator
	if lr := c.link; lr != nil {
		pa, _ = lr.link.(wire.PayloadAllocator)
	}
	c.mu.Unlock()
	if pa != nil {
		return pa.AllocPayload(n)
	}
	return wire.GetBuffer(n), nil
}

// send queues m and returns its ticket id.
func (c *Conn) send(ctx context.Context, m *Message, block bool) (uint64, error) {
	size := m.Len()
	if size > int64(c.m.opts.MaxMessageSize) || len(m.Front) > int(c.m.limits.MaxFront) {
		return 0, fmt.Errorf("%w: %d bytes (front %d), limit %d (front %d)", ErrMessageTooLarge,
			size, len(m.Front), c.m.opts.MaxMessageSize, c.m.limits.MaxFront)
	}
	c.mu.Lock()
	for c.state != stateClosed && c.sess.queued() > 0 &&
		(c.sess.queued() >= c.m.opts.SendQueueMsgs || c.sess.queuedBytes+size > c.m.opts.SendQueueBytes) {
		if !block {
			c.mu.Unlock()
			return 0, ErrWouldBlock
		}
		if c.spaceWait == nil {
			c.spaceWait = make(chan struct{})
		}
		ch := c.spaceWait
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		c.mu.Lock()
	}
	if c.state == stateClosed {
		err := c.closeErr
		c.mu.Unlock()
		if errors.Is(err, ErrClosed) { // Close's own, or the peer's: said once
			return 0, err
		}
		return 0, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if c.peerMaxMsg > 0 && uint64(size) > c.peerMaxMsg {
		c.mu.Unlock()
		return 0, fmt.Errorf("%w: %d bytes, the peer's limit is %d", ErrMessageTooLarge, size, c.peerMaxMsg)
	}
	// Idle: nothing is queued or unacked, as in a request/response
	// exchange, so the sender may write this one itself (writeInline). A
	// stream always has messages in flight and keeps the writer's batching.
	idle := c.enqueue(m)
	id := m.out.id // m may be acked and reused once the lock is dropped
	lr := c.link
	c.mu.Unlock()
	switch {
	case lr == nil:
	case idle && size <= inlineMaxBytes:
		lr.writeInline()
	default:
		lr.kick()
	}
	return id, nil
}

func (c *Conn) peerMaxMessage() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerMaxMsg
}

// maxBatchFrames bounds one WriteFrames call so acks and keepalives are not
// stuck behind a long run of data.
const (
	maxBatchFrames  = 256
	maxBatchBytes   = 4 << 20
	inlineMaxBytes  = 16 << 10 // the most a sender writes inline
	ackDelay        = time.Millisecond
	closeGrace      = time.Second
	stableLink      = time.Second // a link up this long resets the redial backoff
	writeFaultGrace = 100 * time.Millisecond
)

// String describes the conn for logs and test failures.
func (c *Conn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("conn{peer %s addr %q state %s dial %v redialing %v link %v %s stats %+v}",
		c.peer, c.addr, c.state, c.dial, c.redialing, c.link != nil, c.engine.String(), c.st)
}
