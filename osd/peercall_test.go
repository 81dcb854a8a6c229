package osd_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
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
