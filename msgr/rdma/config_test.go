//go:build rdma

package rdma

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestWriteChunkDefaults checks where RDMA writes are split by default:
// on tcp, which copies into its socket inside fi_write, and nowhere else;
// that Config overrides the default.
func TestWriteChunkDefaults(t *testing.T) {
	for _, c := range []struct {
		prov  string
		chunk int
		want  int
	}{
		{prov: "tcp", want: DefaultWriteChunk},
		{prov: "sockets", want: 0},
		{prov: "verbs", want: 0},
		{prov: "efa", want: 0},
		{prov: "tcp", chunk: -1, want: 0},
		{prov: "verbs", chunk: 1 << 20, want: 1 << 20},
		{prov: "tcp", chunk: 65000, want: 65000},
	} {
		tr := NewTransport("tcp", Config{WriteChunk: c.chunk})
		if got := tr.cfg.writeChunk(c.prov); got != c.want {
			t.Errorf("%s with WriteChunk %d: writes of %d bytes, want %d", c.prov, c.chunk, got, c.want)
		}
	}
}

// TestNewTransportIgnoresEnvironment checks that the constructor takes
// nothing from the environment: not the provider, not the knobs a binary
// reads at its edge (msgr/transports).
func TestNewTransportIgnoresEnvironment(t *testing.T) {
	t.Setenv("FI_PROVIDER", "sockets")
	t.Setenv("OSPREY_RDMA_RENDEZVOUS", "read")
	t.Setenv("OSPREY_RDMA_WRITE_CHUNK", "65000")
	tr := NewTransport("tcp", Config{})
	if tr.prov != "tcp" || tr.cfg.Rendezvous != RendezvousAuto || tr.cfg.WriteChunk != 0 {
		t.Fatalf("provider %q, rendezvous %v, write chunk %d: want tcp, auto, 0", tr.prov, tr.cfg.Rendezvous, tr.cfg.WriteChunk)
	}
}

// TestFIProviderConflict: an address whose provider FI_PROVIDER leaves out
// fails its Listen and Dial with a ProviderConflictError naming both,
// before libfabric is asked (which would load only FI_PROVIDER's providers
// for the rest of the process).
func TestFIProviderConflict(t *testing.T) {
	t.Setenv("FI_PROVIDER", "tcp")
	tr := NewTransport("verbs", Config{})
	defer tr.Close()
	_, lerr := tr.Listen(t.Context(), "127.0.0.1:0", wire.LinkOptions{})
	_, derr := tr.Dial(t.Context(), "127.0.0.1:1", wire.LinkOptions{})
	for _, err := range []error{lerr, derr} {
		var pc *ProviderConflictError
		if !errors.As(err, &pc) || pc.Scheme != "rdma+verbs" || pc.FIProvider != "tcp" {
			t.Fatalf("err = %v, want a ProviderConflictError for rdma+verbs and FI_PROVIDER=tcp", err)
		}
		if !strings.Contains(err.Error(), `FI_PROVIDER="tcp"`) || !strings.Contains(err.Error(), `"verbs"`) {
			t.Errorf("error does not name both providers: %v", err)
		}
	}
}

// TestProviderAllowed follows libfabric's FI_PROVIDER filter syntax.
func TestProviderAllowed(t *testing.T) {
	for _, c := range []struct {
		filter, prov string
		want         bool
	}{
		{"", "verbs", true},
		{"tcp", "tcp", true},
		{"tcp", "verbs", false},
		{"TCP", "tcp", true},
		{"verbs,tcp", "tcp", true},
		{"verbs, tcp", "tcp", true},
		{"verbs,sockets", "tcp", false},
		{"^tcp", "tcp", false},
		{"^tcp", "verbs", true},
		{"^tcp,verbs", "verbs", false},
		{"tcpx", "tcp", false},
	} {
		if got := providerAllowed(c.filter, c.prov); got != c.want {
			t.Errorf("FI_PROVIDER=%q, provider %q: allowed %v, want %v", c.filter, c.prov, got, c.want)
		}
	}
}

// TestSendQueueTooSmall: a link whose sends and RDMA operations could
// outnumber the provider's send queue (256 entries on tcp) is refused
// with an error that says so, rather than left to posts that fail with
// FI_EAGAIN and hold back every link of its domain.
func TestSendQueueTooSmall(t *testing.T) {
	opts := wire.LinkOptions{RecvWindow: 8, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	tr, ln := testListener(t)
	defer tr.Close()
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := NewTransport("tcp", Config{SendSlots: 1000, BufSize: 1024})
	defer big.Close()
	l, err := big.Dial(ctx, ln.Addr(), opts)
	if err == nil {
		l.Close()
		t.Fatal("a link of 1000 send slots dialed")
	}
	if !strings.Contains(err.Error(), "more than the provider's send queue of") {
		t.Fatalf("dial: %v, want the send queue named", err)
	}
	// The defaults fit.
	l, err = tr.Dial(ctx, ln.Addr(), opts)
	if err != nil {
		t.Fatalf("a link of the default send slots: %v", err)
	}
	l.Close()
}
