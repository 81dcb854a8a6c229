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
	for _, id := range c.Map.ActingSet(pool.Id, pg) {
		st := c.OSDs[id].Store()
		_, tail, err := st.PGInfo(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := st.LogAfter(ctx, sid, tail, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > keep {
			t.Errorf("osd.%d keeps %d log entries of pg %d.%x after %d writes, want at most %d", id, len(entries), pool.Id, pg, 5*keep, keep)
		}
	}
}
