package msgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// The handshake, after the transport's banner exchange (docs/protocol.md):
//
//	dialer                         acceptor
//	HELLO, AUTH_REQUEST  ------->
//	                     <-------  HELLO, AUTH_DONE
//	SESSION_REQUEST      ------->
//	                     <-------  SESSION_READY | SESSION_RESET | WAIT
//
// Handshake frames carry no seq, ack or credit; credits start with the
// windows exchanged in SESSION_REQUEST/READY.

// errWait: the acceptor is dialing us at the same time and wins the race.
var errWait = errors.New("msgr: peer is connecting to us; waiting for it")

const authNone = "none"

func writeHS(link wire.Link, tag wire.Tag, pb proto.Message) error {
	f, err := hsFrame(tag, pb)
	if err != nil {
		return err
	}
	return link.WriteFrames([]wire.Frame{f})
}

func hsFrame(tag wire.Tag, pb proto.Message) (wire.Frame, error) {
	front, err := proto.Marshal(pb)
	return wire.Frame{Preamble: wire.Preamble{Tag: tag}, Front: front}, err
}

// writeHello sends this side's HELLO at once, in a write of its own, as
// the peer reads it first.
func writeHello(link wire.Link, m *Messenger) error {
	return writeHS(link, wire.TagHello, &msgrpb.Hello{
		EntityName: string(m.opts.Name), InstanceNonce: m.nonce, PeerAddr: link.RemoteAddr(),
	})
}

// readHS reads a handshake frame, which must have one of the wanted tags,
// and decodes its front into the matching message.
func readHS(link wire.Link, msgs map[wire.Tag]proto.Message) (wire.Tag, error) {
	var f wire.Frame
	if err := link.ReadFrame(&f); err != nil {
		return 0, err
	}
	defer f.Release()
	pb, ok := msgs[f.Tag]
	if !ok {
		want := make([]string, 0, len(msgs))
		for t := range msgs {
			want = append(want, t.String())
		}
		slices.Sort(want)
		return 0, wire.Protocolf("handshake: got %v, want one of %v", f.Tag, want)
	}
	if err := proto.Unmarshal(f.Front, pb); err != nil {
		return 0, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("handshake %v: %v", f.Tag, err)}
	}
	return f.Tag, nil
}

// withLinkDeadline closes link if ctx ends first, so a stalled peer cannot
// hold a handshake goroutine. The handshake disarms it (the returned
// stop) before the link becomes its session's: from then on only the
// session closes it, after its CLOSE where it ends deliberately. A
// deadline that fired after the attach would close the socket under the
// session: a dialer's Close soon after its connect (which ends the dial's
// context) reached the peer as a fault, and its session waited for a
// redial that never came.
func withLinkDeadline(ctx context.Context, link wire.Link) func() bool {
	return context.AfterFunc(ctx, func() { link.Close() })
}

// testHookConnected, when set (tests), runs on a dial's goroutine once
// its link is the session's, before the dial returns.
var testHookConnected atomic.Pointer[func(*Conn)]

// errHandshakeCut: the handshake's deadline closed the link (it expired,
// or the session or messenger closed) before the session could take it.
var errHandshakeCut = errors.New("msgr: the handshake was cut short before its link was attached")

