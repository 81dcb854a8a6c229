package msgr_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// sideRecorder holds what arrives on lossless sessions while hold is on
// (so their credits run out) and hands what arrives on lossy ones to side.
type sideRecorder struct {
	mu       sync.Mutex
	hold     bool
	held     []*msgr.Message
	lossless []*msgr.Conn // the conn of each lossless message, in order
	side     chan *msgr.Conn
	bad      error
}

func (r *sideRecorder) Dispatch(m *msgr.Message) {
	c := m.Conn()
	if c.Policy().Lossy {
		if m.Type != 2 {
			r.fail(errors.New("a lossless session's message arrived on the side session"))
		}
		m.Release()
		r.side <- c
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.Type != 1 {
		r.bad = errors.New("a side session's message arrived on the lossless session")
	}
	r.lossless = append(r.lossless, c)
	if r.hold {
		r.held = append(r.held, m)
		return
	}
	m.Release()
}

func (r *sideRecorder) fail(err error) {
	r.mu.Lock()
	r.bad = err
	r.mu.Unlock()
}

func (r *sideRecorder) HandleEvent(msgr.Event) {}

func (r *sideRecorder) counts() (got, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lossless), len(r.held)
}

func (r *sideRecorder) release() {
	r.mu.Lock()
	r.hold = false
	held := r.held
	r.held = nil
	r.mu.Unlock()
	for _, m := range held {
		m.Release()
	}
}

// noGoroutineLeak fails t if, once everything registered after it has been
// cleaned up, more goroutines run than before.
func noGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines after close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(5 * time.Millisecond) // polling, not synchronisation
		}
	})
}

// A lossy side session to a peer whose policy is lossless lives beside the
// lossless session: each message arrives on its own conn, and a backlog on
// the lossless one (its credits spent) does not hold the side one back.
func TestSideSessionBesideLossless(t *testing.T) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) { testSideSessionBesideLossless(t, env) })
	}
}

func testSideSessionBesideLossless(t *testing.T, env msgrtest.Env) {
	noGoroutineLeak(t)
	const window, total = 8, 40
	rec := &sideRecorder{hold: true, side: make(chan *msgr.Conn, 16)}
	srv := env.NewMessenger(t, "osd.0", rec, func(o *msgr.Options) {
		o.AcceptLossySide = true
		o.RecvWindowMsgs = window
	})
	addr := env.Listen(t, srv)
	cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), nil)
	ctx := context.Background()

	main, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	for range total {
		if err := main.Send(ctx, msgr.NewMessage(1, []byte("replay"), nil)); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "the lossless session stalls for credit", func() bool {
		_, held := rec.counts()
		st := main.Stats()
		return st.CreditStalls > 0 && held > 0 && uint64(held) == st.MsgsSent
	})
	_, stalledAt := rec.counts()

	side, err := cli.ConnectPolicy(ctx, addr, "osd.0", msgr.LossyClient)
	if err != nil {
		t.Fatal(err)
	}
	if side == main {
		t.Fatal("ConnectPolicy(LossyClient) returned the lossless session")
	}
	if again, _ := cli.ConnectPolicy(ctx, addr, "osd.0", msgr.LossyClient); again != side {
		t.Fatal("a second ConnectPolicy made another side session")
	}
	if again, _ := cli.Connect(ctx, addr, "osd.0"); again != main {
		t.Fatal("Connect after ConnectPolicy does not return the lossless session")
	}
	const beats = 3
	for range beats {
		if err := side.Send(ctx, msgr.NewMessage(2, []byte("beat"), nil)); err != nil {
			t.Fatal(err)
		}
	}
	var sideIn *msgr.Conn
	for i := range beats {
		select {
		case c := <-rec.side:
			if sideIn != nil && c != sideIn {
				t.Fatal("side messages arrived on two conns")
			}
			sideIn = c
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d side messages arrived behind the lossless backlog", i, beats)
		}
	}
	if got, held := rec.counts(); got != stalledAt || held != stalledAt || main.Stats().MsgsSent >= total {
		t.Fatalf("the lossless session moved on without credit: %d arrived, %d held, %d sent", got, held, main.Stats().MsgsSent)
	}
	if p := sideIn.Policy(); p != msgr.StatelessServer {
		t.Fatalf("accepted side session has policy %v, want %v", p, msgr.StatelessServer)
	}
	if st := side.Stats(); st.RecvWindowMsgs > 16 {
		t.Fatalf("side session's receive window is %d messages, want at most 16", st.RecvWindowMsgs)
	}

	rec.release()
	msgrtest.Eventually(t, 10*time.Second, "the lossless backlog drains", func() bool {
		got, _ := rec.counts()
		return got == total
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.bad != nil {
		t.Fatal(rec.bad)
	}
	for _, c := range rec.lossless {
		if c != rec.lossless[0] || c == sideIn {
			t.Fatal("lossless messages arrived on more than one conn, or on the side one")
		}
	}
}

// Without AcceptLossySide a lossy dialer to a peer whose policy is
// lossless is refused as before, and with it a lossless dialer to a peer
// whose policy is lossy still is.
func TestSideSessionRefusedWithoutOption(t *testing.T) {
	noGoroutineLeak(t)
	for _, tc := range []struct {
		name   string
		srv    func(*msgr.Options)
		policy msgr.Policy
	}{
		{"lossy to lossless", nil, msgr.LossyClient},
		{"lossless to lossy with option", func(o *msgr.Options) {
			o.AcceptLossySide = true
			o.Policies = map[string]msgr.Policy{"osd": msgr.StatelessServer}
		}, msgr.LosslessPeer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tcpEnv.NewMessenger(t, "osd.0", msgrtest.NewRecorder(t), tc.srv)
			addr := tcpEnv.Listen(t, srv)
			rec := msgrtest.NewRecorder(t)
			cli := tcpEnv.NewMessenger(t, "osd.1", rec, nil)
			c, err := cli.ConnectPolicy(context.Background(), addr, "osd.0", tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			ev := rec.WaitEvent(t, msgr.EventReset, 10*time.Second)
			var re *msgr.RefusedError
			if !errors.As(ev.Err, &re) || !strings.Contains(re.Reason, "policy mismatch") {
				t.Fatalf("reset with %v, want a policy mismatch refusal", ev.Err)
			}
			<-c.Done()
		})
	}
}

// A side session's window is small at both ends, whatever the messengers'
// RecvWindowMsgs: it carries a few small messages each way.
func TestSideSessionSmallWindow(t *testing.T) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) {
			noGoroutineLeak(t)
			testSideSessionSmallWindow(t, env, nil, nil)
		})
	}
}

