package auth

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// The messenger's handshake authenticates both sides with TLS 1.3
// (crypto/tls) and mutual certificates, but carries TLS's handshake
// messages in its own frames instead of running TLS on a socket: an RDMA
// link has no socket, and after the handshake the messenger's frames are
// sealed (secure mode) or checked by CRC (crc mode), never TLS records.
// TLS here only authenticates and agrees on keys; SessionKeys takes the
// keys of secure mode from it with the TLS exporter (RFC 8446 7.5).
//
// The flights: the dialer's ClientHello; the acceptor's whole answer
// (ServerHello through Finished, its certificate and a request for the
// dialer's); the dialer's certificate and Finished. Each flight is one
// message for the caller to carry (Flights).

// ErrAuthFailed: the peer did not prove an identity the cluster's CA
// signed, or the handshake broke. Its message says which.
var ErrAuthFailed = errors.New("auth: authentication failed")

// exporterLabel names Osprey's use of the TLS exporter, so keys taken
// from it serve this purpose only.
const exporterLabel = "EXPORTER-osprey-msgr-secure"

// Flights carries the handshake's messages: Send hands one flight to the
// peer, Recv returns the next the peer sent.
type Flights interface {
	Send(flight []byte) error
	Recv() ([]byte, error)
}

// Result is what a finished handshake established.
type Result struct {
	// Peer is the peer's entity, from the certificate it proved it holds.
	Peer string
	// PeerCert is that certificate: its serial says which of the entity's
	// certificates it used (Serial).
	PeerCert *x509.Certificate
	// Unsent is what TLS wrote last and the handshake did not send: the
	// dialer's last flight (DialOptions.KeepLastFlight), or the session
	// ticket the acceptor hands out (AcceptOptions.Resume), for the
	// dialer's TakeTicket.
	Unsent []byte
	state  tls.ConnectionState
	tc     *tls.Conn
	fc     *flightConn
}

// Resumed reports whether the handshake resumed an earlier session.
func (r *Result) Resumed() bool { return r.state.DidResume }

// TakeTicket hands the dialer's TLS what the acceptor's Result.Unsent
// held, its session ticket, which it keeps for the next dial to the same
// peer (DialOptions.Resume). Anything else in it is ignored. A resumed
// handshake's ticket came in the acceptor's last flight instead, and is
// still unread: it is taken too, so the dialer's next ticket is sealed
// under the acceptor's current key (Resumption.KeyRotation).
func (r *Result) TakeTicket(b []byte) {
	if r.tc == nil {
		return
	}
	r.fc.in, r.fc.ended = append(r.fc.in, b...), true
	var buf [1]byte
	r.tc.Read(buf[:]) // processes the ticket, then meets the end
}

// KeyExchange is the key agreement the handshake used (see DialOptions).
func (r *Result) KeyExchange() tls.CurveID { return r.state.CurveID }

// SessionKeys derives n bytes of key material bound to this handshake and
// to binding (the transcript of whatever the caller exchanged outside
// TLS, so a tampered outer frame gives the two sides different keys).
// Both sides get the same bytes.
func (r *Result) SessionKeys(binding []byte, n int) ([]byte, error) {
	return r.state.ExportKeyingMaterial(exporterLabel, binding, n)
}

// maxFlight bounds one flight: a certificate chain of two Ed25519
// certificates and TLS's framing fit in a few KiB.
const maxFlight = 64 << 10

// DialOptions tunes the dialer's side of the handshake.
type DialOptions struct {
	// CleartextSession: the session's keys will seal nothing (the dialer
	// offers crc mode only, so the acceptor cannot choose secure), and the
	// key exchange is X25519 alone instead of crypto/tls's default hybrid
	// X25519MLKEM768. ML-KEM keeps recorded sealed traffic from a future
	// quantum computer; a crc session's traffic is cleartext whatever the
	// key exchange, and authentication (signatures, checked while the
	// handshake runs) does not depend on it. ML-KEM's key generation,
	// encapsulation and decapsulation are about a quarter of a handshake's
	// CPU (docs/benchmarks.md). Sessions that may be sealed keep the hybrid.
	CleartextSession bool
	// KeepLastFlight: the dialer's last flight (its certificate and
	// Finished) is not sent but returned in Result.Unsent, for the
	// caller to send in one write with what follows it.
	KeepLastFlight bool
	// Resume, if set, keeps the session tickets acceptors hand out
	// (Result.TakeTicket) and offers them on later dials to the same
	// Peer, so that those resume the session (see Resumption).
	Resume *Resumption
	// Peer names the acceptor (its address) for Resume.
	Peer string
}

// AcceptOptions tunes the acceptor's side of the handshake.
type AcceptOptions struct {
	// Resume, if set, lets dialers resume their sessions with the tickets
	// this side hands out (Result.Unsent, after the handshake).
	Resume *Resumption
}