// dial opens one link to addr and runs the dialer's handshake for c.
func (m *Messenger) dial(c *Conn, addr string) error {
	a, err := ParseAddr(addr)
	if err != nil {
		return err
	}
	t, err := m.transport(a)
	if err != nil {
		return err
	}
	tctx, cancelTimeout := context.WithTimeout(context.Background(), m.opts.HandshakeTimeout)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	c.mu.Lock()
	c.dialAbort = func() { cancel(errAttached) }
	c.mu.Unlock()
	go func() {
		select {
		case <-m.done:
			cancel(nil)
		case <-c.closedCh:
			cancel(nil)
		case <-ctx.Done():
		}
	}()
	// The link posts the receives its own transport can (linkOptions), not
	// the session's last window: the address may name another transport.
	opts := m.linkOptions(t)
	if c.side {
		// A side session's few messages need few credits, and its peer
		// may then post no more receives than we do.
		opts.RecvWindow, opts.SmallWindow = min(opts.RecvWindow, sideWindowMsgs), true
	}
	link, err := t.Dial(ctx, a.Host, opts)
	if err == nil {
		// Checked before HELLO goes: a dial that got through after the
		// peer's was accepted here stops without troubling the peer.
		c.mu.Lock()
		err = c.dialAdvanceLocked(dialConnecting)
		c.mu.Unlock()
		if err != nil {
			link.Close()
			return err
		}
	}
	if err != nil {
		if errors.Is(context.Cause(ctx), errAttached) {
			return errAttached
		}
		if errors.Is(err, wire.ErrBanner) {
			m.countHandshakeFailure(err) // the peer answered, but not as a messenger we speak with
		}
		return err
	}
	stop := withLinkDeadline(ctx, link)
	_, err = m.clientHandshake(c, link, uint64(opts.RecvWindow), stop)
	stop()
	if err != nil {
		// A failed dial is no longer one the peer's dial must WAIT for:
		// say so before the peer can see the link close and dial again.
		c.mu.Lock()
		c.dial = dialConnecting
		c.mu.Unlock()
		link.Close()
		if errors.Is(context.Cause(ctx), errAttached) {
			return errAttached // its link closed under it
		}
		m.countHandshakeFailure(err)
		return err
	}
	return nil
}

