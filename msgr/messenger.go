package msgr

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
)

// Messenger owns the listeners and sessions of one entity. It is safe for
// concurrent use.
type Messenger struct {
	opts       Options
	log        *slog.Logger
	nonce      uint64
	limits     wire.Limits
	transports map[string]wire.Transport
	inbound    *wire.Inbound // accepted connections: the MaxConns and MaxUnauthPerHost limits, refusals, accept errors
	budget     *wire.Budget  // MaxRecvBytes over all links; nil: no bound
	ratelog    guard.RateLog // lines a peer can make us repeat
	reaped     atomic.Uint64 // sessions closed after StandbyTimeout
	hsFailures [NumHandshakeReasons]atomic.Uint64
	faultLinks atomic.Uint64 // links wrapped for FaultInjection so far: each one's stream of faults

	mu        sync.Mutex
	listeners []wire.Listener
	byPeer    map[EntityName]*Conn // lossless sessions, dialed or accepted
	byAddr    map[string]*Conn     // lossy sessions we dialed
	lossyIn   map[*Conn]struct{}   // lossy sessions peers dialed
	retired   map[string]ConnStats // by scheme: counters of sessions closed (TransportStats)
	tombs     *tombstones          // lossless sessions we closed, for peers that missed the CLOSE

	closing   atomic.Bool
	done      chan struct{}
	wg        sync.WaitGroup
	coarseNow atomic.Int64 // unix ns, updated by the ticker; cheap clock for the hot path
	start     time.Time    // base of monotonic()

	// afterDial, if set (by tests, before any Connect), runs in the
	// connect loop after each dial returns, before the loop looks at the
	// outcome.
	afterDial func(c *Conn, err error)
	// afterDialAuth, if set (by tests, before any Connect), sees each
	// dialer's finished TLS handshake.
	afterDialAuth func(res *auth.Result)
	// resume lets this messenger's authenticated reconnects, and its
	// peers' to it, resume their TLS sessions (auth.Resumption).
	resume *auth.Resumption
	// keyring is the credential sessions start with: Options.Auth.Keyring
	// until SetKeyring replaces it.
	keyring atomic.Pointer[auth.Keyring]
}

// monotonic is nanoseconds since the messenger started, from the monotonic
// clock: keepalive timestamps must not jump with the wall clock.
func (m *Messenger) monotonic() uint64 { return uint64(time.Since(m.start)) }

// New creates a messenger. It does nothing on the network until Listen or
// Connect.
func New(opts Options) (*Messenger, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	m := &Messenger{
		opts:       opts,
		log:        opts.Logger.With("entity", string(opts.Name)),
		nonce:      rand.Uint64() | 1,
		limits:     opts.limits(),
		inbound:    wire.NewInbound(wire.InboundLimits{MaxConns: opts.MaxConns, MaxEarlyPerHost: opts.MaxUnauthPerHost}, opts.Logger.With("entity", string(opts.Name))),
		budget:     wire.NewBudget(opts.MaxRecvBytes),
		transports: map[string]wire.Transport{},
		byPeer:     map[EntityName]*Conn{},
		byAddr:     map[string]*Conn{},
		lossyIn:    map[*Conn]struct{}{},
		tombs:      newTombstones(opts.StandbyTimeout),
		done:       make(chan struct{}),
		start:      time.Now(),
	}
	for _, t := range opts.Transports {
		m.transports[t.Scheme()] = t
	}
	m.coarseNow.Store(time.Now().UnixNano())
	m.wg.Add(1)
	if opts.Auth != nil {
		m.keyring.Store(opts.Auth.Keyring)
		if !opts.Auth.NoResumption {
			m.resume = auth.NewResumption()
		}
	}
	go m.tick()
	return m, nil
}

// Name is the messenger's entity name.
func (m *Messenger) Name() EntityName { return m.opts.Name }

// Nonce identifies this messenger instance; a restarted peer has a new one.
func (m *Messenger) Nonce() uint64 { return m.nonce }

func (m *Messenger) linkOptions(t wire.Transport) wire.LinkOptions {
	bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	if m.opts.NoControlSlots {
		bn.Supported &^= wire.FeatureControlSlots
	}
	return wire.LinkOptions{Banner: bn, Limits: m.limits, NoDataCRC: m.opts.DisableDataCRC, RecvWindow: m.windowFor(t),
		DataChunk: m.opts.DataChunkCRC,
		Handshake: true, Inbound: m.inbound, Budget: m.budget}
}