// heldStill returns n() once it has read the same for 20 ms.
func heldStill(t *testing.T, n func() int64) int64 {
	t.Helper()
	v, same := n(), 0
	for deadline := time.Now().Add(10 * time.Second); same < 10; {
		if time.Now().After(deadline) {
			t.Fatalf("the count kept changing for 10 s (last %d)", v)
		}
		time.Sleep(2 * time.Millisecond)
		if w := n(); w == v {
			same++
		} else {
			v, same = w, 0
		}
	}
	return v
}

// testSideSessionSmallWindow opens a side session to a server with env's
// window; srvTweak adjusts the server's options, and posted, when not nil,
// is how many receives the server's transport has posted now.
func testSideSessionSmallWindow(t *testing.T, env msgrtest.Env, srvTweak func(*msgr.Options), posted func() int64) {
	rec := &sideRecorder{side: make(chan *msgr.Conn, 16)}
	srv := env.NewMessenger(t, "osd.0", rec, func(o *msgr.Options) {
		o.AcceptLossySide = true
		if srvTweak != nil {
			srvTweak(o)
		}
	})
	addr := env.Listen(t, srv)
	crec := msgrtest.NewRecorder(t)
	cli := env.NewMessenger(t, "osd.1", crec, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	main, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := main.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var before int64
	if posted != nil {
		// The server's end of the main session may still be posting
		// again the receive of the handshake's last frame: the baseline
		// is the count once it holds still (a baseline one short read
		// the side session's receives as one more than it posted).
		before = heldStill(t, posted)
	}
	side, err := cli.ConnectPolicy(ctx, addr, "osd.0", msgr.LossyClient)
	if err != nil {
		t.Fatal(err)
	}
	if err := side.Send(ctx, msgr.NewMessage(2, []byte("beat"), nil)); err != nil {
		t.Fatal(err)
	}
	var sideIn *msgr.Conn
	select {
	case sideIn = <-rec.side:
	case <-ctx.Done():
		t.Fatal("the side session's message never arrived")
	}
	const want = 16
	if got := side.Stats().RecvWindowMsgs; got != want {
		t.Errorf("the dialer's end of the side session has a window of %d messages, want %d", got, want)
	}
	if got := sideIn.Stats().RecvWindowMsgs; got != want {
		t.Errorf("the acceptor's end of the side session has a window of %d messages, want %d", got, want)
	}
	if got := main.Stats().RecvWindowMsgs; got <= want {
		t.Errorf("the lossless session's window is %d messages: the side session's shrank it", got)
	}
	if posted != nil {
		// Beside the window, 3 receives for the session's control frames
		// (protocol.md §13.2), none for the write rendezvous's.
		const wantPosted = want + 3
		var n int64
		msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
			return fmt.Sprintf("the server's transport to post %d receives for the side session; it posted %d", wantPosted, n)
		}, func() bool { n = posted() - before; return n == wantPosted })
	}
	// Both ways: the acceptor's end answers within its peer's credits.
	for i := range want + 4 {
		if err := sideIn.Send(ctx, msgr.NewMessage(3, msgrtest.Payload(9, uint64(i), nil), nil)); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 10*time.Second, "the replies on the side session", func() bool { return crec.Next(9) == want+4 })
	if err := crec.Err(); err != nil {
		t.Fatal(err)
	}
}
