package msgr_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
)

// withKeyring gives a messenger ca's keyring for its name, and az as its
// Authorize.
func withKeyring(t *testing.T, ca *msgrtest.TestCA, az func(context.Context, msgr.EntityName, *x509.Certificate) error) func(*msgr.Options) {
	return func(o *msgr.Options) {
		o.Auth = &msgr.AuthOptions{Keyring: ca.Keyring(t, o.Name), Authorize: az}
	}
}

// sendOne sends one message on c and waits for the server's recorder to
// dispatch it, returning the peer the server's Conn names.
func sendOne(t *testing.T, c *msgr.Conn, got chan msgr.EntityName) (msgr.EntityName, error) {
	t.Helper()
	if err := c.Send(context.Background(), msgr.NewMessage(1, []byte("hi"), nil)); err != nil {
		return "", err
	}
	select {
	case p := <-got:
		return p, nil
	case <-c.Done():
		return "", c.Err()
	case <-time.After(20 * time.Second):
		t.Fatal("the message never arrived")
	}
	return "", nil
}

// peerServer is a server that reports the peer of each message it gets.
func peerServer(t *testing.T, tweak func(*msgr.Options)) (string, chan msgr.EntityName, *syncBuffer) {
	got := make(chan msgr.EntityName, 16)
	d := msgr.DispatchFunc(func(m *msgr.Message) {
		got <- m.Conn().Peer()
		m.Release()
	})
	_, addr, logs := newLoggedServer(t, d, tweak)
	return addr, got, logs
}

func TestAuthSessions(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	addr, got, _ := peerServer(t, withKeyring(t, ca, nil))

	// Both sides authenticate: the server's Conn names the certificate's
	// entity.
	cli := tcpEnv.NewMessenger(t, "client.backup", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sendOne(t, c, got); err != nil || p != "client.backup" {
		t.Fatalf("peer %q, %v", p, err)
	}

	// A keyring of another cluster's CA: refused, and told why.
	rogue := msgrtest.NewTestCA(t)
	imp := tcpEnv.NewMessenger(t, "client.evil", msgrtest.NewRecorder(t), withKeyring(t, rogue, nil))
	c, err = imp.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, c, got); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an impostor's session: %v", err)
	}

	// No keyring: a server that requires one refuses.
	plain := tcpEnv.NewMessenger(t, "client.plain", msgrtest.NewRecorder(t), nil)
	c, err = plain.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, c, got); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "requires tls13") {
		t.Fatalf("a dialer without a keyring: %v", err)
	}
}

// TestAuthNoDowngrade: a dialer with a keyring never settles for "none",
// so nobody can talk it out of authenticating.
func TestAuthNoDowngrade(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	addr, got, _ := peerServer(t, nil) // authenticates nobody
	cli := tcpEnv.NewMessenger(t, "client.a", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, c, got); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "does none") {
		t.Fatalf("an authenticating dialer at a server without auth: %v", err)
	}
}

// TestAuthorizeRefuses: Authorize's verdict is the reason the peer hears,
// on either side.
func TestAuthorizeRefuses(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	onlyOSDs := func(_ context.Context, p msgr.EntityName, cert *x509.Certificate) error {
		if p.Type() != "osd" {
			return fmt.Errorf("%s not allowed on the cluster network", p)
		}
		if auth.Serial(cert) == "" {
			return errors.New("no serial")
		}
		return nil
	}
	addr, got, logs := peerServer(t, withKeyring(t, ca, onlyOSDs))
	osd := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err := osd.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sendOne(t, c, got); err != nil || p != "osd.1" {
		t.Fatalf("an OSD: %q %v", p, err)
	}
	cli := tcpEnv.NewMessenger(t, "client.x", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err = cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, c, got); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "client.x not allowed on the cluster network") {
		t.Fatalf("a client on the cluster network: %v", err)
	}
	msgrtest.Eventually(t, 5*time.Second, "the refusal in the server's log", func() bool {
		return strings.Contains(logs.String(), "not allowed on the cluster network")
	})

	// The dialer's Authorize refuses the server it reached.
	picky := tcpEnv.NewMessenger(t, "osd.2", msgrtest.NewRecorder(t), withKeyring(t, ca, func(_ context.Context, p msgr.EntityName, _ *x509.Certificate) error {
		return fmt.Errorf("%s is not on my list", p)
	}))
	c, err = picky.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
		if err := c.Err(); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "osd.0 is not on my list") {
			t.Fatalf("the dialer refusing the server: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a dialer kept a session with a server its Authorize refuses")
	}
}

