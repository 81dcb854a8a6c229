package osd_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestCallFailsWhenPeerRestarts: a request to a peer that restarts before
// it answered is lost with the peer's old session (msgr.EventRemoteReset
// drops what was queued for it), so the caller's wait ends then, with an
// error, not at its deadline (a recovery's pull waits up to 10 minutes,
// holding its PG's writes).
func TestCallFailsWhenPeerRestarts(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	o := c.OSDs[0]
	if err := o.CallForTest(ctxT(t, 30*time.Second), 2); err != nil {
		t.Fatal(err) // the session to osd.2 is up
	}
	// osd.2 gets the request and dies before it answers.
	var dropped atomic.Bool
	osd.ClusterReceived.Set(func(id, from uint32, t osdpb.MsgType) bool {
		return id == 2 && from == 0 && t == osdpb.MsgType_MSG_GET_MAP && !dropped.Swap(true)
	})
	t.Cleanup(func() { osd.ClusterReceived.Set(nil) })
	const deadline = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.CallForTest(ctx, 2) }()
	osdtest.Eventually(t, 10*time.Second, "osd.2 to drop the request", dropped.Load)
	c.StopOSD(2)
	c.StartOSD(2)
	err := <-done
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the call to the restarted osd.2 waited out its %v deadline: %v", deadline, err)
	}
	if !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("the call whose request died with osd.2: %v, want a retriable ServiceUnavailable", err)
	}
}

// TestCallWithdrawnWhenCallerGivesUp: a request queued while the link to
// its peer is down, whose caller gave up (a PG query past its timeout), is
// withdrawn: when the link comes back the peer never gets it, and the
// session goes on with what was sent after it.
func TestCallWithdrawnWhenCallerGivesUp(t *testing.T) {
	gate := msgrtest.NewGate(tcp.Transport{})
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) {
		if cfg.ID == 0 {
			cfg.Transports = []wire.Transport{gate}
		}
	}})
	o := c.OSDs[0]
	if err := o.CallForTest(ctxT(t, 30*time.Second), 2); err != nil {
		t.Fatal(err) // the session to osd.2 is up
	}
	var got atomic.Int32 // map requests osd.2 received from osd.0
	osd.ClusterReceived.Set(func(id, from uint32, t osdpb.MsgType) bool {
		if id == 2 && from == 0 && t == osdpb.MsgType_MSG_GET_MAP {
			got.Add(1)
		}
		return false
	})
	t.Cleanup(func() { osd.ClusterReceived.Set(nil) })

	conn, err := o.PeerConnForTest(2)
	if err != nil {
		t.Fatal(err)
	}
	gate.Down()
	// Sent from now on, the request waits in the queue: no link has it.
	osdtest.Eventually(t, 10*time.Second, "the link to osd.2 to fail", func() bool { return conn.Stats().Faults != 0 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.CallForTest(ctx, 2) }()
	osdtest.Eventually(t, 10*time.Second, "the call to wait", func() bool { return o.PendingCallsForTest() == 1 })
	cancel() // the caller gives up while the request is queued
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call given up: %v", err)
	}
	gate.Up()
	// A call after it gets its answer, so the session delivered everything
	// queued before it.
	if err := o.CallForTest(ctxT(t, 30*time.Second), 2); err != nil {
		t.Fatal(err)
	}
	if n, w := got.Load(), conn.Stats().Withdrawn; n != 1 || w != 1 {
		t.Fatalf("osd.2 got %d map requests from osd.0 after the link came back, %d withdrawn; want 1, 1", n, w)
	}
}
