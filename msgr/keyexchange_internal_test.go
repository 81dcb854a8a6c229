package msgr

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
)

// TestDialerKeyExchange: a dialer that may end up in secure mode agrees on
// its keys with the post-quantum hybrid; only one that offers crc alone
// (its session cannot be sealed) uses X25519 alone.
func TestDialerKeyExchange(t *testing.T) {
	keyring, quiet := testKeyrings(t), slog.New(slog.NewTextHandler(io.Discard, nil))
	drop := DispatchFunc(func(m *Message) { m.Release() })
	for _, tc := range []struct {
		offer []Mode
		want  tls.CurveID
	}{
		{[]Mode{ModeCRC}, tls.X25519},
		{[]Mode{ModeSecure}, tls.X25519MLKEM768},
		{[]Mode{ModeCRC, ModeSecure}, tls.X25519MLKEM768},
	} {
		srv, err := New(Options{Name: "osd.0", Transports: tcpOnly, Logger: quiet, Dispatcher: drop,
			Auth: &AuthOptions{Keyring: keyring("osd.0"), Modes: []Mode{ModeCRC, ModeSecure}}})
		if err != nil {
			t.Fatal(err)
		}
		addr, err := srv.Listen(t.Context(), "tcp://127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cli, err := New(Options{Name: "osd.1", Transports: tcpOnly, Logger: quiet, Dispatcher: drop,
			Auth: &AuthOptions{Keyring: keyring("osd.1"), Modes: tc.offer}})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan tls.CurveID, 4)
		cli.afterDialAuth = func(res *auth.Result) { got <- res.KeyExchange() }
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		c, err := cli.Connect(ctx, addr, "osd.0")
		if err == nil {
			err = c.WaitReady(ctx)
		}
		if err != nil {
			t.Fatalf("offering %v: %v", tc.offer, err)
		}
		if kx := <-got; kx != tc.want {
			t.Errorf("offering %v: key exchange %v, want %v", tc.offer, kx, tc.want)
		}
		cli.Shutdown(ctx)
		srv.Shutdown(ctx)
		cancel()
	}
}

// testKeyrings issues keyrings from a CA of the test's own.
func testKeyrings(t *testing.T) func(name string) *auth.Keyring {
	ca, err := auth.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) *auth.Keyring {
		k, err := ca.Issue(name)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
}
