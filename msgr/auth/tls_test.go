package auth

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"
)

// pipe is a Flights pair: what one side sends the other receives.
type pipe struct {
	in, out chan []byte
	sent    *int
	tamper  func([]byte) []byte // applied to what this side sends
}

func newPipe() (*pipe, *pipe) {
	a, b := make(chan []byte, 8), make(chan []byte, 8)
	na, nb := 0, 0
	return &pipe{in: a, out: b, sent: &na}, &pipe{in: b, out: a, sent: &nb}
}

func (p *pipe) Send(b []byte) error {
	*p.sent++
	if p.tamper != nil {
		b = p.tamper(b)
	}
	p.out <- b
	return nil
}

func (p *pipe) Recv() ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-time.After(10 * time.Second):
		return nil, errors.New("pipe: nothing came")
	}
}

type outcome struct {
	r   *Result
	err error
}

// handshake runs Dial with dk and Accept with ak over a pipe.
func handshake(t *testing.T, dk, ak *Keyring, tamper func([]byte) []byte) (dial, acc outcome, dialFlights int) {
	t.Helper()
	return handshakeWith(t, dk, ak, tamper, DialOptions{})
}

// handshakeWith is handshake with the dialer's options.
func handshakeWith(t *testing.T, dk, ak *Keyring, tamper func([]byte) []byte, opts DialOptions) (dial, acc outcome, dialFlights int) {
	t.Helper()
	return handshakeBoth(t, dk, ak, tamper, opts, AcceptOptions{})
}

// handshakeBoth is handshake with both sides' options.
func handshakeBoth(t *testing.T, dk, ak *Keyring, tamper func([]byte) []byte, opts DialOptions, aopts AcceptOptions) (dial, acc outcome, dialFlights int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dp, ap := newPipe()
	dp.tamper = tamper
	done := make(chan outcome, 1)
	go func() {
		r, err := Accept(ctx, ak, ap, aopts)
		if err != nil {
			close(ap.out) // the dialer's Recv then sees a closed carrier
		}
		done <- outcome{r, err}
	}()
	r, err := Dial(ctx, dk, dp, opts)
	if err != nil {
		close(dp.out)
	}
	dial = outcome{r, err}
	acc = <-done
	return dial, acc, *dp.sent
}

func TestHandshakeMutual(t *testing.T) {
	ca := mustCA(t)
	client, osd := mustIssue(t, ca, "client.backup"), mustIssue(t, ca, "osd.3")
	d, a, flights := handshake(t, client, osd, nil)
	if d.err != nil || a.err != nil {
		t.Fatalf("dial %v, accept %v", d.err, a.err)
	}
	if d.r.Peer != "osd.3" || a.r.Peer != "client.backup" {
		t.Fatalf("the dialer sees %q, the acceptor %q", d.r.Peer, a.r.Peer)
	}
	if Serial(a.r.PeerCert) != Serial(client.Cert) {
		t.Fatal("the acceptor saw another certificate")
	}
	if flights != 2 {
		t.Fatalf("the dialer sent %d flights, want 2 (hello, then certificate and finished)", flights)
	}
	// Both sides derive the same keys for the same binding, other keys
	// for another binding.
	kd, err := d.r.SessionKeys([]byte("outer frames"), 2*DirectionKeyLen)
	if err != nil {
		t.Fatal(err)
	}
	ka, _ := a.r.SessionKeys([]byte("outer frames"), 2*DirectionKeyLen)
	kx, _ := a.r.SessionKeys([]byte("tampered frames"), 2*DirectionKeyLen)
	if !bytes.Equal(kd, ka) || bytes.Equal(kd, kx) {
		t.Fatal("session keys: the sides disagree, or the binding does not bind")
	}
	// A second session of the same two entities gets other keys.
	d2, _, _ := handshake(t, client, osd, nil)
	k2, _ := d2.r.SessionKeys([]byte("outer frames"), 2*DirectionKeyLen)
	if bytes.Equal(kd, k2) {
		t.Fatal("two sessions share keys")
	}
}

func TestHandshakeRefuses(t *testing.T) {
	ca, rogue := mustCA(t), mustCA(t)
	good := mustIssue(t, ca, "osd.1")
	impostor := mustIssue(t, rogue, "osd.1") // same name, another CA

	// An impostor dialing: the acceptor refuses it.
	_, a, _ := handshake(t, impostor, good, nil)
	if !errors.Is(a.err, ErrAuthFailed) {
		t.Fatalf("acceptor took an impostor: %v", a.err)
	}
	// An impostor accepting: the dialer refuses it.
	d, _, _ := handshake(t, good, impostor, nil)
	if !errors.Is(d.err, ErrAuthFailed) {
		t.Fatalf("dialer took an impostor: %v", d.err)
	}
	// A certificate shown with another key: its holder cannot prove it.
	stolen := *good
	stolen.Key = mustIssue(t, ca, "osd.2").Key
	_, a, _ = handshake(t, &stolen, mustIssue(t, ca, "osd.5"), nil)
	if a.err == nil {
		t.Fatal("acceptor took a certificate whose key the dialer lacks")
	}
	// A flipped bit in the dialer's second flight: refused.
	n := 0
	d, a, _ = handshake(t, good, mustIssue(t, ca, "osd.5"), func(b []byte) []byte {
		n++
		if n == 2 {
			b = bytes.Clone(b)
			b[len(b)-5] ^= 1
		}
		return b
	})
	if a.err == nil {
		t.Fatal("acceptor finished on a tampered flight")
	}
}