// Resumption lets a messenger's reconnects skip certificates: TLS 1.3
// session resumption in psk_dhe_ke mode (RFC 8446 4.2.9), as crypto/tls
// does it. The acceptor hands the dialer a ticket, sealed under a key of
// this Resumption's that never leaves the process, holding the session's
// resumption secret and the dialer's certificate; a later dial to the same
// acceptor presents it. A resumed handshake runs a fresh (EC)DHE exchange,
// so its keys are new and forward secret; each side proves it holds the
// previous session's secret, which only the two ends of that
// certificate-authenticated session had; and the peer's certificate (the
// dialer's from the ticket, the acceptor's from the dialer's cache) is
// checked again, against the CA, the clock and the caller's
// authorization, as in a full handshake. It saves the two signatures, the
// two signature checks and the certificates' transfer and parsing.
//
// Ticket keys rotate as crypto/tls rotates its own: a new one seals
// tickets every KeyRotation, and each opens its tickets for KeyLifetime,
// so a key stolen from memory exposes a bounded window of tickets.
type Resumption struct {
	// KeyRotation is how long one ticket key seals new tickets before a
	// fresh one takes over; zero is DefaultKeyRotation. A key taken from
	// the process then opens only the tickets of its own period.
	KeyRotation time.Duration
	// KeyLifetime is how long a key still opens the tickets it sealed;
	// zero is DefaultKeyLifetime. A ticket older than its key's lifetime
	// buys a full handshake instead of a resumption.
	KeyLifetime time.Duration

	now func() time.Time // the clock rotation reads; tests set it

	mu      sync.Mutex
	cache   tls.ClientSessionCache // a dialer's sessions; ForgetSessions replaces it
	keys    []ticketKey            // newest first: keys[0] seals, all of them open
	current [][32]byte             // keys' keys, for Config.SetSessionTicketKeys
}

// The defaults are crypto/tls's own for the keys it manages itself
// (Config.SetSessionTicketKeys turns that off, so Resumption does it).
const (
	DefaultKeyRotation = 24 * time.Hour
	DefaultKeyLifetime = 7 * 24 * time.Hour
)

type ticketKey struct {
	key     [32]byte
	created time.Time
}

// resumptionCacheSize bounds the sessions a dialer keeps: one per peer.
const resumptionCacheSize = 1024

// NewResumption makes the state one messenger resumes with: no ticket key
// yet (the first acceptance makes one) and an empty session cache.
func NewResumption() *Resumption {
	return &Resumption{now: time.Now, cache: tls.NewLRUClientSessionCache(resumptionCacheSize)}
}

// ForgetSessions drops every session that could resume with the
// certificate this side showed before a new keyring replaced it: those a
// dialer kept, and, as an acceptor, the ticket keys that sealed the
// peers' tickets (each holds our old certificate, which the peer would
// take for ours and refuse once the key is rotated). Peers then make a
// full handshake, and the acceptor makes a new ticket key at its next.
func (r *Resumption) ForgetSessions() {
	r.mu.Lock()
	r.cache = tls.NewLRUClientSessionCache(resumptionCacheSize)
	r.keys, r.current = nil, nil
	r.mu.Unlock()
}

// Forget drops the session a dialer kept for peer (Flights' RemoteAddr,
// DialOptions.Peer), after a handshake that resumed it was refused: the
// certificates it carries were, most likely, rotated since.
func (r *Resumption) Forget(peer string) {
	// crypto/tls keys the cache by the connection's RemoteAddr.
	r.clientCache().Put(flightAddr(peer).String(), nil)
}

func (r *Resumption) clientCache() tls.ClientSessionCache {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cache
}

// ticketKeys returns the keys an acceptance uses, the sealing one first:
// it makes a new key when the newest is KeyRotation old and drops those
// past KeyLifetime, so that no expired key stays in memory. The slice is
// shared until the keys change: Config.SetSessionTicketKeys copies it.
func (r *Resumption) ticketKeys() [][32]byte {
	rotation, lifetime := cmp.Or(r.KeyRotation, DefaultKeyRotation), cmp.Or(r.KeyLifetime, DefaultKeyLifetime)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.keys)
	r.keys = slices.DeleteFunc(r.keys, func(k ticketKey) bool { return now.Sub(k.created) >= lifetime })
	if len(r.keys) == 0 || now.Sub(r.keys[0].created) >= rotation {
		k := ticketKey{created: now}
		rand.Read(k.key[:])
		r.keys = slices.Insert(r.keys, 0, k)
	} else if len(r.keys) == n {
		return r.current
	}
	r.current = make([][32]byte, len(r.keys))
	for i, k := range r.keys {
		r.current[i] = k.key
	}
	return r.current
}

// classicalOnly is the key exchange of a CleartextSession.
var classicalOnly = []tls.CurveID{tls.X25519}

// Dial runs the dialer's (TLS client's) side of the handshake with k's
// credential over f.
func Dial(ctx context.Context, k *Keyring, f Flights, opts DialOptions) (*Result, error) {
	var curves []tls.CurveID // crypto/tls's defaults
	if opts.CleartextSession {
		curves = classicalOnly
	}
	return run(ctx, k, f, true, curves, opts.KeepLastFlight, opts.Resume, opts.Peer)
}

