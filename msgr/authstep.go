package msgr

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// The handshake's auth step (docs/protocol.md 6.3). With Options.Auth the
// method is "tls13": TLS 1.3 with mutual certificates from the cluster's
// CA (msgr/auth), its flights carried in AUTH_REQUEST (the ClientHello),
// AUTH_MORE frames, then AUTH_DONE. A peer's entity name is the one its
// certificate carries: a HELLO that claims another is refused. Without
// Options.Auth the method is "none" and peers are who they claim to be.

const authTLS13 = "tls13"

// ErrAuth: a session was refused because a side did not prove an identity
// the cluster's CA signed, claimed a name its certificate does not carry,
// or is not allowed (AuthOptions.Authorize); or the two sides share no
// auth method. The message says which and who.
var ErrAuth = errors.New("msgr: authentication refused")

// AuthOptions authenticate a messenger's sessions.
type AuthOptions struct {
	// Keyring is this messenger's credential; its entity must be
	// Options.Name. Required.
	Keyring *auth.Keyring
	// Authorize, if set, is asked about every authenticated peer before
	// its session starts, when dialing and when accepting; an error
	// refuses the session and is the reason the peer is told, e.g. "osd.7
	// not allowed on this network" or "client.x has no record". It runs on
	// the handshake's goroutine, bounded by HandshakeTimeout.
	Authorize func(ctx context.Context, peer EntityName, cert *x509.Certificate) error
	// Modes are the connection modes this messenger accepts, in order of
	// preference (ParseModes reads Ceph's spellings): a dialer offers
	// them, an acceptor picks the first of its own the dialer offered, and
	// a peer with none in common is refused with ErrMode. Nil is crc only.
	// ModeSecure seals every frame after the handshake (docs/auth.md).
	Modes []Mode
	// NoResumption turns TLS session resumption off: every handshake,
	// reconnects included, sends and checks both certificates and
	// signatures, as a first one does. Benchmarks of full handshakes use
	// it; a peer that resumes gains nothing from it (docs/auth.md).
	NoResumption bool
}

func (a *AuthOptions) check(name EntityName) error {
	if a.Keyring == nil {
		return fmt.Errorf("msgr: Options.Auth.Keyring is required")
	}
	if a.Keyring.Entity != string(name) {
		return fmt.Errorf("msgr: Options.Name is %s but the keyring is %s's", name, a.Keyring.Entity)
	}
	for i, m := range a.Modes {
		if m != ModeCRC && m != ModeSecure {
			return fmt.Errorf("msgr: Options.Auth.Modes: unknown mode %q", m)
		}
		if slices.Contains(a.Modes[:i], m) {
			return fmt.Errorf("msgr: Options.Auth.Modes: %q given twice", m)
		}
	}
	return nil
}

// SetKeyring makes k the credential of the sessions this messenger starts
// from now on, dialed or accepted, so that a key reissued by `osprey auth
// rotate` takes over without a restart (auth.WatchKeyring). k must be the
// same entity's, under the same CA. Sessions up keep going; the TLS
// sessions kept for resumption are forgotten, as they carry the old
// certificate, which the mons refuse once it is rotated.
func (m *Messenger) SetKeyring(k *auth.Keyring) error {
	old := m.keyring.Load()
	switch {
	case old == nil:
		return errors.New("msgr: SetKeyring on a messenger without authentication")
	case k == nil || k.Cert == nil || k.CA == nil:
		return errors.New("msgr: SetKeyring: no keyring")
	case k.Entity != string(m.opts.Name):
		return fmt.Errorf("msgr: SetKeyring: the keyring is %s's, this messenger is %s", k.Entity, m.opts.Name)
	case !k.CA.Equal(old.CA):
		return fmt.Errorf("msgr: SetKeyring: %s's new keyring is under another CA (%s) than its sessions (%s)", k.Entity, k.CA.Subject, old.CA.Subject)
	}
	if m.keyring.Swap(k).Cert.Equal(k.Cert) {
		return nil
	}
	if m.resume != nil {
		m.resume.ForgetSessions()
	}
	m.log.Info("msgr: keyring replaced: new sessions use it", "serial", k.Cert.SerialNumber.String())
	return nil
}

