package msgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Lock order (docs/architecture.md): Conn.deliverMu, then Messenger.mu,
// then Conn.mu. No lock is held while calling a Dispatcher, OnRelease or a
// Link's read/write, except deliverMu around the receive path (fast
// dispatch, and then OnRelease of messages acked by the frame); Link.Close
// and address getters are called under Conn.mu and must not block.

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

	deliverMu sync.Mutex // held by a reader from sequencing to dispatch

	mu        sync.Mutex
	addr      string // address to dial; "" for a conn we only accepted
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
	dialing     bool // a dial handshake is in flight
	redialing   bool // the connect loop runs
	ackTimer    *time.Timer
	attachedAt  time.Time     // when the current (or last) link was attached
	lastBackoff time.Duration // the redial delay last used
	spaceWait   chan struct{} // closed when queue space frees; nil if no waiter
	readyCh     chan struct{} // closed once the session is up, or closed
	closedCh    chan struct{}
	established bool
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
	DuplicatesDropped        uint64
	CreditStalls             uint64 // times sending stopped for lack of credit
	GrantsSent               uint64 // explicit ACK frames carrying a grant
	GrantsReceived           uint64 // frames that raised our send limit
	SendCredits              int64  // messages we may still send on this link
	SendBytesCredit          int64
	RecvWindowMsgs           uint64
	QueuedMsgs               int
	QueuedBytes              int64
	RTT                      time.Duration // last keepalive round trip
}

// linkRun is one link attached to a Conn, with its reader and writer.
type linkRun struct {
	c        *Conn
	link     wire.Link
	wake     chan struct{}
	done     chan struct{}
	lastRecv atomic.Int64 // coarse clock of the last frame received
	frames   []wire.Frame // writer scratch
	rframe   wire.Frame   // reader scratch; a field so it is not allocated per frame
	released []*Message   // reader scratch: acked by the frame in hand, recycled after its dispatch
	buffered interface{ Buffered() bool }
	// wmu is held by whoever collects and writes a batch: the writer
	// goroutine, or a sender writing inline (writeInline).
	wmu   sync.Mutex
	space interface{ WriteSpace() int } // nil: never write inline
}

func newCookie() uint64 { return rand.Uint64() | 1 }

// newConn creates a session; window is its receive window in messages,
// fixed for its life because it is read without the lock.
func (m *Messenger) newConn(policy Policy, addr string, peer EntityName, window int) *Conn {
	c := &Conn{
		m: m, policy: policy, lossy: policy.Lossy, addr: addr, peer: peer,
		cookie:   newCookie(),
		readyCh:  make(chan struct{}),
		closedCh: make(chan struct{}),
	}
	c.drainFn = c.drain
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
	s.RecvWindowMsgs = c.cw.windowMsgs
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
	return c.send(ctx, m, true)
}

// TrySend is Send that returns ErrWouldBlock instead of waiting.
func (c *Conn) TrySend(m *Message) error {
	return c.send(context.Background(), m, false)
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

func (c *Conn) send(ctx context.Context, m *Message, block bool) error {
	size := m.Len()
	if size > int64(c.m.opts.MaxMessageSize) || len(m.Front) > int(c.m.limits.MaxFront) {
		return fmt.Errorf("%w: %d bytes (front %d), limit %d (front %d)", ErrMessageTooLarge,
			size, len(m.Front), c.m.opts.MaxMessageSize, c.m.limits.MaxFront)
	}
	c.mu.Lock()
	for c.state != stateClosed && c.sess.queued() > 0 &&
		(c.sess.queued() >= c.m.opts.SendQueueMsgs || c.sess.queuedBytes+size > c.m.opts.SendQueueBytes) {
		if !block {
			c.mu.Unlock()
			return ErrWouldBlock
		}
		if c.spaceWait == nil {
			c.spaceWait = make(chan struct{})
		}
		ch := c.spaceWait
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	if c.state == stateClosed {
		err := c.closeErr
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if c.peerMaxMsg > 0 && uint64(size) > c.peerMaxMsg {
		c.mu.Unlock()
		return fmt.Errorf("%w: %d bytes, the peer's limit is %d", ErrMessageTooLarge, size, c.peerMaxMsg)
	}
	// Idle: nothing is queued or unacked, as in a request/response
	// exchange, so the sender may write this one itself (writeInline). A
	// stream always has messages in flight and keeps the writer's batching.
	idle := c.enqueue(m)
	lr := c.link
	c.mu.Unlock()
	switch {
	case lr == nil:
	case idle && size <= inlineMaxBytes:
		lr.writeInline()
	default:
		lr.kick()
	}
	return nil
}

func (c *Conn) peerMaxMessage() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerMaxMsg
}

// kick wakes the writer; it never blocks.
func (lr *linkRun) kick() {
	select {
	case lr.wake <- struct{}{}:
	default:
	}
}

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
	released := c.resetSession(nil)
	if lr := c.link; lr != nil {
		if tell {
			// The writer sends CLOSE and the peer ends the link
			// (writeBatch); a peer that does not answer gets closeGrace.
			c.applyLocked(lr, c.closeLink())
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
	c.m.forget(c)
	for _, m := range released {
		m.recycle()
	}
	clear(released)
	if notify {
		c.pushEvent(Event{Kind: EventReset, Conn: c, Err: err, Dropped: len(released)})
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
		close(lr.done)
		lr.link.Close()
		c.retired = lr
	}
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
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	if backoff > c.m.opts.Reconnect.Min {
		timer.Reset(backoff)
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
		c.dialing = true
		addr := c.addr
		c.mu.Unlock()

		err := c.m.dial(c, addr)
		if h := c.m.afterDial; h != nil {
			h(c, err)
		}

		c.mu.Lock()
		c.dialing = false
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
		if !errors.Is(err, errWait) {
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

// readLoop reads frames until the link fails.
func (lr *linkRun) readLoop() {
	c := lr.c
	defer c.m.wg.Done()
	fd, _ := c.m.opts.Dispatcher.(FastDispatcher)
	f := &lr.rframe
	for {
		*f = wire.Frame{}
		if err := lr.link.ReadFrame(f); err != nil {
			if we := (*wire.Error)(nil); errors.As(err, &we) {
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
		if f.HasDataCRC {
			m.dataCRC, m.crcOf = f.DataCRC, f.Data
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

// String describes the conn for logs and test failures.
func (c *Conn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("conn{peer %s addr %q state %s dialing %v redialing %v link %v %s stats %+v}",
		c.peer, c.addr, c.state, c.dialing, c.redialing, c.link != nil, c.engine.String(), c.st)
}
