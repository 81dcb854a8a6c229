package monclient

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
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

func TestReplyTid(t *testing.T) {
	b, _ := proto.Marshal(&osdpb.MonCommandReply{Header: &osdpb.ReplyHeader{Message: "x", Req: &osdpb.ReqID{Tid: 5}}, Tid: 42, Output: "{}"})
	if got := replyTid(b); got != 42 {
		t.Fatalf("replyTid = %d", got)
	}
	for _, bad := range [][]byte{nil, {0xff}, {0x10}, b[:len(b)-1]} {
		replyTid(bad) // no panic
	}
}
