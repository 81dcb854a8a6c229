package monclient

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
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
// context ends, and says so.
func TestNoMonAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	l.Close() // nothing listens there now: refused
	c, err := New(context.Background(), Options{Addrs: []string{addr}, Logger: quiet(), Timeout: 200 * time.Millisecond})
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
	c.Close()
	if _, err := c.Command(context.Background(), &osdpb.MonCommand{Prefix: "status"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestReplyMatchedByTid: replies are matched to requests by the tid of
// their envelope. A mon that first answers with another tid (a reply to
// nothing pending) sees it dropped harmlessly: the call takes the reply
// that carries its tid.
func TestReplyMatchedByTid(t *testing.T) {
	ms, err := msgr.New(msgr.Options{
		Name: "mon.fake", Logger: quiet(), Transports: []wire.Transport{tcp.Transport{}},
		Policies: map[string]msgr.Policy{"client": msgr.StatelessServer},
		Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) {
			defer m.Release()
			if osdpb.MsgType(m.Type) != osdpb.MsgType_MSG_MON_COMMAND {
				return
			}
			for _, r := range []struct {
				tid uint64
				out string
			}{{m.Tid() + 1000, "stray"}, {m.Tid(), "mine"}} {
				front, _ := proto.Marshal(&osdpb.MonCommandReply{Header: &osdpb.ReplyHeader{}, Output: r.out})
				rep := msgr.NewMessage(uint16(osdpb.MsgType_MSG_MON_COMMAND_REPLY), front, nil)
				rep.SetTid(r.tid)
				if err := m.Conn().Send(context.Background(), rep); err != nil {
					rep.Release()
				}
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Kill()
	addr, err := ms.Listen(context.Background(), "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
