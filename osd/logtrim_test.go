package osd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
)

// TestReplicaLogsTrimmed: every member's PG log stays within its window
// (store Options.LogKeep), the replicas' as the primary's: a replica's
// log grows with every write it applies.
func TestReplicaLogsTrimmed(t *testing.T) {
	const keep = 8
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.Store.LogKeep = keep }})
	cl := c.Client(t, nil)
	ctx := ctxT(t, time.Minute)
	if err := cl.MakeBucket(ctx, "trim"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 * keep {
		if _, err := osdtest.Put(ctx, cl, "trim", "k", []byte(fmt.Sprint(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "trim", "k")
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	// A primary trims after it hands the write to its durability waiter,
	// so the client's ack can come before the trim of its own entry: the
	// window holds once that trim ran.
	for _, id := range c.Map.ActingSet(pool.Id, pg) {
		st := c.OSDs[id].Store()
		var n int
		osdtest.Eventually(t, 30*time.Second, fmt.Sprintf("osd.%d keeps at most %d log entries of pg %d.%x after %d writes", id, keep, pool.Id, pg, 5*keep), func() bool {
			_, tail, err := st.PGInfo(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			entries, _, err := st.LogAfter(ctx, sid, tail, 0)
			if err != nil {
				t.Fatal(err)
			}
			n = len(entries)
			return n <= keep
		})
		if n == 0 {
			t.Errorf("osd.%d has no log entries of pg %d.%x left", id, pool.Id, pg)
		}
	}
}