// windowFor is the receive window of sessions over t: RecvWindowMsgs,
// capped by what the transport can post (on RDMA one credit is one posted
// receive, and receive queues are finite).
func (m *Messenger) windowFor(t wire.Transport) int {
	w := m.opts.RecvWindowMsgs
	if mr, ok := t.(interface{ MaxRecvWindow() int }); ok {
		if n := mr.MaxRecvWindow(); n > 0 {
			w = min(w, max(n, 4))
		}
	}
	return w
}

func (m *Messenger) transport(a Addr) (wire.Transport, error) {
	t, ok := m.transports[a.Scheme]
	if !ok {
		have := slices.Sorted(maps.Keys(m.transports))
		if len(have) == 0 {
			have = []string{"none: Options.Transports is empty"}
		}
		return nil, fmt.Errorf("%w %q in %s (this messenger has %s)", ErrNoTransport, a.Scheme, a, strings.Join(have, ", "))
	}
	if mt, ok := t.(wire.MissingTransport); ok {
		return nil, fmt.Errorf("%w %q: %w", ErrNoTransport, a.Scheme, mt.Err)
	}
	return t, nil
}

// Listen accepts sessions on addr (e.g. "tcp://127.0.0.1:0") and returns
// the bound address.
func (m *Messenger) Listen(ctx context.Context, addr string) (string, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return "", err
	}
	t, err := m.transport(a)
	if err != nil {
		return "", err
	}
	if m.closing.Load() {
		return "", ErrClosed
	}
	ln, err := t.Listen(ctx, a.Host, m.linkOptions(t))
	if err != nil {
		return "", fmt.Errorf("msgr: listen %s: %w", addr, err)
	}
	m.mu.Lock()
	if m.closing.Load() {
		m.mu.Unlock()
		ln.Close()
		return "", ErrClosed
	}
	m.listeners = append(m.listeners, ln)
	m.wg.Add(1)
	m.mu.Unlock()
	go m.acceptLoop(ln, t)
	bound := Addr{Scheme: a.Scheme, Host: ln.Addr()}.String()
	m.log.Info("msgr: listening", "addr", bound)
	return bound, nil
}

func (m *Messenger) acceptLoop(ln wire.Listener, t wire.Transport) {
	defer m.wg.Done()
	retry := wire.AcceptRetry{In: m.inbound, Listener: t.Scheme() + "://" + ln.Addr()}
	for {
		link, err := ln.Accept(context.Background())
		if err != nil {
			// Only a closed listener ends the loop; anything else is
			// retried after a backoff.
			if errors.Is(err, net.ErrClosed) || m.closing.Load() || !retry.Failed(err, m.done) {
				return
			}
			continue
		}
		retry.OK()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if err := m.accept(link, m.windowFor(t), t.Scheme()); err != nil {
				m.countHandshakeFailure(err)
				link.Close()
				if !errors.Is(err, errWait) {
					m.ratelog.Log(m.log, slog.LevelInfo, refusalKey(err), "msgr: handshake refused", "remote", link.RemoteAddr(), "err", err)
				}
			}
		}()
	}
}

// refusalKey rate-limits refused handshakes by kind of error, so that a
// flood of one kind does not hide another.
func refusalKey(err error) string {
	var we *wire.Error
	if errors.As(err, &we) {
		return fmt.Sprintf("handshake refused: wire %d", we.Kind)
	}
	return "handshake refused"
}

// InboundStats returns the counters of accepted connections, over all
// listeners: open now (handshaking or not), not yet authenticated,
// refused over MaxConns or MaxUnauthPerHost, and failed accepts.
func (m *Messenger) InboundStats() wire.InboundStats { return m.inbound.Stats() }

// Stats are a messenger's counters, over all its sessions and listeners.
type Stats struct {
	Inbound wire.InboundStats // accepted connections (InboundStats)
	// Recv is the receive budget (Options.MaxRecvBytes): bytes of
	// received messages held now and at most, and how often a link
	// stopped reading to wait for it.
	Recv wire.BudgetStats
	// Sessions is how many sessions are open (Conns), and SessionsReaped
	// how many were closed after StandbyTimeout without their peer.
	Sessions       int
	SessionsReaped uint64
	// HandshakeFailures counts handshakes that failed, dialed or
	// accepted, by reason.
	HandshakeFailures [NumHandshakeReasons]uint64
}

// Stats returns a snapshot of the messenger's counters.
func (m *Messenger) Stats() Stats {
	m.mu.Lock()
	sessions := len(m.byPeer) + len(m.byAddr) + len(m.lossyIn)
	m.mu.Unlock()
	st := Stats{Inbound: m.inbound.Stats(), Recv: m.budget.Stats(), Sessions: sessions, SessionsReaped: m.reaped.Load()}
	for i := range st.HandshakeFailures {
		st.HandshakeFailures[i] = m.hsFailures[i].Load()
	}
	// Accepted connections that failed the banner never reach accept.
	st.HandshakeFailures[HandshakeBanner] += st.Inbound.BannerFailures
	return st
}

