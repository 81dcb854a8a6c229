package msgr_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
)

// newWith is a messenger on ts alone, shut down at cleanup.
func newWith(t *testing.T, ts []wire.Transport) *msgr.Messenger {
	t.Helper()
	m, err := msgr.New(msgr.Options{Name: "osd.0", Transports: ts,
		Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// TestNoTransportForScheme: a messenger has only the transports it was
// given, and an address of any other scheme fails Listen and Connect with
// ErrNoTransport, naming the scheme.
func TestNoTransportForScheme(t *testing.T) {
	for _, c := range []struct {
		name, addr, want string
		ts               []wire.Transport
	}{
		{"none given", "tcp://127.0.0.1:0", `"tcp"`, nil},
		{"another scheme", "mem://x", `"mem"`, msgr.TCPOnly},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newWith(t, c.ts)
			_, lerr := m.Listen(t.Context(), c.addr)
			_, cerr := m.Connect(t.Context(), c.addr, "osd.1")
			for _, err := range []error{lerr, cerr} {
				if !errors.Is(err, msgr.ErrNoTransport) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("err = %v, want ErrNoTransport naming %s", err, c.want)
				}
			}
		})
	}
}

// TestMissingTransportFailsAtOnce: a wire.MissingTransport's scheme fails
// Listen and Connect at once with ErrNoTransport and the stand-in's own
// error, and Connect leaves no session dialing in the background.
func TestMissingTransportFailsAtOnce(t *testing.T) {
	why := errors.New("frob transport not built in")
	m := newWith(t, append([]wire.Transport{wire.MissingTransport{Name: "frob", Err: why}}, msgr.TCPOnly...))
	_, lerr := m.Listen(t.Context(), "frob://127.0.0.1:0")
	_, cerr := m.Connect(t.Context(), "frob://127.0.0.1:1", "osd.1")
	for _, err := range []error{lerr, cerr} {
		if !errors.Is(err, msgr.ErrNoTransport) || !errors.Is(err, why) {
			t.Errorf("err = %v, want ErrNoTransport wrapping %v", err, why)
		}
	}
	for c := range m.Conns() {
		t.Errorf("session with %s left after a failed Connect", c.Peer())
	}
}

// TestCoreImportsNoTransport: package msgr links no transport, with or
// without -tags rdma, so a library user links only those it hands in.
func TestCoreImportsNoTransport(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	const mod = "github.com/ospreystore/osprey/msgr/"
	for _, tags := range []string{"", "rdma"} {
		out, err := exec.Command(goCmd, "list", "-deps", "-tags="+tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags=%q: %v", tags, err)
		}
		deps := strings.Fields(string(out))
		if !strings.Contains(string(out), mod+"wire\n") {
			t.Fatalf("go list -deps -tags=%q does not list msgr/wire: %q", tags, deps)
		}
		for _, d := range deps {
			if d == mod+"tcp" || d == mod+"rdma" || d == mod+"transports" {
				t.Errorf("with -tags=%q, msgr depends on %s", tags, d)
			}
		}
	}
}