// Accept runs the acceptor's (TLS server's) side. It takes the key
// exchange the dialer offers (crypto/tls's defaults, hybrid first).
func Accept(ctx context.Context, k *Keyring, f Flights, opts AcceptOptions) (*Result, error) {
	return run(ctx, k, f, false, nil, opts.Resume != nil, opts.Resume, "")
}

func run(ctx context.Context, k *Keyring, f Flights, client bool, curves []tls.CurveID, keep bool, resume *Resumption, peer string) (*Result, error) {
	var name string
	cfg := &tls.Config{
		CurvePreferences: curves,
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{k.TLSCertificate()},
		// Peers are entities, not host names: the chain is checked to
		// the cluster's CA in VerifyConnection, with the entity name
		// taken from it. TLS still checks the signature that proves the
		// peer holds the certificate's key.
		InsecureSkipVerify: true,
		ClientAuth:         tls.RequireAnyClientCert,
		// Resumption only with a Resumption: the acceptor's tickets
		// are then kept out of the flights (Result.Unsent).
		SessionTicketsDisabled: resume == nil,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the peer showed no certificate", ErrAuthFailed)
			}
			n, err := Verify(k.CA, cs.PeerCertificates[0], time.Now())
			if err != nil {
				return fmt.Errorf("%w: %v", ErrAuthFailed, err)
			}
			name = n
			return nil
		},
	}
	if resume != nil {
		if client {
			cfg.ClientSessionCache = resume.clientCache()
		} else {
			cfg.SetSessionTicketKeys(resume.ticketKeys())
		}
	}
	c := &flightConn{f: f, peer: peer}
	var tc *tls.Conn
	if client {
		tc = tls.Client(c, cfg)
	} else {
		tc = tls.Server(c, cfg)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		if errors.Is(err, ErrAuthFailed) {
			return nil, err
		}
		var ae *tls.AlertError
		if errors.As(err, &ae) || c.err == nil {
			return nil, fmt.Errorf("%w: %v", ErrAuthFailed, err)
		}
		return nil, c.err // the carrier failed, not TLS
	}
	// The dialer's last flight is written but not yet sent: nothing reads
	// after it.
	var unsent []byte
	if keep {
		unsent = bytes.Clone(c.out.Bytes())
		c.out.Reset()
	} else if err := c.flush(); err != nil {
		return nil, err
	}
	cs := tc.ConnectionState()
	return &Result{Peer: name, PeerCert: cs.PeerCertificates[0], Unsent: unsent, state: cs, tc: tc, fc: c}, nil
}

// flightConn is the net.Conn crypto/tls runs on: what TLS writes
// collects into a flight, sent as one message when TLS next wants to read
// (it has said all it will until the peer answers).
type flightConn struct {
	f     Flights
	out   bytes.Buffer
	in    []byte
	err   error  // the carrier's first error
	peer  string // RemoteAddr, the dialer's session cache key
	ended bool   // in is the last there is (TakeTicket)
}

func (c *flightConn) Write(b []byte) (int, error) {
	if c.out.Len()+len(b) > maxFlight {
		return 0, fmt.Errorf("%w: a handshake flight over %d bytes", ErrAuthFailed, maxFlight)
	}
	return c.out.Write(b)
}

func (c *flightConn) flush() error {
	if c.out.Len() == 0 {
		return nil
	}
	err := c.f.Send(bytes.Clone(c.out.Bytes()))
	c.out.Reset()
	if err != nil && c.err == nil {
		c.err = err
	}
	return err
}

func (c *flightConn) Read(b []byte) (int, error) {
	if len(c.in) == 0 && c.ended {
		return 0, io.EOF
	}
	if len(c.in) == 0 {
		if err := c.flush(); err != nil {
			return 0, err
		}
		msg, err := c.f.Recv()
		if err != nil {
			if c.err == nil {
				c.err = err
			}
			return 0, err
		}
		if len(msg) == 0 {
			return 0, io.ErrUnexpectedEOF
		}
		if len(msg) > maxFlight {
			return 0, fmt.Errorf("%w: a handshake flight over %d bytes", ErrAuthFailed, maxFlight)
		}
		c.in = msg
	}
	n := copy(b, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *flightConn) Close() error                     { return nil }
func (c *flightConn) LocalAddr() net.Addr              { return flightAddr("") }
func (c *flightConn) RemoteAddr() net.Addr             { return flightAddr(c.peer) }
func (c *flightConn) SetDeadline(time.Time) error      { return nil }
func (c *flightConn) SetReadDeadline(time.Time) error  { return nil }
func (c *flightConn) SetWriteDeadline(time.Time) error { return nil }

// flightAddr is the peer's address, which the dialer's session cache
// keys its tickets by.
type flightAddr string

func (flightAddr) Network() string  { return "msgr" }
func (a flightAddr) String() string { return "msgr-handshake " + string(a) }
