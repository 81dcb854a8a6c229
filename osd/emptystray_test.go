package osd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestEmptyIncompleteReplicasWitness: a pool that went 3 -> 1 -> 3
// replicas leaves, on the two members that were strays at size 1, copies
// of an unwritten PG whose removal kept them marked mid-backfill (store
// RemovePG): empty, and no witness of anything. Back in the acting set
// beside a primary just as empty, they must not stay so: each is
// backfilled (of nothing) or told it holds the interval's log, so that
// when the primary then goes the two of them serve the PG, instead of
// leaving it down with every OSD up.
func TestEmptyIncompleteReplicasWitness(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 20 * time.Second })
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const pg = 1 // never written: the test makes no bucket in it
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, pg)
	if len(acting) != 3 {
		t.Fatalf("acting %v", acting)
	}
	for _, id := range acting[1:] {
		c.StopOSD(id)
		withStore(ctx, t, c, id, func(st *store.Store) error { return st.SetPGBackfilling(ctx, sid) })
	}
	// Out (the PG runs on the primary alone, as at size 1), then in again:
	// a new interval with them in it.
	adopt := func(edit func(pb *osdpb.ClusterMap)) { t.Helper(); adoptEdit(t, c, edit) }
	adopt(func(pb *osdpb.ClusterMap) {
		for _, id := range acting[1:] {
			pb.Osds[id].In = false
		}
	})
	adopt(func(pb *osdpb.ClusterMap) {
		for _, id := range acting[1:] {
			pb.Osds[id].In = true
		}
	})
	for _, id := range acting[1:] {
		c.StartOSD(id)
	}
	osdtest.Eventually(t, 30*time.Second, "the replicas' copies complete", func() bool {
		for _, id := range acting[1:] {
			if inc, err := c.OSDs[id].Store().PGBackfilling(ctx, sid); err != nil || inc {
				return false
			}
		}
		return true
	})
	// The primary goes: the two serve the PG.
	primary := acting[0]
	c.StopOSD(primary)
	adopt(func(pb *osdpb.ClusterMap) { pb.Osds[primary].Up, pb.Osds[primary].In = false, false })
	if err := cl.MakeBucket(ctx, "emptypg"); err != nil {
		t.Fatal(err)
	}
	key := keysInPG(pool, "emptypg", pg, "k", 1)[0]
	if _, err := osdtest.Put(ctx, cl, "emptypg", key, []byte("after"), client.PutOptions{}); err != nil {
		t.Fatalf("put to pg %d.%x with its primary gone and both replicas up: %v", pool.Id, pg, err)
	}
}

