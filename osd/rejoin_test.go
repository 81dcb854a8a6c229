package osd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestRejoinedReplicaNotCleanUntilBackfilled: a replica leaves a clean PG
// (out), its stray copy is removed, and it comes back, to be backfilled
// from nothing. Until its backfill ends the primary must report the PG
// backfilling and degraded, not active+clean from where that replica's
// log ended in an earlier interval (found by a user probe: 57 s of
// HEALTH_OK while only two copies were whole, the moment an operator
// drains the next OSD).
func TestRejoinedReplicaNotCleanUntilBackfilled(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 4, Tweak: func(cfg *osd.Config) { cfg.StrayInterval = 50 * time.Millisecond }})
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 30 * time.Second })
	if err := cl.MakeBucket(ctx, "rejoin"); err != nil {
		t.Fatal(err)
	}
	const pg = 0
	sid, _ := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	for _, k := range keysInPG(pool, "rejoin", pg, "k", 4) {
		if _, err := osdtest.Put(ctx, cl, "rejoin", k, osdtest.Payload(2000, 7), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	acting := c.Map.ActingSet(pool.Id, pg)
	primary, leaver := acting[0], acting[2]
	state := func() string { return c.OSDs[primary].PGStateForTest(pool.Id, pg) }
	osdtest.Eventually(t, 30*time.Second, "the pg clean", func() bool { return state() == "active+clean" })

	setIn := func(in bool) {
		adoptEdit(t, c, func(pb *osdpb.ClusterMap) { pb.Osds[leaver].In = in })
	}
	setIn(false)
	osdtest.Eventually(t, 60*time.Second, "the leaver's stray copy removed", func() bool {
		inc, err := c.OSDs[leaver].Store().PGBackfilling(ctx, sid)
		return err == nil && inc
	})
	// Back in, its walk stops at its first object until the test has
	// seen what the primary reports.
	fetched, release := make(chan struct{}, 1), make(chan struct{})
	osd.BackfillFetched.Set(func(bucket, key string) {
		if bucket == "rejoin" {
			select {
			case fetched <- struct{}{}:
			default:
			}
			<-release
		}
	})
	t.Cleanup(func() { osd.BackfillFetched.Set(nil) })
	setIn(true)
	select {
	case <-fetched:
	case <-ctx.Done():
		t.Fatal("the rejoined replica never began its backfill")
	}
	// The primary publishes its state just after it pushed, and the walk
	// may get there first.
	var got string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got = state(); strings.Contains(got, "backfilling") {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(got, "peering") {
			close(release)
			t.Fatalf("pg %d.%x while osd.%d is backfilled from nothing: %s, want backfilling", pool.Id, pg, leaver, got)
		}
		time.Sleep(10 * time.Millisecond) // polling the primary's report
	}
	// The primary's syncs, one a second while the replica is behind, do
	// not pile up at it: each would hold its message (and the session's
	// receive credit) until the backfill ends.
	for range 50 {
		if !c.OSDs[primary].SendSyncForTest(leaver, pool.Id, pg) {
			t.Fatal("sync not sent")
		}
	}
	if err := c.OSDs[primary].CallForTest(ctx, leaver); err != nil { // behind the syncs on the session
		t.Fatal(err)
	}
	if n := c.OSDs[leaver].QueuedForTest(sid); n > 1 {
		close(release)
		t.Fatalf("%d RepOps queued at the backfilling replica after 50 syncs, want at most 1", n)
	}
	close(release)
	osdtest.Eventually(t, 60*time.Second, "the pg clean once the backfill ends", func() bool { return state() == "active+clean" })
}