// Connect returns the session with the peer at addr, creating it if there
// is none. It does not wait for the network: the session is established in
// the background and messages sent meanwhile are queued (WaitReady waits).
// peer is the expected entity name; it selects the policy and may be empty
// to accept whoever answers (the default policy then applies). A lossless
// session with peer that this side dialed moves to addr if addr is new.
func (m *Messenger) Connect(ctx context.Context, addr string, peer EntityName) (*Conn, error) {
	policy := m.opts.DefaultPolicy
	if peer != "" {
		policy = m.opts.policyFor(peer)
	}
	return m.ConnectPolicy(ctx, addr, peer, policy)
}

// sideWindowMsgs is the receive window of a side session (below): it
// carries a few small messages a second, and on RDMA each credit is a
// posted receive.
const sideWindowMsgs = 16

// ConnectPolicy is Connect with policy instead of the one the options give
// peer. A lossy session to a peer whose policy is lossless is a side
// session beside the lossless one, as Ceph gives heartbeats messengers of
// their own: it shares no queue with the lossless session, so its messages
// never wait behind that session's backlog. Lossy sessions are keyed by
// address, lossless ones by peer; the peer must accept it
// (Options.AcceptLossySide).
func (m *Messenger) ConnectPolicy(ctx context.Context, addr string, peer EntityName, policy Policy) (*Conn, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	t, err := m.transport(a)
	if err != nil {
		return nil, err
	}
	if peer != "" {
		if err := peer.Validate(); err != nil {
			return nil, err
		}
	}
	if peer == m.opts.Name {
		return nil, fmt.Errorf("msgr: connect %s: that is this messenger's own name %s", addr, peer)
	}
	if !policy.Lossy && peer == "" {
		return nil, fmt.Errorf("msgr: connect %s: a lossless session needs the peer's entity name", addr)
	}
	addr = a.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing.Load() {
		return nil, ErrClosed
	}
	if policy.Lossy {
		if c := m.byAddr[addr]; c != nil {
			return c, nil
		}
	} else if c := m.byPeer[peer]; c != nil {
		c.mu.Lock()
		if lr := c.link; c.state == stateOpen && lr != nil && c.addr != "" && c.addr != addr && !c.policy.Server {
			// The caller learnt a new address of the peer (a new map):
			// a link to the old one may not fail for up to IdleTimeout
			// (its host died, packets dropped), and meanwhile every
			// redial would go there. The session moves to the new
			// address: it resumes there if the peer is the same
			// instance (what was queued goes there, exactly once), and
			// starts over as after any restart if not.
			m.log.Debug("msgr: peer moved; redialing", "peer", peer, "from", c.addr, "to", addr)
			c.addr = addr
			c.detachLocked(lr)
			c.st.Faults++
			c.state = stateConnecting
			c.startRedialLocked()
			c.mu.Unlock()
			return c, nil
		}
		if c.addr == "" || c.state != stateOpen {
			c.addr = addr
		}
		if c.state == stateStandby || (c.state == stateConnecting && !c.redialing) {
			c.state = stateConnecting
			c.startRedialLocked()
		}
		c.mu.Unlock()
		return c, nil
	}
	window := m.windowFor(t)
	side := policy.Lossy && peer != "" && !m.opts.policyFor(peer).Lossy
	if side {
		window = min(window, sideWindowMsgs)
	}
	c := m.newConn(policy, addr, peer, window)
	c.side = side
	if policy.Lossy {
		m.byAddr[addr] = c
	} else {
		m.byPeer[peer] = c
	}
	c.mu.Lock()
	c.startRedialLocked()
	c.mu.Unlock()
	return c, nil
}

// forget drops a closed conn from the registry. told: c closed with CLOSE
// (closeLocked), which a lossless peer may have missed: it is remembered
// (tombstones) in the same step that drops it, so a redial of the peer
// finds one or the other.
func (m *Messenger) forget(c *Conn, told bool) {
	c.mu.Lock()
	peer, addr, cookie := c.peer, c.addr, c.cookie
	// A peer that never finished a handshake does not know our cookie,
	// and a lossy one never resumes (§6.4 rule 4.3).
	told = told && !c.lossy && c.peerCookie != 0
	c.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	_, lossyIn := m.lossyIn[c]
	if m.byPeer[peer] == c || m.byAddr[addr] == c || lossyIn {
		m.retireLocked(c)
	}
	if m.byPeer[peer] == c {
		delete(m.byPeer, peer)
		if told && !m.closing.Load() {
			m.tombs.add(cookie, peer)
		}
	}
	if m.byAddr[addr] == c {
		delete(m.byAddr, addr)
	}
	delete(m.lossyIn, c)
}

