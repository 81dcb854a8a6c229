package monclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/logbuf"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestOnMapOrder: OnMap sees only newer maps of the first cluster, in
// order, however they arrive.
func TestOnMapOrder(t *testing.T) {
	var mu sync.Mutex
	var got []uint64
	c, err := New(context.Background(), Options{Addrs: []string{"tcp://127.0.0.1:1"}, Logger: quiet(), OnMap: func(mp *placement.Map) {
		mu.Lock()
		got = append(got, mp.Epoch())
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mk := func(epoch uint64, fsid string) *osdpb.ClusterMap {
		return &osdpb.ClusterMap{Epoch: epoch, Fsid: fsid, Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 1, PgCount: 1}}}
	}
	for _, pb := range []*osdpb.ClusterMap{mk(3, "a"), mk(2, "a"), mk(3, "a"), mk(5, "b"), mk(4, "a"), nil, {Epoch: 9}, mk(7, "a")} {
		c.noteMap(pb)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0] != 3 || got[1] != 4 || got[2] != 7 {
		t.Fatalf("OnMap epochs %v, want [3 4 7]", got)
	}
	if c.Map().Epoch() != 7 || c.Map().FSID() != "a" {
		t.Fatalf("Map: epoch %d fsid %s", c.Map().Epoch(), c.Map().FSID())
	}
}

// TestCloseWaitsForOnMap: Close returns only once the OnMap call in
// progress has, and no call follows: the OSD closes its mon client first
// so that no map reaches what it tears down next.
func TestCloseWaitsForOnMap(t *testing.T) {
	var (
		c                *Client
		entered          = make(chan struct{})
		inCall, returned atomic.Bool
	)
	c, err := New(context.Background(), Options{Addrs: []string{"tcp://127.0.0.1:1"}, Logger: quiet(), OnMap: func(mp *placement.Map) {
		if returned.Load() {
			t.Errorf("OnMap(epoch %d) after Close returned", mp.Epoch())
		}
		inCall.Store(true)
		defer inCall.Store(false)
		if mp.Epoch() == 3 {
			close(entered)
			// Stay in the call until Close has begun.
			for deadline := time.Now().Add(10 * time.Second); c.ctx.Err() == nil; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("Close did not begin within 10s")
					return
				}
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(epoch uint64) *osdpb.ClusterMap {
		return &osdpb.ClusterMap{Epoch: epoch, Fsid: "a", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 1, PgCount: 1}}}
	}
	c.noteMap(mk(3))
	<-entered
	c.noteMap(mk(4)) // queued behind the call in progress
	c.Close()
	if inCall.Load() {
		t.Error("Close returned while OnMap was running")
	}
	returned.Store(true)
	c.noteMap(mk(5)) // a push the dispatcher was still handling
}

// TestNoMonAnswers: with no mon reachable a request keeps trying until its
// context ends, and says so: in its error, and in the log once it has
// waited stallWarnAfter (an OSD started while its mons are away).
func TestNoMonAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	l.Close() // nothing listens there now: refused
	defer func(d time.Duration) { stallWarnAfter = d }(stallWarnAfter)
	stallWarnAfter = 300 * time.Millisecond
	var log logbuf.Buffer
	c, err := New(context.Background(), Options{Addrs: []string{addr}, Logger: slog.New(slog.NewTextHandler(&log, nil)), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Command(ctx, &osdpb.MonCommand{Prefix: "status"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 600*time.Millisecond {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	t.Log(err)
	if n := strings.Count(log.String(), "no mon has served the request yet"); n != 1 {
		t.Errorf("the log says %d times that no mon serves, want once:\n%s", n, log.String())
	}
	c.Close()
	if _, err := c.Command(context.Background(), &osdpb.MonCommand{Prefix: "status"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestNoMonErrorSent: a request that timed out says whether a mon may
// have it (NoMonError.Sent), which is what tells the CLI whether a rerun
// needs the same request id: not when no session came up (refused, or a
// peer that never completes the handshake), yes when it went out and no
// reply came.
func TestNoMonErrorSent(t *testing.T) {
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused.Close() // nothing listens there now
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		// Accept and say nothing: the session never comes up.
		var conns []net.Conn
		for {
			c, err := mute.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	silent := startFakeMon(t, func(*msgr.Message) {}) // takes the request, never answers
	for _, tc := range []struct {
		name, addr string
		sent       bool
	}{
		{"refused", "tcp://" + refused.Addr().String(), false},
		{"no handshake", "tcp://" + mute.Addr().String(), false},
		{"no reply", silent, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(context.Background(), Options{Addrs: []string{tc.addr}, Logger: quiet(), Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Command(ctxFor(t, 700*time.Millisecond), &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{1}})
			var nm *NoMonError
			if !errors.As(err, &nm) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%v, want a *NoMonError with the deadline", err)
			}
			if nm.Sent != tc.sent {
				t.Fatalf("Sent %v, want %v: %v", nm.Sent, tc.sent, err)
			}
		})
	}
}

// TestReplyMatchedByTid: replies are matched to requests by the tid of
// their envelope. A mon that first answers with another tid (a reply to
// nothing pending) sees it dropped harmlessly: the call takes the reply
// that carries its tid.
func TestReplyMatchedByTid(t *testing.T) {
	addr := startFakeMon(t, func(m *msgr.Message) {
		if osdpb.MsgType(m.Type) != osdpb.MsgType_MSG_MON_COMMAND {
			return
		}
		sendReply(m, m.Tid()+1000, &osdpb.MonCommandReply{Header: &osdpb.ReplyHeader{}, Output: "stray"})
		sendReply(m, m.Tid(), &osdpb.MonCommandReply{Header: &osdpb.ReplyHeader{}, Output: "mine"})
	})
	c, err := New(context.Background(), Options{Addrs: []string{addr}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		rep, err := c.Command(ctx, &osdpb.MonCommand{Prefix: "status"})
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if rep.Output != "mine" {
			t.Fatalf("command %d: got the reply %q, want the one with its tid", i, rep.Output)
		}
	}
}

// startFakeMon is the address of a stand-in mon that hands each message
// to handle (which answers with sendReply, or not): for answers a real
// mon gives only under failures (etcd without a leader).
func startFakeMon(t *testing.T, handle func(*msgr.Message)) string {
	return msgrtest.Serve(t, "mon.fake", handle)
}

// sendReply answers req with pb under tid.
func sendReply(req *msgr.Message, tid uint64, pb proto.Message) {
	front, _ := proto.Marshal(pb)
	rep := msgr.NewMessage(uint16(ops.ReplyType(osdpb.MsgType(req.Type))), front, nil)
	rep.SetTid(tid)
	if err := req.Conn().Send(context.Background(), rep); err != nil {
		rep.Release()
	}
}

// flakyMon answers the first `unavailable` requests of every type with
// SERVICE_UNAVAILABLE, as a mon whose etcd member lost its leader does
// (-1: all of them), and the rest with OK. It counts what it was asked.
type flakyMon struct {
	addr        string
	unavailable int64
	asked       atomic.Int64
}

func startFlakyMon(t *testing.T, unavailable int64) *flakyMon {
	f := &flakyMon{unavailable: unavailable}
	f.addr = startFakeMon(t, func(m *msgr.Message) {
		n := f.asked.Add(1)
		h := &osdpb.ReplyHeader{}
		if f.unavailable < 0 || n <= f.unavailable {
			h = &osdpb.ReplyHeader{Status: osdpb.Status_SERVICE_UNAVAILABLE, Message: "etcd: etcdserver: no leader"}
		}
		switch osdpb.MsgType(m.Type) {
		case osdpb.MsgType_MSG_MON_COMMAND:
			sendReply(m, m.Tid(), &osdpb.MonCommandReply{Header: h, Output: "{}"})
		case osdpb.MsgType_MSG_MON_BEACON:
			sendReply(m, m.Tid(), &osdpb.MonBeaconReply{Header: h})
		}
	})
	return f
}

// TestUnavailableRetried: a mon that answers SERVICE_UNAVAILABLE (its
// etcd member has no leader) is retried, on the other mons first and
// then after a backoff, until the request's deadline; a beacon is not.
func TestUnavailableRetried(t *testing.T) {
	newClient := func(t *testing.T, mons ...*flakyMon) *Client {
		var addrs []string
		for _, f := range mons {
			addrs = append(addrs, f.addr)
		}
		c, err := New(context.Background(), Options{Addrs: addrs, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	out := &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{1}} // for the leader

	t.Run("once", func(t *testing.T) {
		f := startFlakyMon(t, 1)
		c := newClient(t, f)
		if _, err := c.Command(ctxFor(t, 10*time.Second), out); err != nil {
			t.Fatalf("a mon unavailable once, then fine: %v", err)
		}
		if n := f.asked.Load(); n != 2 {
			t.Fatalf("the mon was asked %d times, want 2", n)
		}
	})

	t.Run("other mon", func(t *testing.T) {
		down, up := startFlakyMon(t, -1), startFlakyMon(t, 1)
		c := newClient(t, down, up)
		if _, err := c.Command(ctxFor(t, 10*time.Second), out); err != nil {
			t.Fatalf("one mon always unavailable, the other once: %v", err)
		}
		if down.asked.Load() == 0 || up.asked.Load() != 2 {
			t.Fatalf("asked: the unavailable mon %d times, the other %d; want at least 1 and 2", down.asked.Load(), up.asked.Load())
		}
		// The mon that served is the leader now: the next request goes
		// straight to it.
		before := down.asked.Load()
		if _, err := c.Command(ctxFor(t, 10*time.Second), out); err != nil || down.asked.Load() != before {
			t.Fatalf("the next request: %v; the unavailable mon was asked %d more times", err, down.asked.Load()-before)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		a, b := startFlakyMon(t, -1), startFlakyMon(t, -1)
		c := newClient(t, a, b)
		const limit = 800 * time.Millisecond
		// start is taken before the context, so that took < limit means
		// the client gave up before the deadline, not that the clock
		// moved on between the two.
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		_, err := c.Command(ctx, out)
		took := time.Since(start)
		var nm *NoMonError
		if !errors.As(err, &nm) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("after %v: %v, want a *NoMonError with the deadline", took, err)
		}
		if took < limit || took > limit+time.Second {
			t.Fatalf("gave up after %v with a %v deadline", took, limit)
		}
		// Each mon's answer is in the error, as what it said.
		if len(nm.Answers) != 2 || nm.Answers[0].Addr != a.addr || nm.Answers[1].Addr != b.addr {
			t.Fatalf("answers %v, want one for each of %s and %s", nm.Answers, a.addr, b.addr)
		}
		for _, an := range nm.Answers {
			if !errors.Is(an.Err, ops.ErrServiceUnavailable) || !strings.Contains(an.Err.Error(), "no leader") {
				t.Fatalf("%s's answer: %v, want its SERVICE_UNAVAILABLE", an.Addr, an.Err)
			}
		}
		if nm.Sent {
			t.Fatal("NoMonError.Sent with every attempt answered SERVICE_UNAVAILABLE: none was applied")
		}
		if !strings.Contains(err.Error(), "no mon answered: "+a.addr+": ServiceUnavailable: etcd: etcdserver: no leader; "+b.addr+": ") {
			t.Fatalf("the error does not name each mon's answer: %v", err)
		}
		// Backoff, not a busy loop: a few rounds in the time given
		// (20+40+80+160+320 ms at most, less with jitter).
		if n := a.asked.Load() + b.asked.Load(); n > 20 {
			t.Fatalf("the mons were asked %d times in %v", n, limit)
		}
		t.Log(err)
	})

	t.Run("beacon", func(t *testing.T) {
		f := startFlakyMon(t, 1)
		c := newClient(t, f)
		err := c.Beacon(ctxFor(t, 10*time.Second), &osdpb.MonBeacon{Id: 1})
		if !errors.Is(err, ops.ErrServiceUnavailable) || f.asked.Load() != 1 {
			t.Fatalf("a beacon answered SERVICE_UNAVAILABLE (boot again): %v after %d attempts; want the answer after one", err, f.asked.Load())
		}
	})
}

// ctxFor is a context that ends after d or with the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestRequestIDKeptAcrossRetries: a command that changes something is
// sent with a request id, the same in every retry; each Command call is
// a new request unless the caller set the id; read-only commands carry
// none; the caller's message is left as it was.
func TestRequestIDKeptAcrossRetries(t *testing.T) {
	var mu sync.Mutex
	var ids [][]byte
	var asked atomic.Int64
	addr := startFakeMon(t, func(m *msgr.Message) {
		var cmd osdpb.MonCommand
		if osdpb.MsgType(m.Type) != osdpb.MsgType_MSG_MON_COMMAND || m.DecodeFront(&cmd) != nil {
			return
		}
		mu.Lock()
		ids = append(ids, cmd.RequestId)
		mu.Unlock()
		h := &osdpb.ReplyHeader{}
		if asked.Add(1)%3 != 0 { // two of every three attempts fail
			h = &osdpb.ReplyHeader{Status: osdpb.Status_SERVICE_UNAVAILABLE, Message: "etcd: etcdserver: no leader"}
		}
		sendReply(m, m.Tid(), &osdpb.MonCommandReply{Header: h, Output: "{}"})
	})
	c, err := New(context.Background(), Options{Addrs: []string{addr}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := func(cmd *osdpb.MonCommand) [][]byte {
		t.Helper()
		mu.Lock()
		ids = nil
		mu.Unlock()
		if _, err := c.Command(ctxFor(t, 10*time.Second), cmd); err != nil {
			t.Fatalf("%s: %v", cmd.Prefix, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ids) != 3 {
			t.Fatalf("%s: %d attempts, want 3", cmd.Prefix, len(ids))
		}
		return slices.Clone(ids)
	}
	out := &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{1}}
	first := sent(out)
	if len(first[0]) != RequestIDLen || !bytes.Equal(first[0], first[1]) || !bytes.Equal(first[0], first[2]) {
		t.Fatalf("the attempts of one command carried ids %x, want one id of %d bytes", first, RequestIDLen)
	}
	if out.RequestId != nil {
		t.Fatal("Command set the caller's message's id")
	}
	if second := sent(out); bytes.Equal(second[0], first[0]) {
		t.Fatal("a second Command call reused the first one's id")
	}
	own := NewRequestID()
	if got := sent(&osdpb.MonCommand{Prefix: "auth s3-key add", Entity: "client.u", RequestId: own}); !bytes.Equal(got[0], own) || !bytes.Equal(got[2], own) {
		t.Fatalf("the caller's id %x was sent as %x", own, got)
	}
	for _, read := range []string{"status", "auth get", "auth ls"} {
		if got := sent(&osdpb.MonCommand{Prefix: read}); got[0] != nil {
			t.Fatalf("%s carried a request id", read)
		}
	}
}

// TestGivenAmong: a mon given by a name that resolves to one of the mons
// listed is that mon (not tried twice); a name whose addresses match
// several listed mons is one for all of them (round robin), and each is
// learned; an address spelled otherwise (IPv4 in IPv6) is the same one.
func TestGivenAmong(t *testing.T) {
	c := &Client{}
	sets := []map[string]bool{
		{"tcp://mon-a:3300": true, "tcp://10.0.0.1:3300": true},
		{"tcp://mons:3300": true, "tcp://10.0.0.1:3300": true, "tcp://10.0.0.2:3300": true, "tcp://10.0.0.3:3300": true},
		{"tcp://10.0.0.9:3300": true},
	}
	c.forms.Store(&sets)
	up := []string{"tcp://10.0.0.1:3300", "tcp://10.0.0.2:3300", "tcp://10.0.0.3:3300", "tcp://[::ffff:10.0.0.9]:3300"}
	got := c.givenAmong(up)
	if !got["tcp://10.0.0.1:3300"] || got["tcp://10.0.0.2:3300"] || got["tcp://10.0.0.3:3300"] || !got["tcp://[::ffff:10.0.0.9]:3300"] || len(got) != 2 {
		t.Fatalf("given among %v: %v", up, got)
	}
	if got := (&Client{}).givenAmong(up); len(got) != 0 {
		t.Fatalf("before resolution: %v", got)
	}
}