// clientHandshake runs the dialer's handshake on link, whose receive
// window is window frames. disarm stops the handshake's deadline
// (withLinkDeadline), and reports false if it already fired.
func (m *Messenger) clientHandshake(c *Conn, link wire.Link, window uint64, disarm func() bool) (*linkRun, error) {
	if err := writeHello(link, m); err != nil {
		return nil, err
	}
	var (
		hello msgrpb.Hello
		peer  EntityName
	)
	// The acceptor sends its HELLO after reading our AUTH_REQUEST, so the
	// auth step reads it (onHello) once its first round is out.
	onHello := func() error {
		if _, err := readHS(link, map[wire.Tag]proto.Message{wire.TagHello: &hello}); err != nil {
			return err
		}
		peer = EntityName(hello.EntityName)
		if err := peer.Validate(); err != nil {
			return wire.Protocolf("handshake: peer %v", err)
		}
		c.mu.Lock()
		want := c.peer
		if want == "" {
			c.peer = peer
		}
		if want != "" && want != peer {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s answered as %s, expected %s", ErrWrongPeer, link.RemoteAddr(), peer, want)
		}
		err := c.dialAdvanceLocked(dialReached)
		c.mu.Unlock()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.HandshakeTimeout)
	defer cancel()
	closedCookie := m.lastClosedWith(c)
	newReq := func() (*msgrpb.SessionRequest, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err := c.dialAdvanceLocked(dialRequested); err != nil {
			return nil, err
		}
		// Another link may be live (a peer's simultaneous dial, which may
		// still attach before the answer when our name is the smaller):
		// leave its window alone until this handshake succeeds.
		grantMsgs, grantBytes := c.cw.nextGrant(window)
		req := &msgrpb.SessionRequest{
			Cookie: c.cookie, PeerCookie: c.peerCookie, InSeq: c.sess.inSeq,
			WindowMsgs: window, WindowBytes: c.cw.windowBytes, Lossy: c.lossy,
			GrantMsgs: grantMsgs, GrantBytes: grantBytes, MaxMessage: uint64(m.opts.MaxMessageSize),
		}
		if req.PeerCookie == 0 {
			req.ClosedCookie = closedCookie
		}
		return req, nil
	}
	link, mode, sent, err := m.dialerAuth(ctx, link, onHello, func() EntityName { return peer }, newReq)
	if err != nil {
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrMode) {
			// Not a fault that a redial mends: a credential that does not
			// pass (theirs or ours) passes no better next time. The
			// session ends here, and its owner hears why.
			c.closeWith(err, true, false)
		}
		return nil, err
	}
	lr := m.newLinkRun(c, link)
	lr.mode = mode
	for resets := 0; ; {
		req := sent // the first, if it went with the auth step's last flight
		sent = nil
		if req == nil {
			if req, err = newReq(); err != nil {
				return nil, err
			}
			if err := writeHS(link, wire.TagSessionReq, req); err != nil {
				return nil, err
			}
		}
		var (
			ready msgrpb.SessionReady
			reset msgrpb.SessionReset
			wait  msgrpb.Wait
		)
		tag, err := readHS(link, map[wire.Tag]proto.Message{
			wire.TagSessionReady: &ready, wire.TagSessionReset: &reset, wire.TagWait: &wait,
		})
		if err != nil {
			return nil, err
		}
		switch tag {
		case wire.TagWait:
			c.mu.Lock()
			c.st.WaitsReceived++
			c.mu.Unlock()
			return nil, errWait
		case wire.TagSessionReset:
			if reset.Closed {
				// The CLOSE of this session never reached us: end it as
				// that CLOSE would have (reader.go), with no redial.
				c.closeWith(ErrClosedByPeer, true, false)
				return nil, ErrClosedByPeer
			}
			if reset.Fatal {
				err := &RefusedError{Peer: peer, Reason: reset.Reason}
				c.closeWith(err, true, false)
				return nil, err
			}
			if resets > 0 {
				return nil, wire.Protocolf("handshake: session reset twice: %s", reset.Reason)
			}
			if c.lossy {
				return nil, fmt.Errorf("%w: %s", ErrRemoteReset, reset.Reason)
			}
			c.mu.Lock()
			if c.cookie != req.Cookie || c.peerCookie != req.PeerCookie {
				// The answer is about a session we no longer have: while
				// the request was on its way, a link the peer dialed was
				// accepted here and replaced that session (the peer had
				// restarted). Resetting now would reset the new session
				// under the link that carries it, and the two sides'
				// sequence numbers would part for good. Ask again, for
				// the session we have; with that link attached, newReq
				// abandons this dial instead.
				c.mu.Unlock()
				continue
			}
			resets++
			// A link still attached carries the session the peer lost (a
			// link to its old instance, not yet failed here): its
			// sequence numbers end with the session.
			if old := c.link; old != nil {
				c.detachLocked(old)
			}
			dropped := c.resetSessionLocked()
			// The instance that answered is the peer now: its own dial,
			// should it get in first, starts the new session and is no
			// second restart (which would drop what was queued since).
			c.peerNonce = hello.InstanceNonce
			retired := c.takeRetiredLocked()
			c.mu.Unlock()
			retired.drainWriter()
			c.recycle(dropped)
			m.ratelog.Log(m.log, slog.LevelInfo, "peer lost the session", "msgr: peer lost the session",
				"peer", peer, "reason", reset.Reason, "dropped", len(dropped))
			c.pushEvent(Event{Kind: EventRemoteReset, Conn: c, Err: ErrRemoteReset, Dropped: len(dropped)})
			continue
		}
		c.mu.Lock()
		if c.state == stateClosed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if !disarm() {
			c.mu.Unlock()
			return nil, errHandshakeCut
		}
		c.peerCookie, c.peerNonce = ready.Cookie, hello.InstanceNonce
		if old := c.link; old != nil {
			c.detachLocked(old)
		}
		c.startLink(window, req.GrantMsgs, req.GrantBytes, ready.WindowBytes, ready.GrantMsgs, ready.GrantBytes, ready.MaxMessage, controlSlots(link))
		released, err := c.attachLocked(lr, ready.InSeq)
		retired := c.takeRetiredLocked()
		c.mu.Unlock()
		retired.drainWriter()
		c.recycle(released)
		if err != nil {
			return nil, err
		}
		// The event before the link runs: queued ahead of every message
		// the link delivers, and of its end, which drops what comes after
		// (a busy host could run the whole session before this goroutine
		// went on).
		m.log.Debug("msgr: connected", "peer", peer, "addr", link.RemoteAddr())
		c.pushEvent(Event{Kind: EventConnect, Conn: c})
		m.startLink(lr)
		if h := testHookConnected.Load(); h != nil {
			(*h)(c)
		}
		return lr, nil
	}
}