// TestPoolBackFromSizeOneThenAMemberGoes: a pool goes 3 -> 1 -> 3
// replicas with most PGs never written. At size 1 the other two OSDs'
// copies are strays, and are removed (emptied, marked mid-backfill); back
// at size 3 they must become whole members again, so that when an OSD
// then goes, every PG serves on the two left, instead of staying down
// with every OSD up (found by a user probe: blocked_by named up OSDs).
func TestPoolBackFromSizeOneThenAMemberGoes(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.StrayInterval = 50 * time.Millisecond }})
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 30 * time.Second })
	if err := cl.MakeBucket(ctx, "sizes"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "sizes", "one", []byte("1"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	adopt := func(edit func(pb *osdpb.ClusterMap)) { t.Helper(); adoptEdit(t, c, edit) }
	setSize := func(n uint32) {
		adopt(func(pb *osdpb.ClusterMap) {
			for _, p := range pb.Pools {
				if p.Id == pool.Id {
					p.Size, p.MinSize = n, 0
				}
			}
		})
	}
	// marks counts the copies of the pool's PGs marked mid-backfill.
	marks := func() int {
		n := 0
		for _, o := range c.OSDs {
			for seed := range pool.PgCount {
				sid, _ := placement.PGID{Pool: pool.Id, Seed: seed}.StoreID()
				if inc, err := o.Store().PGBackfilling(ctx, sid); err == nil && inc {
					n++
				}
			}
		}
		return n
	}
	setSize(1)
	osdtest.Eventually(t, 60*time.Second, "the strays of size 1 removed", func() bool { return unemptiedStrays(ctx, t, c, pool) == 0 && marks() > 0 })
	setSize(3)
	osdtest.Eventually(t, 60*time.Second, "the emptied copies whole again at size 3", func() bool { return marks() == 0 })

	const gone = 0
	c.StopOSD(gone)
	adopt(func(pb *osdpb.ClusterMap) { pb.Osds[gone].Up, pb.Osds[gone].In = false, false })
	for seed := range pool.PgCount {
		key := keysInPG(pool, "sizes", seed, "k", 1)[0]
		if _, err := osdtest.Put(ctx, cl, "sizes", key, []byte("after"), client.PutOptions{}); err != nil {
			t.Fatalf("put to pg %d.%x with osd.%d gone, the others up: %v", pool.Id, seed, gone, err)
		}
	}
}

// adoptEdit makes the next map of c with edit and has every running OSD
// adopt it.
func adoptEdit(t *testing.T, c *osdtest.Cluster, edit func(pb *osdpb.ClusterMap)) {
	t.Helper()
	next, err := c.Map.With(edit)
	if err != nil {
		t.Fatal(err)
	}
	c.Map = next
	adoptAll(t, c, next)
}

// adoptAll has every running OSD of c adopt map m.
func adoptAll(t *testing.T, c *osdtest.Cluster, m *placement.Map) {
	t.Helper()
	for id, o := range c.OSDs {
		if o != nil {
			if err := o.AdoptMap(m); err != nil {
				t.Fatalf("osd.%d: %v", id, err)
			}
		}
	}
}

// TestStrayRemovalsBackToBack: an OSD with many stray copies removes them
// one after another, not one per StrayInterval (an OSD that left hundreds
// of PGs took that many intervals to free them).
func TestStrayRemovalsBackToBack(t *testing.T) {
	const interval = 5 * time.Second
	ctx := ctxT(t, 2*time.Minute)
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16, Tweak: func(cfg *osd.Config) { cfg.StrayInterval = interval }})
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "strays"); err != nil {
		t.Fatal(err)
	}
	strays := func() int { return unemptiedStrays(ctx, t, c, pool) }
	// The copies each OSD holds at size 3: at size 1 those outside the
	// new acting sets are strays. Counted from before the change, as the
	// first removal may begin at once.
	held := map[uint32][]uint32{}
	for _, o := range c.OSDs {
		sids, err := o.Store().HeldPGs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sid := range sids {
			if inc, err := o.Store().PGBackfilling(ctx, sid); err == nil && !inc {
				held[o.ID()] = append(held[o.ID()], sid) // whole copies, as unemptiedStrays counts
			}
		}
	}
	adoptEdit(t, c, func(pb *osdpb.ClusterMap) {
		for _, p := range pb.Pools {
			if p.Id == pool.Id {
				p.Size, p.MinSize = 1, 0
			}
		}
	})
	start := time.Now()
	n := 0
	for id, sids := range held {
		for _, sid := range sids {
			if pg := placement.PGIDOf(sid); pg.Pool == pool.Id && !slices.Contains(c.Map.ActingSet(pool.Id, pg.Seed), id) {
				n++
			}
		}
	}
	if n < int(pool.PgCount) {
		t.Fatalf("%d stray copies at size 1, want at least %d", n, pool.PgCount)
	}
	// About 11 strays an OSD: one an interval would take 55 s.
	osdtest.Eventually(t, 60*time.Second, "every stray copy removed", func() bool { return strays() == 0 })
	if took := time.Since(start); took > 3*interval {
		t.Errorf("the stray copies took %v to go, more than 3 intervals of %v: one removal per interval", took.Round(time.Millisecond), interval)
	}
}

// unemptiedStrays counts the copies c's OSDs hold of pool's PGs they are
// not members of and have not emptied yet (store RemovePG).
func unemptiedStrays(ctx context.Context, t *testing.T, c *osdtest.Cluster, pool *osdpb.Pool) (n int) {
	t.Helper()
	for _, o := range c.OSDs {
		held, err := o.Store().HeldPGs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sid := range held {
			id := placement.PGIDOf(sid)
			if id.Pool != pool.Id || slices.Contains(c.Map.ActingSet(pool.Id, id.Seed), o.ID()) {
				continue
			}
			if inc, err := o.Store().PGBackfilling(ctx, sid); err == nil && !inc {
				n++
			}
		}
	}
	return n
}