// authMethods are what a dialer offers: never "none" when it can
// authenticate, so no one can talk it down to no authentication.
func (m *Messenger) authMethods() []string {
	if m.opts.Auth != nil {
		return []string{authTLS13}
	}
	return []string{authNone}
}

// dialFlights carries the dialer's TLS flights: the first in
// AUTH_REQUEST (after which the peer's HELLO is read and checked by
// onHello), later ones in AUTH_MORE; the acceptor's come in AUTH_MORE, or
// an AUTH_DONE that refuses.
type dialFlights struct {
	link    wire.Link
	modes   []string
	sent    int
	onHello func() error
	helloed bool
}

func (f *dialFlights) Send(b []byte) error {
	f.sent++
	if f.sent == 1 {
		return writeHS(f.link, wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{authTLS13}, Payload: b, Modes: f.modes})
	}
	return writeHS(f.link, wire.TagAuthMore, &msgrpb.AuthMore{Payload: b})
}

func (f *dialFlights) Recv() ([]byte, error) {
	if !f.helloed {
		f.helloed = true
		if err := f.onHello(); err != nil {
			return nil, err
		}
	}
	var (
		more msgrpb.AuthMore
		done msgrpb.AuthDone
	)
	tag, err := readHS(f.link, map[wire.Tag]proto.Message{wire.TagAuthMore: &more, wire.TagAuthDone: &done})
	if err != nil {
		return nil, err
	}
	if tag == wire.TagAuthDone {
		return nil, refusedBy(done.Refused)
	}
	return more.Payload, nil
}

// refusedBy is the dialer's error for an AUTH_DONE that refuses, or one
// that ends the method before its last round.
func refusedBy(reason string) error {
	if reason == "" {
		reason = "the acceptor ended authentication early"
	}
	return &authRefusedError{reason: reason}
}

// authRefusedError: the acceptor refused us. Final: redialing would be
// refused again, so the Conn closes with it. It matches ErrAuth and
// ErrRefused; a refusal for want of a common mode is ErrMode as well (the
// acceptor's reason starts with its text).
type authRefusedError struct{ reason string }

func (e *authRefusedError) Error() string { return "msgr: the peer refused us: " + e.reason }
func (e *authRefusedError) Unwrap() []error {
	if strings.HasPrefix(e.reason, ErrMode.Error()) {
		return []error{ErrAuth, ErrRefused, ErrMode}
	}
	return []error{ErrAuth, ErrRefused}
}