// TestAuthClaimMustMatchCertificate: a dialer whose HELLO claims osd.1
// while its certificate is client.x's is refused: names come from
// certificates, never from claims.
func TestAuthClaimMustMatchCertificate(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	addr, _, _ := peerServer(t, withKeyring(t, ca, nil))
	r := dialRaw(t, addr)
	r.banner()
	r.write(hsFrame(t, wire.TagHello, &msgrpb.Hello{EntityName: "osd.1", InstanceNonce: 1}))
	// The server answers HELLO with its own before it reads AUTH_REQUEST,
	// so every frame rawFlights reads is a TLS flight's.
	r.expect(wire.TagHello, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := auth.Dial(ctx, ca.Keyring(t, "client.x"), &rawFlights{r: r}, auth.DialOptions{}); err != nil {
		t.Fatalf("the TLS handshake itself should pass: %v", err)
	}
	var done msgrpb.AuthDone
	r.expect(wire.TagAuthDone, &done)
	if !strings.Contains(done.Refused, "claims to be osd.1 but its certificate is client.x's") {
		t.Fatalf("got %+v", &done)
	}
	r.waitClosed(10 * time.Second)
}

// rawFlights carries a raw dialer's TLS flights.
type rawFlights struct {
	r    *rawPeer
	sent int
}

func (f *rawFlights) Send(b []byte) error {
	f.sent++
	if f.sent == 1 {
		f.r.write(hsFrame(f.r.t, wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"tls13"}, Payload: b}))
	} else {
		f.r.write(hsFrame(f.r.t, wire.TagAuthMore, &msgrpb.AuthMore{Payload: b}))
	}
	return nil
}

func (f *rawFlights) Recv() ([]byte, error) {
	var more msgrpb.AuthMore
	f.r.expect(wire.TagAuthMore, &more)
	return more.Payload, nil
}

// BenchmarkAuthHandshake measures one authenticated session over TCP
// loopback, both ends in this process: Connect to ready (dial, banner,
// the TLS 1.3 handshake, session), then Close; "full" with both
// certificates each time (what `osprey bench msgr --auth` samples per
// row), "resumed" as a reconnect does it, both in crc mode (key exchange
// X25519); "full-secure" is "full" in secure mode (X25519MLKEM768, and the
// link's keys derived). cpu-µs/op is both ends' CPU per handshake, the
// figure to compare on a shared machine, where ns/op is mostly waiting
// for a core; goroutines/op counts the goroutines each one starts.
func BenchmarkAuthHandshake(b *testing.B) {
	ca := msgrtest.NewTestCA(b)
	for _, c := range []struct {
		name   string
		resume bool
		modes  []msgr.Mode
	}{{"full", false, nil}, {"resumed", true, nil}, {"full-secure", false, []msgr.Mode{msgr.ModeSecure}}} {
		b.Run(c.name, func(b *testing.B) {
			kr := func(o *msgr.Options) {
				o.Auth = &msgr.AuthOptions{Keyring: ca.Keyring(b, o.Name), NoResumption: !c.resume, Modes: c.modes}
			}
			srv := tcpEnv.NewMessenger(b, "osd.0", msgrtest.NewRecorder(b), kr)
			addr := tcpEnv.Listen(b, srv)
			cli := tcpEnv.NewMessenger(b, "osd.1", msgrtest.NewRecorder(b), kr)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0, g0 := processCPU(), goroutinesCreated()
			for b.Loop() {
				c, err := cli.Connect(ctx, addr, "osd.0")
				if err != nil {
					b.Fatal(err)
				}
				if err := c.WaitReady(ctx); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
		})
	}
}

// goroutinesCreated counts the goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// processCPU is the CPU time, user and system, the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
