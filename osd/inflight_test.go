package osd_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
)

// TestWriteInFlightIsNotDegraded: a replica that has not yet answered a
// write the primary sent it is short of the primary's log, but not behind:
// the PG stays active+clean meanwhile (status flapped to HEALTH_WARN
// recovering+degraded under every burst of writes, and the replica got a
// needless sync). A replica short of more than what is on its way still
// counts as behind (TestBackfillWaitsForRoom, the recovery tests).
func TestWriteInFlightIsNotDegraded(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "flight"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "flight", "k")
	id := placement.PGID{Pool: pool.Id, Seed: pg}
	sid, _ := id.StoreID()
	replica := c.Map.ActingSet(pool.Id, pg)[1]
	if _, err := osdtest.Put(ctx, cl, "flight", "k", []byte("one"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		t.Helper()
		out, err := cl.QueryPG(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var q osd.PGQuery
		if err := json.Unmarshal([]byte(out), &q); err != nil {
			t.Fatal(err)
		}
		return q.State
	}
	osdtest.Eventually(t, 20*time.Second, "the PG clean", func() bool { return state() == "active+clean" })

	held, let := make(chan struct{}), make(chan struct{})
	var once, letOnce sync.Once
	release := func() { letOnce.Do(func() { close(let) }) }
	osd.RepOpApplying.Set(func(o, s uint32) {
		if o == replica && s == sid {
			once.Do(func() { close(held) })
			<-let
		}
	})
	t.Cleanup(func() { osd.RepOpApplying.Set(nil); release() })
	put := make(chan error, 1)
	go func() {
		_, err := osdtest.Put(ctx, cl, "flight", "k", []byte("two"), client.PutOptions{})
		put <- err
	}()
	<-held
	// The primary applied the write; the replica holds it unanswered.
	if got := state(); got != "active+clean" {
		t.Errorf("with a write on its way to osd.%d: %s, want active+clean", replica, got)
	}
	release()
	if err := <-put; err != nil {
		t.Fatal(err)
	}
}