// dialerAuth runs the dialer's auth step after its HELLO; onHello reads and checks the acceptor's
// HELLO, which comes between the acceptor's reading AUTH_REQUEST and
// answering it. It returns once the peer proved it is claimed, the name
// its HELLO gave, with the mode the acceptor chose and the link the
// session runs on: link's own, sealed in secure mode.
//
// A dialer that offers one mode knows the mode before AUTH_DONE says it,
// so once the peer has proved itself (and Authorize allowed it) it sends
// its first SESSION_REQUEST, newReq's, in the write of its last auth
// flight instead of a round trip later (docs/protocol.md §6.5). sent is
// that request; nil if it went without one.
func (m *Messenger) dialerAuth(ctx context.Context, link wire.Link, onHello func() error, claimed func() EntityName,
	newReq func() (*msgrpb.SessionRequest, error)) (sess wire.Link, mode Mode, sent *msgrpb.SessionRequest, err error) {
	var res *auth.Result
	modes := m.modes()
	offer := modeStrings(modes)
	var peerErr error // the peer's check, told after any refusal of ours
	if m.opts.Auth == nil {
		if err := writeHS(link, wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: m.authMethods(), Modes: offer}); err != nil {
			return nil, "", nil, err
		}
		if err := onHello(); err != nil {
			return nil, "", nil, err
		}
	} else {
		// A dialer that offers no sealed mode never gets one (the
		// acceptor picks among the offer), so its keys protect no secret.
		dopts := auth.DialOptions{CleartextSession: !slices.Contains(modes, ModeSecure), KeepLastFlight: true,
			Resume: m.resume, Peer: link.RemoteAddr()}
		if res, err = auth.Dial(ctx, m.keyring.Load(), &dialFlights{link: link, modes: offer, onHello: onHello}, dopts); err != nil {
			if errors.Is(err, auth.ErrAuthFailed) {
				return nil, "", nil, fmt.Errorf("%w: %s: %w", ErrAuth, link.RemoteAddr(), err)
			}
			return nil, "", nil, err
		}
		if h := m.afterDialAuth; h != nil {
			h(res)
		}
		last, err := hsFrame(wire.TagAuthMore, &msgrpb.AuthMore{Payload: res.Unsent})
		if err != nil {
			return nil, "", nil, err
		}
		if peerErr = m.checkPeer(ctx, claimed(), res); peerErr == nil && len(modes) == 1 {
			if sess, err = m.sessionLink(link, res, offer, modes[0]); err != nil {
				return nil, "", nil, err
			}
			if sent, err = newReq(); err != nil {
				return nil, "", nil, err
			}
			if err := writeAfter(sess, last, sent); err != nil {
				return nil, "", nil, err
			}
		} else if err := link.WriteFrames([]wire.Frame{last}); err != nil {
			return nil, "", nil, err
		}
	}
	var done msgrpb.AuthDone
	if _, err := readHS(link, map[wire.Tag]proto.Message{wire.TagAuthDone: &done}); err != nil {
		return nil, "", nil, err
	}
	if done.Refused != "" {
		m.forgetResumed(res, link)
		return nil, "", nil, refusedBy(done.Refused)
	}
	if want := m.authMethods()[0]; done.Method != want {
		return nil, "", nil, wire.Protocolf("handshake: peer ended auth with method %q, want %q", done.Method, want)
	}
	if mode, err = modeChosen(done.Mode, modes); err != nil {
		return nil, "", nil, err
	}
	if res == nil {
		return link, mode, nil, nil
	}
	if peerErr != nil {
		m.forgetResumed(res, link)
		return nil, "", nil, peerErr
	}
	if err := checkModeProof(res, offer, mode, done.ModeProof); err != nil {
		return nil, "", nil, err
	}
	res.TakeTicket(done.Payload) // for the next dial to this peer
	if sent == nil {
		sess, err = m.sessionLink(link, res, offer, mode)
	}
	return sess, mode, sent, err
}

// forgetResumed drops the TLS session a refused handshake resumed: what
// was refused is a certificate it carries (ours or the peer's, rotated
// since), and resuming it again would only be refused again.
func (m *Messenger) forgetResumed(res *auth.Result, link wire.Link) {
	if res != nil && res.Resumed() && m.resume != nil {
		m.resume.Forget(link.RemoteAddr())
	}
}

// sessionLink is the link a session in mode runs on, the dialer's: link
// itself in crc mode, link sealed under res's keys in secure mode.
func (m *Messenger) sessionLink(link wire.Link, res *auth.Result, offer []string, mode Mode) (wire.Link, error) {
	if mode != ModeSecure {
		return link, nil
	}
	keys, err := secureKeys(res, offer, true)
	if err != nil {
		return nil, err
	}
	return newSealedLink(link, keys, m.limits)
}

// writeAfter writes clear as it is, then req on sess (sealed, if sess
// seals), in one write.
func writeAfter(sess wire.Link, clear wire.Frame, req *msgrpb.SessionRequest) error {
	f, err := hsFrame(wire.TagSessionReq, req)
	if err != nil {
		return err
	}
	if s, ok := sess.(*sealedLink); ok {
		return s.writeAfter([]wire.Frame{clear}, []wire.Frame{f})
	}
	return sess.WriteFrames([]wire.Frame{clear, f})
}

