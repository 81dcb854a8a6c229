package msgr_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// expiredKeyring is a keyring for name that ca signed but whose
// certificate ran out an hour ago: what an operator holds after a
// credential's validity ended.
func expiredKeyring(t *testing.T, ca *msgrtest.TestCA, name string) *auth.Keyring {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{Organization: []string{"Osprey"}, CommonName: name},
		NotBefore:             time.Now().Add(-48 * time.Hour),
		NotAfter:              time.Now().Add(-time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.CA.Cert, pub, ca.CA.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &auth.Keyring{Entity: name, Cert: cert, Key: key, CA: ca.CA.Cert}
}

// TestAuthExpiredCredential: a certificate past its validity is refused
// on either side of the handshake, whoever presents it, with a reason
// that says so; nothing it sends is delivered and the server goes on
// serving others.
func TestAuthExpiredCredential(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	addr, got, _ := peerServer(t, withKeyring(t, ca, nil))

	old := tcpEnv.NewMessenger(t, "client.old", msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Auth = &msgr.AuthOptions{Keyring: expiredKeyring(t, ca, "client.old")}
	})
	c, err := old.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, c, got); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a dialer with an expired certificate: %v", err)
	}
	select {
	case p := <-got:
		t.Fatalf("a message of %s was delivered", p)
	default:
	}

	// The server is unharmed: a valid credential still gets through.
	ok := tcpEnv.NewMessenger(t, "client.ok", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err = ok.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sendOne(t, c, got); err != nil || p != "client.ok" {
		t.Fatalf("a valid client after the refusal: %q %v", p, err)
	}

	// A server whose certificate expired is refused by the dialer: the
	// check is mutual. (A new messenger: ok's session with osd.0 is the
	// first server's.)
	stale, sgot, slogs := peerServer(t, func(o *msgr.Options) {
		o.Auth = &msgr.AuthOptions{Keyring: expiredKeyring(t, ca, "osd.0")}
	})
	fresh := tcpEnv.NewMessenger(t, "client.fresh", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err = fresh.Connect(context.Background(), stale, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, c, sgot); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a server with an expired certificate: %v; its log:\n%s", err, slogs.String())
	}
}