// accept runs the acceptor's handshake on a new link of the transport
// named scheme, whose receive window is window frames.
func (m *Messenger) accept(link wire.Link, window int, scheme string) (err error) {
	if rw, ok := link.(interface{ RecvWindow() int }); ok {
		// The transport posted fewer receives for this link, as its
		// dialer asked (wire.LinkOptions.SmallWindow): no session on it
		// may grant more.
		window = min(window, rw.RecvWindow())
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.HandshakeTimeout)
	defer cancel()
	stop := withLinkDeadline(ctx, link)
	defer stop()

	var (
		hello   msgrpb.Hello
		authReq msgrpb.AuthRequest
	)
	if _, err := readHS(link, map[wire.Tag]proto.Message{wire.TagHello: &hello}); err != nil {
		return err
	}
	peer := EntityName(hello.EntityName)
	if err := peer.Validate(); err != nil {
		return wire.Protocolf("handshake: peer %v", err)
	}
	if peer == m.opts.Name {
		return fmt.Errorf("msgr: refusing a session with our own name %s", peer)
	}
	defer func() {
		if err != nil && !errors.Is(err, errWait) {
			m.peerHandshakeFailed(peer) // our dial may wait for this link
		}
	}()
	if err := writeHello(link, m); err != nil {
		return err
	}
	if _, err := readHS(link, map[wire.Tag]proto.Message{wire.TagAuthRequest: &authReq}); err != nil {
		return err
	}
	keys, err := m.acceptorAuth(ctx, link, peer, &authReq)
	if err != nil {
		return err
	}
	// The peer proved who it is: its connection leaves its host's bound
	// on connections not yet authenticated (MaxUnauthPerHost).
	wire.InboundOf(link).Authenticated()
	mode := ModeCRC
	if keys != nil {
		if link, err = newSealedLink(link, keys, m.limits); err != nil {
			return err
		}
		mode = ModeSecure
	}
	policy := m.opts.policyFor(peer)
	toldClosed := false
	for {
		var req msgrpb.SessionRequest
		if _, err := readHS(link, map[wire.Tag]proto.Message{wire.TagSessionReq: &req}); err != nil {
			if toldClosed && handshakeReason(err) == HandshakeClosed {
				// The dialer ended its session, as told: no failure.
				link.Close()
				return nil
			}
			return err
		}
		sess, sessWindow := policy, window
		if req.Lossy && !policy.Lossy && m.opts.AcceptLossySide {
			// A side session; the lossless one is untouched. Its few
			// messages need no more credits than the dialer's end has.
			sess, sessWindow = StatelessServer, min(window, sideWindowMsgs)
		}
		if req.Lossy != sess.Lossy {
			writeHS(link, wire.TagSessionReset, &msgrpb.SessionReset{Fatal: true, Reason: fmt.Sprintf(
				"policy mismatch: dialer lossy=%v, %s applies %v to %s", req.Lossy, m.opts.Name, policy, peer.Type())})
			return fmt.Errorf("msgr: %s: policy mismatch (dialer lossy=%v, ours %v)", peer, req.Lossy, policy)
		}
		if req.WindowMsgs < 2 || req.GrantMsgs < 1 {
			return wire.Protocolf("handshake: peer window of %d messages (grant %d) is too small", req.WindowMsgs, req.GrantMsgs)
		}
		if !sess.Lossy && req.PeerCookie != 0 && m.closedSession(req.PeerCookie, peer) {
			// We closed the session the dialer resumes, and our CLOSE
			// never reached it: it ends the session as on that CLOSE. An
			// older dialer ignores closed and asks again for a new
			// session, which the next round accepts.
			if err := writeHS(link, wire.TagSessionReset, &msgrpb.SessionReset{Closed: true, Reason: closedSessionReason}); err != nil {
				return err
			}
			toldClosed = true
			continue
		}
		done, err := m.acceptSession(link, mode, peer, hello.InstanceNonce, sess, &req, sessWindow, scheme, stop)
		if done || err != nil {
			return err
		}
	}
}

