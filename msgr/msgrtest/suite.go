package msgrtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
)

// Env describes a transport under test.
type Env struct {
	// Scheme is the address scheme: "tcp", "mem", "rdma+tcp", ...
	Scheme string
	// Host is the listen address without scheme; "127.0.0.1:0" for
	// socket transports, "" for mem (a fresh name is chosen).
	Host string
	// Transports returns the transports of each messenger (the in-memory
	// one must be shared by both ends). Nil: transports.Default(), fresh
	// for each messenger and closed after its shutdown.
	Transports func() []wire.Transport
	// Scale shrinks the heavy tests (message and connection counts) for
	// slow transports or -short; 1 is full size.
	Scale float64
	// Tweak adjusts every messenger's options before a test's own
	// tweaks (an RDMA env sets a smaller receive window, for example).
	Tweak func(*msgr.Options)
	// Skip names tests this transport cannot run, with the reason; the
	// reason is printed, so a skipped test is never a silent pass.
	Skip map[string]string
}

func (e Env) n(full int) int {
	s := e.Scale
	if s <= 0 {
		s = 1
	}
	if testing.Short() {
		s /= 4
	}
	return max(int(float64(full)*s), 1)
}

// Run runs the conformance suite: every msgr transport must pass it.
func Run(t *testing.T, env Env) {
	tests := []struct {
		name string
		fn   func(*testing.T, Env)
	}{
		{"Ordering", testOrdering},
		{"Bidirectional", testBidirectional},
		{"ExactlyOnceUnderFaults", testExactlyOnceUnderFaults},
		{"LossySemantics", testLossy},
		{"StalledReceiverFlowControl", testStalledReceiver},
		{"PayloadSizes", testPayloadSizes},
		{"LargeFronts", testLargeFronts},
		{"ConcurrentSenders", testConcurrentSenders},
		{"RepliesMatchedByTid", testRepliesMatchedByTid},
		{"ManyConnections", testManyConnections},
		{"PeerRestartIsRemoteReset", testPeerRestart},
		{"DialerRestartIsRemoteReset", testDialerRestart},
		{"SimultaneousConnect", testSimultaneousConnect},
		{"SimultaneousConnectUnreachable", testSimultaneousConnectUnreachable},
		{"KeepaliveRTT", testKeepalive},
		{"SilentPeerHoldingWindow", testSilentPeerHoldingWindow},
		{"SilentOldPeerHoldingWindow", testSilentOldPeerHoldingWindow},
		{"OversizedBothWays", testOversizedBothWays},
		{"CloseWithoutCredit", testCloseWithoutCredit},
		{"KeepalivesFullWindows", testKeepalivesFullWindows},
		{"CloseTellsPeer", testCloseTellsPeer},
		{"CloseWhileDownAccepted", func(t *testing.T, env Env) { testCloseWhileDown(t, env, false) }},
		{"CloseWhileDownDialed", func(t *testing.T, env Env) { testCloseWhileDown(t, env, true) }},
		{"CloseWhileDownNewSession", testCloseWhileDownNewSession},
		{"ShutdownLeavesNoGoroutines", testNoGoroutineLeak},
	}
	// The control-slot cases mostly wait out idle timeouts: they run side
	// by side, after the others (so not beside ShutdownLeavesNoGoroutines).
	parallel := map[string]bool{"SilentPeerHoldingWindow": true, "SilentOldPeerHoldingWindow": true,
		"OversizedBothWays": true, "CloseWithoutCredit": true, "KeepalivesFullWindows": true}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := env.Skip[tc.name]; ok {
				t.Skip(why)
			}
			if parallel[tc.name] {
				t.Parallel()
			}
			tc.fn(t, env)
		})
	}
}

// NewMessenger starts a messenger for env with test-friendly defaults.
func (e Env) NewMessenger(t testing.TB, name msgr.EntityName, d msgr.Dispatcher, tweak func(*msgr.Options)) *msgr.Messenger {
	t.Helper()
	o := msgr.Options{
		Name: name, Dispatcher: d, Logger: Logger(t),
		Reconnect: msgr.Backoff{Min: time.Millisecond, Max: 50 * time.Millisecond},
		Policies:  map[string]msgr.Policy{"client": msgr.StatelessServer},
	}
	var release func()
	o.Transports, release = e.transports(t)
	if e.Tweak != nil {
		e.Tweak(&o)
	}
	if tweak != nil {
		tweak(&o)
	}
	m, err := msgr.New(o)
	if err != nil {
		release()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown %s: %v", name, err)
		}
		release()
	})
	return m
}

// transports returns the transports for one messenger of e and what
// releases them once it has shut down.
func (e Env) transports(t testing.TB) ([]wire.Transport, func()) {
	t.Helper()
	var given []wire.Transport
	if e.Transports != nil {
		given = e.Transports()
	}
	ts, release, err := transports.OrDefault(given)
	if err != nil {
		t.Fatal(err)
	}
	return ts, release
}

// Listen listens on a fresh address of env.
func (e Env) Listen(t testing.TB, m *msgr.Messenger) string {
	t.Helper()
	addr, err := m.Listen(context.Background(), e.Scheme+"://"+e.hostOrAuto())
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

var memSeq atomic.Uint64

func (e Env) hostOrAuto() string {
	if e.Host != "" {
		return e.Host
	}
	return fmt.Sprintf("node-%d", memSeq.Add(1))
}

// pair is a server and a client messenger with a session between them.
type pair struct {
	srv, cli       *msgr.Messenger
	srvRec, cliRec *Recorder
	addr           string
	conn           *msgr.Conn // client's conn to the server
}

func newPair(t *testing.T, env Env, srvTweak, cliTweak func(*msgr.Options)) *pair {
	p := &pair{srvRec: NewRecorder(t), cliRec: NewRecorder(t)}
	p.srv = env.NewMessenger(t, "osd.0", p.srvRec, srvTweak)
	p.addr = env.Listen(t, p.srv)
	p.cli = env.NewMessenger(t, "osd.1", p.cliRec, cliTweak)
	c, err := p.cli.Connect(context.Background(), p.addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	p.conn = c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// sendN sends n checked messages from sender id with data sizes by size(i).
func sendN(t testing.TB, c *msgr.Conn, id uint32, start, n int, size func(int) int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := start; i < start+n; i++ {
		data := make([]byte, size(i))
		for j := range data {
			data[j] = byte(i + j)
		}
		if err := c.Send(ctx, msgr.NewMessage(uint16(1+i%7), Payload(id, uint64(i), data), data)); err != nil {
			t.Fatalf("send %d: %v (sender's conn: %v)", i, err, c)
		}
	}
}

// waitCount waits until r has received n messages. On a timeout it says
// what arrived (the next expected message of each sender) and the state of
// the sender's conn c, if given, as it is at the failure.
func waitCount(t testing.TB, r *Recorder, n int64, timeout time.Duration, c *msgr.Conn) {
	t.Helper()
	describe := func() string {
		msg := fmt.Sprintf("waiting for %d messages: got %d (%s)", n, r.count.Load(), r.progress())
		if err := r.Err(); err != nil {
			msg += fmt.Sprintf("; check failures: %v", err)
		}
		if c != nil {
			msg += fmt.Sprintf("; sender's conn: %v", c)
		}
		return msg
	}
	EventuallyDescribed(t, timeout, describe, func() bool {
		if got := r.count.Load(); got > n {
			t.Fatalf("got %d messages, want %d", got, n)
		}
		return r.count.Load() == n
	})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
}