// Conns lists the open sessions.
func (m *Messenger) Conns() iter.Seq[*Conn] {
	m.mu.Lock()
	conns := m.openLocked()
	m.mu.Unlock()
	return func(yield func(*Conn) bool) {
		for _, c := range conns {
			if !yield(c) {
				return
			}
		}
	}
}

// CloseSessionsOf ends every session with peer (Conn.Close: the peer is
// told), and returns how many there were: a daemon ends those of an
// entity whose credential was revoked, which could otherwise run on for
// as long as their links last, since credentials are checked when a
// session authenticates.
func (m *Messenger) CloseSessionsOf(peer EntityName) int {
	n := 0
	for c := range m.Conns() {
		if c.Peer() == peer {
			c.Close()
			n++
		}
	}
	return n
}

// openLocked lists the sessions in the registry. REQUIRES: m.mu held.
func (m *Messenger) openLocked() []*Conn {
	conns := make([]*Conn, 0, len(m.byPeer)+len(m.byAddr)+len(m.lossyIn))
	for _, c := range m.byPeer {
		conns = append(conns, c)
	}
	for _, c := range m.byAddr {
		conns = append(conns, c)
	}
	for c := range m.lossyIn {
		conns = append(conns, c)
	}
	return conns
}

// Shutdown closes listeners and sessions (telling peers) and waits for
// every goroutine of the messenger to end, or for ctx.
func (m *Messenger) Shutdown(ctx context.Context) error {
	if !m.stopListening() {
		return m.wait(ctx)
	}
	for c := range m.Conns() {
		c.Close()
	}
	return m.wait(ctx)
}

// stopListening starts a Shutdown or Kill: no new sessions, listeners
// closed, background loops told to stop. It reports false when the
// messenger was already closing.
func (m *Messenger) stopListening() bool {
	m.mu.Lock()
	if m.closing.Swap(true) {
		m.mu.Unlock()
		return false
	}
	lns := m.listeners
	m.listeners = nil
	// Sessions closed from here on are not remembered (forget), and no
	// handshake will ask.
	m.tombs.clear()
	m.mu.Unlock()
	close(m.done)
	for _, ln := range lns {
		ln.Close()
	}
	return true
}

// Kill drops every listener and link without telling peers, as if the
// process died: for fault tests and for fencing a daemon. It waits for the
// messenger's goroutines.
func (m *Messenger) Kill() {
	if !m.stopListening() {
		m.wg.Wait()
		return
	}
	for c := range m.Conns() {
		c.closeWith(ErrClosed, false, false)
	}
	m.wg.Wait()
}

func (m *Messenger) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("msgr: shutdown: %w", ctx.Err())
	}
}

// tick drives keepalives, idle timeouts and the coarse clock.
func (m *Messenger) tick() {
	defer m.wg.Done()
	period := min(m.opts.Keepalive, m.opts.IdleTimeout/4) / 2
	t := time.NewTicker(max(period, time.Millisecond))
	defer t.Stop()
	lastKeepalive := time.Now()
	for {
		select {
		case <-m.done:
			return
		case now := <-t.C:
			m.coarseNow.Store(now.UnixNano())
			sendKA := now.Sub(lastKeepalive) >= m.opts.Keepalive
			if sendKA {
				lastKeepalive = now
			}
			// A reader waiting for the receive budget does not read: its
			// link is silent by our choice, not dead; nor is it until it
			// has read the frame it waited for, so a wait that ended less
			// than an idle timeout ago counts too.
			bs := m.budget.Stats()
			budgetWait := bs.Waiting > 0 || (bs.WaitEnded != 0 && now.UnixNano()-bs.WaitEnded < int64(m.opts.IdleTimeout))
			for c := range m.Conns() {
				c.tick(now, sendKA, budgetWait)
			}
		}
	}
}

func (c *Conn) tick(now time.Time, sendKA, budgetWait bool) {
	c.mu.Lock()
	lr := c.link
	if lr == nil {
		c.reapLocked(now)
		return
	}
	c.standbySince = time.Time{}
	idle := time.Duration(now.UnixNano() - lr.lastRecv.Load())
	fx, dead := c.onTick(idle, c.m.opts.IdleTimeout, sendKA, budgetWait)
	if dead {
		c.mu.Unlock()
		c.fault(lr, ErrIdleTimeout)
		return
	}
	c.applyLocked(lr, fx)
	c.mu.Unlock()
}