// closedSessionReason is the reason of the SESSION_RESET that tells a
// dialer we closed its session, for people (and older dialers' logs).
const closedSessionReason = "session closed (its CLOSE was lost)"

// closedSession reports whether cookie, ours, names a lossless session
// with peer that we closed with CLOSE, recently enough (tombstones).
func (m *Messenger) closedSession(cookie uint64, peer EntityName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tombs.closed(cookie, peer)
}

// lastClosedWith returns our cookie of the last lossless session we closed
// with c's peer, if we remember one, for c's new session to name: the
// peer may have missed its CLOSE and still hold it (§6.4 rule 5a).
func (m *Messenger) lastClosedWith(c *Conn) uint64 {
	if c.lossy {
		return 0
	}
	peer := c.Peer()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tombs.lastWith(peer)
}

// acceptSession answers one SESSION_REQUEST. done is false after a
// SESSION_RESET, when the dialer will ask again on the same link. disarm
// is clientHandshake's.
func (m *Messenger) acceptSession(link wire.Link, mode Mode, peer EntityName, nonce uint64, policy Policy, req *msgrpb.SessionRequest, window int, scheme string, disarm func() bool) (done bool, err error) {
	if policy.Lossy && req.PeerCookie != 0 {
		// Lossy sessions are never resumed; answer before creating one.
		err := writeHS(link, wire.TagSessionReset, &msgrpb.SessionReset{Reason: "lossy sessions are not resumed"})
		return err != nil, err
	}
	var c *Conn
	for {
		m.mu.Lock()
		if m.closing.Load() {
			m.mu.Unlock()
			return true, ErrClosed
		}
		if policy.Lossy {
			c = m.newConn(policy, "", peer, window)
			c.scheme = scheme
			m.lossyIn[c] = struct{}{}
		} else if c = m.byPeer[peer]; c == nil {
			c = m.newConn(policy, "", peer, window)
			c.scheme = scheme
			c.state = stateStandby // no address to dial: it waits for the peer
			m.byPeer[peer] = c
		}
		m.mu.Unlock()

		c.mu.Lock()
		if c.state == stateClosed {
			c.mu.Unlock()
			return true, ErrClosed
		}
		if policy.Lossy || req.PeerCookie != 0 || req.ClosedCookie == 0 || req.ClosedCookie != c.peerCookie {
			break
		}
		// The dialer closed this session, and its CLOSE never came: end it
		// as that CLOSE would have, and take the request into a new one.
		c.closeLocked(ErrClosedByPeer, true, false)
	}
	// A simultaneous connect: both sides dial; the larger name's dial
	// wins once it has reached the peer (connrace.go).
	if c.waitForOwnDialLocked(m.opts.Name, peer) {
		c.st.WaitsSent++
		c.mu.Unlock()
		writeHS(link, wire.TagWait, &msgrpb.Wait{})
		return true, errWait
	}
	if req.PeerCookie != 0 && req.PeerCookie != c.cookie {
		c.mu.Unlock()
		err := writeHS(link, wire.TagSessionReset, &msgrpb.SessionReset{Reason: "no such session (restarted or closed)"})
		return err != nil, err
	}
	restarted := (c.peerCookie != 0 && req.Cookie != c.peerCookie) || (c.peerNonce != 0 && nonce != c.peerNonce)
	// Checked before the old link is let go: a peer whose in_seq cannot
	// be rewound to (it claims messages never sent) is refused, and the
	// session keeps the link it has.
	if err := c.sess.checkRewind(req.InSeq, restarted); err != nil {
		if c.link != nil {
			c.mu.Unlock()
			return true, err
		}
		// No link carries the session, and the dialer would ask with the
		// same in_seq each time: refusing would part the two for good.
		// The session is beyond repair; reset it. The dialer resets its
		// side and asks for a new session, which this side then takes as
		// a restart (EventRemoteReset on both).
		c.mu.Unlock()
		m.ratelog.Log(m.log, slog.LevelWarn, "session state mismatch", "msgr: resetting a session whose state the peer contradicts", "peer", peer, "err", err)
		werr := writeHS(link, wire.TagSessionReset, &msgrpb.SessionReset{Reason: fmt.Sprintf("session state mismatch: %v", err)})
		return werr != nil, werr
	}
	if !disarm() {
		c.mu.Unlock()
		return true, errHandshakeCut
	}
	var dropped []*Message
	remoteReset := false
	if restarted {
		// The peer restarted: its old session is gone.
		if old := c.link; old != nil {
			c.detachLocked(old)
		}
		dropped = c.resetSessionLocked()
		remoteReset = true
	}
	c.peerCookie, c.peerNonce = req.Cookie, nonce
	lr := m.newLinkRun(c, link)
	lr.mode = mode
	if old := c.link; old != nil {
		c.detachLocked(old)
	}
	// The session takes this link's window, whatever the last link's was:
	// a peer may come back over a transport that posts fewer receives.
	c.startLink(uint64(window), 0, 0, req.WindowBytes, req.GrantMsgs, req.GrantBytes, req.MaxMessage, controlSlots(link))
	ready := &msgrpb.SessionReady{
		Cookie: c.cookie, PeerCookie: req.Cookie, InSeq: c.sess.inSeq,
		WindowMsgs: uint64(window), WindowBytes: c.cw.windowBytes,
		GrantMsgs: c.cw.advertisedMsgs.Load(), GrantBytes: c.cw.advertisedBytes.Load(),
		ResetOld: remoteReset, MaxMessage: uint64(m.opts.MaxMessageSize),
	}
	// Nothing may write on the link before READY is out: the writer
	// starts below, and wmu keeps inline senders off until then.
	lr.wmu.Lock()
	released, err := c.attachLocked(lr, req.InSeq)
	if err == nil {
		c.abandonDialLocked()
	}
	retired := c.takeRetiredLocked()
	c.mu.Unlock()
	retired.drainWriter()
	c.recycle(dropped)
	c.recycle(released)
	if remoteReset {
		m.ratelog.Log(m.log, slog.LevelInfo, "peer restarted", "msgr: peer restarted; its session was reset",
			"peer", peer, "dropped", len(dropped))
		c.pushEvent(Event{Kind: EventRemoteReset, Conn: c, Err: ErrRemoteReset, Dropped: len(dropped)})
	}
	if err == nil {
		err = writeHS(link, wire.TagSessionReady, ready)
	}
	lr.wmu.Unlock()
	if err != nil {
		c.fault(lr, err)
		return true, err
	}
	// Before the link runs, as EventConnect (dial).
	m.log.Debug("msgr: accepted", "peer", peer, "remote", link.RemoteAddr(), "policy", policy)
	c.pushEvent(Event{Kind: EventAccept, Conn: c})
	m.startLink(lr)
	return true, nil
}

// controlSlots reports whether link's banners agreed CONTROL_SLOTS (§3.3):
// then its control frames take no credit (engine.ctl).
func controlSlots(link wire.Link) bool { return link.Features()&wire.FeatureControlSlots != 0 }
