package transports_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
)

// messenger is a messenger on ts, shut down at cleanup.
func messenger(t *testing.T, name msgr.EntityName, ts []wire.Transport, d msgr.Dispatcher) *msgr.Messenger {
	t.Helper()
	m, err := msgr.New(msgr.Options{Name: name, Dispatcher: d, Transports: ts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

// defaults is Default's set, closed at cleanup (after the messengers'
// shutdowns, which are registered later and so run first).
func defaults(t *testing.T) transports.Set {
	t.Helper()
	ts, err := transports.Default()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	return ts
}

// TestDefaultCarriesMessages: two messengers on the defaults talk over
// tcp, as the quick start in docs/messenger.md does.
func TestDefaultCarriesMessages(t *testing.T) {
	got := make(chan []byte, 1)
	srv := messenger(t, "osd.0", defaults(t), msgr.DispatchFunc(func(m *msgr.Message) {
		got <- append([]byte(nil), m.Front...)
		m.Release()
	}))
	addr, err := srv.Listen(t.Context(), "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli := messenger(t, "osd.1", defaults(t), msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }))
	c, err := cli.Connect(t.Context(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(t.Context(), msgr.NewMessage(1, []byte("hello"), nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != "hello" {
			t.Fatalf("got %q", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message in 10s")
	}
}

// TestDefaultSchemes: the build's defaults name tcp and every rdma+
// scheme, real with -tags rdma, stand-ins without.
func TestDefaultSchemes(t *testing.T) {
	var got []string
	for _, tr := range defaults(t) {
		got = append(got, tr.Scheme())
		if _, missing := tr.(wire.MissingTransport); missing == transports.RDMABuilt && tr.Scheme() != "tcp" {
			t.Errorf("%s: a stand-in is %v with RDMABuilt %v", tr.Scheme(), missing, transports.RDMABuilt)
		}
	}
	if want := []string{"tcp", "rdma+tcp", "rdma+sockets", "rdma+verbs"}; !slices.Equal(got, want) {
		t.Fatalf("schemes %q, want %q", got, want)
	}
}

// TestConfigFromEnv: the environment's knobs reach Config, and a value
// that does not parse is an error rather than the default.
func TestConfigFromEnv(t *testing.T) {
	t.Setenv("OSPREY_RDMA_RENDEZVOUS", "write")
	t.Setenv("OSPREY_RDMA_WRITE_CHUNK", "-1")
	cfg, err := transports.ConfigFromEnv()
	if err != nil || cfg != (transports.Config{RDMARendezvous: "write", RDMAWriteChunk: -1}) {
		t.Fatalf("ConfigFromEnv = %+v, %v", cfg, err)
	}
	t.Setenv("OSPREY_RDMA_WRITE_CHUNK", "many")
	if _, err := transports.ConfigFromEnv(); err == nil {
		t.Fatal("OSPREY_RDMA_WRITE_CHUNK=many: no error")
	}
	if _, err := transports.Default(); err == nil {
		t.Fatal("Default with OSPREY_RDMA_WRITE_CHUNK=many: no error")
	}
	t.Setenv("OSPREY_RDMA_WRITE_CHUNK", "")
	t.Setenv("OSPREY_RDMA_MEM_BUDGET", "256MiB")
	if cfg, err := transports.ConfigFromEnv(); err != nil || cfg.RDMAMemBudget != 256<<20 {
		t.Fatalf("OSPREY_RDMA_MEM_BUDGET=256MiB: ConfigFromEnv = %+v, %v", cfg, err)
	}
	t.Setenv("OSPREY_RDMA_MEM_BUDGET", "1MiB")
	_, err = transports.ConfigFromEnv()
	var bad *transports.BadRDMAMemBudgetError
	if !errors.As(err, &bad) || bad.Value != "1MiB" || !strings.Contains(err.Error(), "OSPREY_RDMA_MEM_BUDGET") {
		t.Fatalf("OSPREY_RDMA_MEM_BUDGET=1MiB: %v, want a BadRDMAMemBudgetError naming the variable", err)
	}
	if _, err := transports.Default(); !errors.As(err, &bad) {
		t.Fatalf("Default with OSPREY_RDMA_MEM_BUDGET=1MiB: %v, want a BadRDMAMemBudgetError", err)
	}
}

// TestParseRDMAMemBudget: bytes with or without a unit, 0 for the
// default; below the minimum, negative or not a size is an error that
// says what to give.
func TestParseRDMAMemBudget(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "16MiB": transports.MinRDMAMemBudget, "512MiB": 512 << 20,
		"4GiB": 4 << 30, "1073741824": 1 << 30, "2 GiB": 2 << 30, "100MB": 100_000_000} {
		if got, err := transports.ParseRDMAMemBudget(in); err != nil || got != want {
			t.Errorf("ParseRDMAMemBudget(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1", "-64MiB", "1", "15MiB", "16777215", "99999999999EiB", "1.5 furlongs"} {
		got, err := transports.ParseRDMAMemBudget(in)
		var bad *transports.BadRDMAMemBudgetError
		if !errors.As(err, &bad) || bad.Value != in {
			t.Errorf("ParseRDMAMemBudget(%q) = %d, %v; want a BadRDMAMemBudgetError", in, got, err)
		}
	}
	if _, err := transports.ParseRDMAMemBudget("1MiB"); err == nil || !strings.Contains(err.Error(), "at least 16 MiB") {
		t.Errorf("a budget below the minimum: %v, want an error that names the minimum", err)
	}
	for _, n := range []int64{-1, 1 << 20} {
		if _, err := transports.New(transports.Config{RDMAMemBudget: n}); err == nil {
			t.Errorf("New with RDMAMemBudget %d: no error", n)
		}
	}
}

// closer is a transport that counts its Close calls.
type closer struct {
	wire.Transport
	closed *int
}

func (c closer) Close() error { *c.closed++; return nil }

// TestSetCloseAndOrDefault: Set.Close closes the transports that are
// closers; OrDefault hands back what it was given with a release that
// leaves it alone, and its own defaults with one that closes them.
func TestSetCloseAndOrDefault(t *testing.T) {
	var n int
	given := transports.Set{closer{closed: &n}, wire.MissingTransport{Name: "x"}}
	ts, release, err := transports.OrDefault(given)
	if err != nil || len(ts) != 2 || ts[0] != given[0] {
		t.Fatalf("OrDefault(given) = %v, %v", ts, err)
	}
	release()
	if n != 0 {
		t.Fatalf("release closed the caller's transports %d times", n)
	}
	if err := given.Close(); err != nil || n != 1 {
		t.Fatalf("Close: %v, %d closes, want 1", err, n)
	}
	ts, release, err = transports.OrDefault(nil)
	if err != nil || len(ts) == 0 || ts[0].Scheme() != "tcp" {
		t.Fatalf("OrDefault(nil) = %v, %v", ts, err)
	}
	release()
}

// TestRDMAAddressErrors: an rdma+ address that this build cannot serve
// fails with an error that says why (nordma_test.go, rdma_test.go).
func TestRDMAAddressErrors(t *testing.T) {
	m := messenger(t, "osd.0", defaults(t), msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }))
	testRDMAAddress(t, m)
}
