package osd_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestRemappedPGServesWhileUpSetFills: an OSD comes in and placement moves
// one of a PG's replicas onto it; the map keeps the PG's old acting set as
// its pg_temp entry (as the mon primes it). The old members go on serving
// with three whole copies, writes included, while the newcomer is
// backfilled beside them: the PG is remapped and backfilling, its copies
// misplaced, none degraded. Once the newcomer holds the PG its primary
// says so (PGStat.up_filled); the map that drops the entry makes the up
// set act, and the member it replaced removes its copy as a stray.
func TestRemappedPGServesWhileUpSetFills(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.StrayInterval = 100 * time.Millisecond }})
	ctx := ctxT(t, 2*time.Minute)
	const newcomer = 3
	without, in := newcomerMaps(t, c, newcomer)
	pool, _ := in.PoolByName(placement.DefaultPoolName)
	seed, sid := replicaPG(t, pool, in, newcomer)
	old := without.ActingSet(pool.Id, seed)
	with, err := in.With(func(pb *osdpb.ClusterMap) {
		pb.PgTemp = []*osdpb.PGTemp{{Pool: pool.Id, Pg: seed, Osds: old}}
	})
	if err != nil {
		t.Fatal(err)
	}
	up := with.UpSet(pool.Id, seed)
	var replaced uint32
	for _, id := range old {
		if !slices.Contains(up, id) {
			replaced = id
		}
	}
	primary := old[0]
	t.Logf("pg %d.%x: acting %v (pg_temp), up %v; osd.%d replaced by osd.%d", pool.Id, seed, old, up, replaced, newcomer)

	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "remap"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < 5; i++ {
		if k := fmt.Sprintf("k%04d", i); placement.PGOf(pool, "remap", k) == seed {
			keys = append(keys, k)
		}
	}
	want := map[string][]byte{}
	put := func(key string, gen uint64) {
		t.Helper()
		want[key] = osdtest.Payload(5000, gen)
		if _, err := osdtest.Put(ctx, cl, "remap", key, want[key], client.PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	for i, k := range keys[:4] {
		put(k, uint64(i))
	}
	// Hold the newcomer's walk at its first object.
	releaseOnce := holdWalk(ctx, t, "remap", func() { adoptAll(t, c, with) })

	// The primary publishes its state just after it pushed.
	var st *osdpb.PGStat
	osdtest.Eventually(t, 10*time.Second, "the primary reports the PG active", func() bool {
		st = c.OSDs[primary].PGStatForTest(pool.Id, seed)
		return hasWords(st.State, "active")
	})
	if !hasWords(st.State, "active", "backfilling", "remapped") || strings.Contains(st.State, "degraded") ||
		st.Degraded != 0 || st.Misplaced == 0 || st.UpFilled {
		t.Errorf("while the newcomer fills: %+v; want active+backfilling+remapped, misplaced copies, none degraded", st)
	}
	// Three whole copies serve: a write goes on, and lands on the
	// replaced member too (it is acting).
	put(keys[4], 40)
	if _, got, err := c.OSDs[replaced].Store().ReadRange(ctx, "remap", keys[4], 0, -1, nil); err != nil || !bytes.Equal(got, want[keys[4]]) {
		t.Errorf("the replaced member, still acting, lacks the write made while the newcomer filled: %v", err)
	}

	releaseOnce()
	osdtest.Eventually(t, 30*time.Second, "the primary says the up set holds the PG", func() bool {
		st := c.OSDs[primary].PGStatForTest(pool.Id, seed)
		return st.UpFilled && st.State == "active+clean+remapped" && st.Misplaced == 0
	})
	ns := c.OSDs[newcomer].Store()
	for key, data := range want {
		if _, got, err := ns.ReadRange(ctx, "remap", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
			t.Errorf("newcomer's %s: %v", key, err)
		}
	}

	// The entry goes: the up set acts, the replaced member is a stray.
	final, err := with.With(func(pb *osdpb.ClusterMap) { pb.PgTemp = nil })
	if err != nil {
		t.Fatal(err)
	}
	adoptAll(t, c, final)
	newPrimary := up[0]
	osdtest.Eventually(t, 30*time.Second, "the up set serves the PG clean", func() bool {
		return c.OSDs[newPrimary].PGStatForTest(pool.Id, seed).State == "active+clean"
	})
	osdtest.Eventually(t, 30*time.Second, fmt.Sprintf("osd.%d removes its stray copy", replaced), func() bool {
		for _, err := range c.OSDs[replaced].Store().PGObjects(ctx, sid, "", "") {
			return err != nil
		}
		return true
	})
	for key, data := range want {
		if got, _, err := osdtest.Get(ctx, cl, "remap", key, client.GetOptions{}); err != nil || !bytes.Equal(got, data) {
			t.Errorf("get %s after the change: %v", key, err)
		}
	}
}

// hasWords reports whether Ceph state string s has every word, as the OSD
// itself reads its states (osd.HasStateForTest).
func hasWords(s string, words ...string) bool {
	for _, w := range words {
		if !osd.HasStateForTest(s, w) {
			return false
		}
	}
	return true
}
