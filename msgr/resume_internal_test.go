package msgr

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
)

// TestResumedSessions: a messenger's second session with a peer resumes
// the first's TLS session (no certificates), yet gets keys of its own,
// carries messages in either mode, and is still refused once the peer's
// authorization refuses it (revocation holds at the next reconnect).
func TestResumedSessions(t *testing.T) {
	keyring := testKeyrings(t)
	for _, mode := range []Mode{ModeCRC, ModeSecure} {
		t.Run(string(mode), func(t *testing.T) {
			var revoked atomic.Bool
			got := make(chan []byte, 4)
			srv := authMessenger(t, "osd.0", &AuthOptions{Keyring: keyring("osd.0"), Modes: []Mode{mode},
				Authorize: func(_ context.Context, peer EntityName, _ *x509.Certificate) error {
					if revoked.Load() {
						return errors.New(string(peer) + " has no auth record")
					}
					return nil
				}}, DispatchFunc(func(m *Message) { got <- bytes.Clone(m.Data); m.Release() }))
			addr := listenLocal(t, srv)
			cli := authMessenger(t, "osd.1", &AuthOptions{Keyring: keyring("osd.1"), Modes: []Mode{mode}}, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			results := make(chan *auth.Result, 4)
			cli.afterDialAuth = func(res *auth.Result) { results <- res }
			session := func(payload string) (*auth.Result, error) {
				c, err := cli.Connect(ctx, addr, "osd.0")
				if err != nil {
					return nil, err
				}
				defer c.Close()
				if err := c.WaitReady(ctx); err != nil {
					return <-results, err
				}
				if err := c.Send(ctx, NewMessage(1, nil, []byte(payload))); err != nil {
					return nil, err
				}
				select {
				case b := <-got:
					if string(b) != payload {
						t.Fatalf("delivered %q, want %q", b, payload)
					}
				case <-ctx.Done():
					t.Fatal("the message never arrived")
				}
				return <-results, nil
			}
			first, err := session("first")
			if err != nil {
				t.Fatal(err)
			}
			second, err := session("second")
			if err != nil {
				t.Fatal(err)
			}
			if first.Resumed() || !second.Resumed() {
				t.Fatalf("resumed: first %v, second %v; want the second only", first.Resumed(), second.Resumed())
			}
			k1, err := first.SessionKeys([]byte("test"), 32)
			if err != nil {
				t.Fatal(err)
			}
			k2, err := second.SessionKeys([]byte("test"), 32)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(k1, k2) {
				t.Fatal("the resumed session has the first's keys")
			}
			if second.Peer != "osd.0" || second.PeerCert == nil {
				t.Fatalf("resumed session's peer %q (certificate %v)", second.Peer, second.PeerCert != nil)
			}
			// A dialer with NoResumption keeps no ticket: each of its
			// sessions is a full handshake.
			full := authMessenger(t, "osd.2", &AuthOptions{Keyring: keyring("osd.2"), Modes: []Mode{mode}, NoResumption: true}, nil)
			full.afterDialAuth = func(res *auth.Result) { results <- res }
			for range 2 {
				c, err := full.Connect(ctx, addr, "osd.0")
				if err != nil {
					t.Fatal(err)
				}
				if err := c.WaitReady(ctx); err != nil {
					t.Fatal(err)
				}
				c.Close()
				if res := <-results; res.Resumed() {
					t.Fatal("a session of a dialer with NoResumption resumed")
				}
			}
			revoked.Store(true)
			if _, err := session("third"); !errors.Is(err, ErrAuth) {
				t.Fatalf("a revoked peer's resumed session: %v, want ErrAuth", err)
			}
		})
	}
}

// TestSetKeyring: once the acceptor refuses a dialer's old certificate (a
// key rotated at the mon), the dialer's sessions fail, resumed ones
// included, until SetKeyring gives it the new keyring; its next session is
// a full handshake with the new certificate. SetKeyring refuses another
// entity's keyring, one under another CA, and a messenger without auth.
func TestSetKeyring(t *testing.T) {
	keyring := testKeyrings(t)
	old, rotated := keyring("osd.1"), keyring("osd.1")
	var current atomic.Pointer[x509.Certificate]
	current.Store(old.Cert)
	seen := make(chan *x509.Certificate, 8)
	srv := authMessenger(t, "osd.0", &AuthOptions{Keyring: keyring("osd.0"),
		Authorize: func(_ context.Context, peer EntityName, cert *x509.Certificate) error {
			seen <- cert
			if !cert.Equal(current.Load()) {
				return errors.New(string(peer) + "'s key was rotated")
			}
			return nil
		}}, nil)
	addr := listenLocal(t, srv)
	cli := authMessenger(t, "osd.1", &AuthOptions{Keyring: old}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	results := make(chan *auth.Result, 8)
	cli.afterDialAuth = func(res *auth.Result) { results <- res }
	session := func() (*auth.Result, *x509.Certificate, error) {
		c, err := cli.Connect(ctx, addr, "osd.0")
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		err = c.WaitReady(ctx)
		return <-results, <-seen, err
	}
	if _, cert, err := session(); err != nil || !cert.Equal(old.Cert) {
		t.Fatalf("the first session: %v", err)
	}
	current.Store(rotated.Cert)
	if res, _, err := session(); !errors.Is(err, ErrAuth) || !res.Resumed() {
		t.Fatalf("a session with the rotated-out key: %v (resumed %v), want ErrAuth on a resumption", err, res.Resumed())
	}
	if err := cli.SetKeyring(rotated); err != nil {
		t.Fatal(err)
	}
	res, cert, err := session()
	if err != nil || res.Resumed() || !cert.Equal(rotated.Cert) {
		t.Fatalf("a session after SetKeyring: %v (resumed %v, the new certificate %v)", err, res.Resumed(), cert.Equal(rotated.Cert))
	}

	otherCA := testKeyrings(t)("osd.1")
	plain := authMessenger(t, "osd.5", nil, nil)
	for what, err := range map[string]error{
		"another entity's": cli.SetKeyring(keyring("osd.2")),
		"another CA's":     cli.SetKeyring(otherCA),
		"none":             cli.SetKeyring(nil),
		"without auth":     plain.SetKeyring(keyring("osd.5")),
	} {
		if err == nil {
			t.Errorf("SetKeyring with %s keyring: no error", what)
		}
	}
	if res, cert, err := session(); err != nil || !cert.Equal(rotated.Cert) || !res.Resumed() {
		t.Fatalf("after refused SetKeyrings: %v (resumed %v)", err, res.Resumed())
	}
}

// TestSetKeyringAcceptor: an acceptor that takes up a rotated keyring
// seals no more resumptions with its old certificate: a dialer holding a
// ticket from before makes a full handshake and sees the new one, where
// resuming would have shown it the old one, which it refuses once rotated.
// And a dialer whose resumed handshake it refused itself forgets that
// session: its next dial is a full handshake, not the same refusal.
func TestSetKeyringAcceptor(t *testing.T) {
	keyring := testKeyrings(t)
	old, rotated := keyring("osd.0"), keyring("osd.0")
	var current atomic.Pointer[x509.Certificate]
	current.Store(old.Cert)
	var refuseOnce atomic.Bool
	srv := authMessenger(t, "osd.0", &AuthOptions{Keyring: old}, nil)
	addr := listenLocal(t, srv)
	cli := authMessenger(t, "osd.1", &AuthOptions{Keyring: keyring("osd.1"),
		Authorize: func(_ context.Context, peer EntityName, cert *x509.Certificate) error {
			if !cert.Equal(current.Load()) || refuseOnce.CompareAndSwap(true, false) {
				return errors.New(string(peer) + "'s certificate is not its current one")
			}
			return nil
		}}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	results := make(chan *auth.Result, 8)
	cli.afterDialAuth = func(res *auth.Result) { results <- res }
	session := func() (*auth.Result, error) {
		c, err := cli.Connect(ctx, addr, "osd.0")
		if err != nil {
			return nil, err
		}
		defer c.Close()
		err = c.WaitReady(ctx)
		return <-results, err
	}
	for i := range 2 {
		if res, err := session(); err != nil || res.Resumed() != (i == 1) {
			t.Fatalf("session %d before the rotation: %v (resumed %v)", i, err, res.Resumed())
		}
	}
	current.Store(rotated.Cert)
	if err := srv.SetKeyring(rotated); err != nil {
		t.Fatal(err)
	}
	res, err := session()
	if err != nil || res.Resumed() || !res.PeerCert.Equal(rotated.Cert) {
		t.Fatalf("a dialer with a ticket from before the acceptor's rotation: %v (resumed %v)", err, res.Resumed())
	}
	if res, err := session(); err != nil || !res.Resumed() {
		t.Fatalf("the session after: %v (resumed %v), want a resumption of the new one", err, res.Resumed())
	}
	refuseOnce.Store(true)
	if res, err := session(); !errors.Is(err, ErrAuth) || !res.Resumed() {
		t.Fatalf("a resumed handshake the dialer refuses: %v (resumed %v)", err, res.Resumed())
	}
	if res, err := session(); err != nil || res.Resumed() {
		t.Fatalf("the dial after a refused resumption: %v (resumed %v), want a full handshake", err, res.Resumed())
	}
}

// authMessenger is a messenger of entity name over TCP for these tests,
// authenticated with a (nil: not), d its dispatcher (nil: one that
// releases what comes), shut down when the test ends.
func authMessenger(t *testing.T, name string, a *AuthOptions, d Dispatcher) *Messenger {
	t.Helper()
	if d == nil {
		d = DispatchFunc(func(m *Message) { m.Release() })
	}
	m, err := New(Options{Name: EntityName(name), Transports: tcpOnly, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Dispatcher: d, Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

// listenLocal has m listen on a free loopback port and returns its address.
func listenLocal(t *testing.T, m *Messenger) string {
	t.Helper()
	addr, err := m.Listen(t.Context(), "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