// TestHandshakeKeyExchange: a session that may be sealed agrees on its
// keys with the post-quantum hybrid; only a cleartext one uses X25519
// alone, and it is authenticated as fully.
func TestHandshakeKeyExchange(t *testing.T) {
	ca := mustCA(t)
	client, osd := mustIssue(t, ca, "client.backup"), mustIssue(t, ca, "osd.3")
	for _, tc := range []struct {
		opts DialOptions
		want tls.CurveID
	}{
		{DialOptions{}, tls.X25519MLKEM768},
		{DialOptions{CleartextSession: true}, tls.X25519},
	} {
		d, a, _ := handshakeWith(t, client, osd, nil, tc.opts)
		if d.err != nil || a.err != nil {
			t.Fatalf("%+v: dial %v, accept %v", tc.opts, d.err, a.err)
		}
		if d.r.state.CurveID != tc.want || a.r.state.CurveID != tc.want {
			t.Errorf("%+v: key exchange %v (acceptor %v), want %v", tc.opts, d.r.state.CurveID, a.r.state.CurveID, tc.want)
		}
		if d.r.Peer != "osd.3" || a.r.Peer != "client.backup" {
			t.Errorf("%+v: peers %q and %q", tc.opts, d.r.Peer, a.r.Peer)
		}
	}
	// A rogue CA's credential is refused on the cleartext path too.
	rogue := mustIssue(t, mustCA(t), "client.backup")
	if _, a, _ := handshakeWith(t, rogue, osd, nil, DialOptions{CleartextSession: true}); !errors.Is(a.err, ErrAuthFailed) {
		t.Errorf("a rogue dialer, cleartext session: accept %v", a.err)
	}
}

// BenchmarkHandshake measures one mutual TLS 1.3 handshake, both sides in
// this process: what authentication adds to each new link, for a session
// that may be sealed (the hybrid key exchange) and a cleartext one.
func BenchmarkHandshake(b *testing.B) {
	ca := mustCA(b)
	dk, ak := mustIssue(b, ca, "client.a"), mustIssue(b, ca, "osd.0")
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		opts DialOptions
	}{{"sealable", DialOptions{}}, {"cleartext", DialOptions{CleartextSession: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dp, ap := newPipe()
				done := make(chan error, 1)
				go func() { _, err := Accept(ctx, ak, ap, AcceptOptions{}); done <- err }()
				if _, err := Dial(ctx, dk, dp, bc.opts); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// resumeHandshake runs Dial and Accept with resumption state on both
// sides, then hands the dialer the acceptor's ticket, as the messenger
// does.
func resumeHandshake(t *testing.T, dk, ak *Keyring, dres, ares *Resumption) (dial, acc outcome) {
	t.Helper()
	dial, acc, _ = handshakeBoth(t, dk, ak, nil, DialOptions{Resume: dres, Peer: "osd.3"}, AcceptOptions{Resume: ares})
	if dial.err != nil || acc.err != nil {
		t.Fatalf("dial %v, accept %v", dial.err, acc.err)
	}
	dial.r.TakeTicket(acc.r.Unsent)
	return dial, acc
}

// TestTicketKeyRotation: a ticket resumes while the key that sealed it
// still opens tickets, though a newer key seals them by then; once that
// key is past its lifetime the same dialer gets a full handshake, and a
// ticket from the newer key still resumes.
func TestTicketKeyRotation(t *testing.T) {
	ca := mustCA(t)
	client, osd := mustIssue(t, ca, "client.backup"), mustIssue(t, ca, "osd.3")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ares := NewResumption()
	ares.KeyRotation, ares.KeyLifetime = time.Hour, 3*time.Hour
	ares.now = func() time.Time { return now }
	early, late := NewResumption(), NewResumption()

	resumed := func(step string, dres *Resumption, want bool) {
		t.Helper()
		d, a := resumeHandshake(t, client, osd, dres, ares)
		if d.r.Resumed() != want || a.r.Resumed() != want {
			t.Fatalf("%s: resumed %v (acceptor %v), want %v", step, d.r.Resumed(), a.r.Resumed(), want)
		}
		if d.r.Peer != "osd.3" || a.r.Peer != "client.backup" {
			t.Fatalf("%s: peers %q and %q", step, d.r.Peer, a.r.Peer)
		}
	}
	// Both dialers take a ticket sealed under the first key.
	resumed("early's first session", early, false)
	resumed("late's first session", late, false)
	// Two hours on a second key seals tickets; the first still opens
	// early's, which early swaps for one under the second key.
	now = now.Add(2 * time.Hour)
	resumed("early, first key rotated out", early, true)
	// Past the first key's lifetime: late's ticket opens no more, so late
	// authenticates in full; early's, under the second key, resumes.
	now = now.Add(time.Hour)
	resumed("late, first key expired", late, false)
	resumed("early, second key", early, true)
	if n := len(ares.ticketKeys()); n != 2 {
		t.Fatalf("the acceptor holds %d ticket keys, want 2 (the expired one dropped)", n)
	}
}