// checkPeer checks an authenticated peer: the name it claimed is the one
// its certificate carries, and Authorize allows it.
func (m *Messenger) checkPeer(ctx context.Context, claimed EntityName, res *auth.Result) error {
	if string(claimed) != res.Peer {
		return fmt.Errorf("%w: the peer claims to be %s but its certificate is %s's", ErrAuth, claimed, res.Peer)
	}
	if az := m.opts.Auth.Authorize; az != nil {
		if err := az(ctx, claimed, res.PeerCert); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrAuth, claimed, err)
		}
	}
	return nil
}

// acceptFlights carries the acceptor's TLS flights: the dialer's first
// came in AUTH_REQUEST, later ones in AUTH_MORE; ours go in AUTH_MORE.
type acceptFlights struct {
	link     wire.Link
	first    []byte
	gotFirst bool
}

func (f *acceptFlights) Send(b []byte) error {
	return writeHS(f.link, wire.TagAuthMore, &msgrpb.AuthMore{Payload: b})
}

func (f *acceptFlights) Recv() ([]byte, error) {
	if !f.gotFirst {
		f.gotFirst = true
		return f.first, nil
	}
	var more msgrpb.AuthMore
	if _, err := readHS(f.link, map[wire.Tag]proto.Message{wire.TagAuthMore: &more}); err != nil {
		return nil, err
	}
	return more.Payload, nil
}

// acceptorAuth runs the acceptor's auth step on the dialer's AUTH_REQUEST
// and answers AUTH_DONE: the method and mode, or why the dialer is
// refused. It returns the link's keys if it chose secure mode (nil: crc).
func (m *Messenger) acceptorAuth(ctx context.Context, link wire.Link, peer EntityName, req *msgrpb.AuthRequest) (*linkKeys, error) {
	refuse := func(err error) error {
		writeHS(link, wire.TagAuthDone, &msgrpb.AuthDone{Refused: err.Error()})
		m.ratelog.Log(m.log, slog.LevelWarn, "auth refused", "msgr: refused a peer", "peer", peer, "remote", link.RemoteAddr(), "err", err)
		return err
	}
	ours := m.modes()
	mode, ok := chooseMode(req.Modes, ours)
	var modeErr error
	if !ok {
		offered := req.Modes
		if len(offered) == 0 {
			offered = []string{string(ModeCRC)}
		}
		modeErr = fmt.Errorf("%w: %s offers modes %v; %s accepts %v", ErrMode, peer, offered, m.opts.Name, ours)
	}
	if m.opts.Auth == nil {
		if !slices.Contains(req.Methods, authNone) {
			return nil, refuse(fmt.Errorf("%w: %s offers auth methods %v; %s does none (it has no keyring)", ErrAuth, peer, req.Methods, m.opts.Name))
		}
		if modeErr != nil {
			return nil, refuse(modeErr)
		}
		return nil, writeHS(link, wire.TagAuthDone, &msgrpb.AuthDone{Method: authNone, Mode: string(mode)})
	}
	if !slices.Contains(req.Methods, authTLS13) {
		return nil, refuse(fmt.Errorf("%w: %s offers auth methods %v; %s requires %s (give it a keyring)", ErrAuth, peer, req.Methods, m.opts.Name, authTLS13))
	}
	if modeErr != nil {
		return nil, refuse(modeErr)
	}
	res, err := auth.Accept(ctx, m.keyring.Load(), &acceptFlights{link: link, first: req.Payload}, auth.AcceptOptions{Resume: m.resume})
	if err != nil {
		if errors.Is(err, auth.ErrAuthFailed) {
			return nil, refuse(fmt.Errorf("%w: %s: %w", ErrAuth, peer, err))
		}
		return nil, err
	}
	if err := m.checkPeer(ctx, peer, res); err != nil {
		return nil, refuse(err)
	}
	proof, err := modeProof(res, req.Modes, mode)
	if err != nil {
		return nil, err
	}
	var keys *linkKeys
	if mode == ModeSecure {
		if keys, err = secureKeys(res, req.Modes, false); err != nil {
			return nil, err
		}
	}
	// The payload is the session ticket for the dialer's next dial.
	return keys, writeHS(link, wire.TagAuthDone, &msgrpb.AuthDone{Method: authTLS13, Mode: string(mode), ModeProof: proof, Payload: res.Unsent})
}