// reapLocked closes a session that has waited in standby (no link, and
// this side will not dial) for StandbyTimeout, as of the first tick that
// saw it there: its peer is not coming back, and an attacker that dials
// with ever new names must not grow our memory for good. It drops c.mu.
func (c *Conn) reapLocked(now time.Time) {
	timeout := c.m.opts.StandbyTimeout
	if c.state != stateStandby || timeout < 0 {
		c.standbySince = time.Time{}
		c.mu.Unlock()
		return
	}
	if c.standbySince.IsZero() {
		c.standbySince = now
	}
	if now.Sub(c.standbySince) < timeout {
		c.mu.Unlock()
		return
	}
	peer := c.peer
	c.closeLocked(ErrSessionExpired, true, false)
	c.m.reaped.Add(1)
	c.m.ratelog.Log(c.m.log, slog.LevelInfo, "session expired", "msgr: session expired waiting for its peer",
		"peer", peer, "standby_timeout", timeout, "reaped_total", c.m.reaped.Load())
}

// startLink wires a fresh link (after its handshake) into goroutines.
// Its idle clock was started by attachLocked.
func (m *Messenger) startLink(lr *linkRun) {
	// The session is established: the link may read frames of any kind
	// and size now (wire.HandshakeLimits until here).
	if h, ok := lr.link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
	m.wg.Add(2)
	go lr.readLoop()
	go lr.writeLoop()
	lr.kick()
}

func (m *Messenger) newLinkRun(c *Conn, link wire.Link) *linkRun {
	if m.opts.Faults.enabled() {
		link = newFaultyLink(link, m.opts.Faults, m.faultLinks.Add(1))
	}
	lr := &linkRun{c: c, link: link, wake: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
	lr.buffered, _ = link.(interface{ Buffered() bool })
	lr.space, _ = link.(interface{ WriteSpace() int })
	return lr
}

// ErrNoRegisteredMemory is AllocRegistered's error on a messenger that
// listens on no transport with registered memory (TCP, or not yet).
var ErrNoRegisteredMemory = errors.New("msgr: no listener with registered memory")

// registeredAllocator is a listener that hands out registered memory for
// long-lived use (the RDMA transport's).
type registeredAllocator interface {
	AllocRegistered(n int) (*wire.Buffer, error)
}

// registeredReclaim is a listener whose registered memory can be asked
// back (the RDMA transport's).
type registeredReclaim interface {
	OnRegisteredPressure(fn func(need int64) (freed int64)) (stop func())
}

// OnRegisteredPressure has fn called when a transfer on the transport that
// AllocRegistered takes memory from finds its registered memory spent,
// with the bytes it waits for, so that the holder of that memory gives
// some back (an OSD's read cache evicts its least used extents) and
// returns what it let go; until stop is called. fn runs on the
// transport's goroutines: it must not wait. It fails with
// ErrNoRegisteredMemory where AllocRegistered would.
func (m *Messenger) OnRegisteredPressure(fn func(need int64) (freed int64)) (stop func(), err error) {
	ra, err := m.registered()
	if err != nil {
		return nil, err
	}
	rr, ok := ra.(registeredReclaim)
	if !ok {
		return func() {}, nil
	}
	return rr.OnRegisteredPressure(fn), nil
}

// registered is the first listener with registered memory.
func (m *Messenger) registered() (registeredAllocator, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ln := range m.listeners {
		if a, ok := ln.(registeredAllocator); ok {
			return a, nil
		}
	}
	return nil, ErrNoRegisteredMemory
}

// AllocRegistered returns a buffer of n bytes, starting on a
// wire.DataAlign boundary, in memory registered with the transport of the
// messenger's first listener that has any (RDMA), for data kept past any
// one conn and sent later: an OSD keeps its read cache in it, so a large
// reply sent from it on a session accepted there moves with no copy (see
// Conn.AllocPayload). The caller holds one reference; the memory may
// outlive the messenger and its transport (it is then ordinary memory
// until its last Release). It fails with ErrNoRegisteredMemory when no
// listener has registered memory, and with the transport's error when its
// registered memory is spent or cannot be registered: the caller then
// uses ordinary memory.
func (m *Messenger) AllocRegistered(n int) (*wire.Buffer, error) {
	ra, err := m.registered()
	if err != nil {
		return nil, err
	}
	return ra.AllocRegistered(n)
}
