package osd_test

import (
	"errors"
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

// leaseCluster is three OSDs, size 3, no mon, with read leases of lease
// (0: osdtest's, 800 ms). It returns an
// object's key and its PG's acting set under the first map.
func leaseCluster(t *testing.T, bucket string, lease time.Duration) (*osdtest.Cluster, string, []uint32) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Size: 3, PGs: 8, Tweak: func(cfg *osd.Config) {
		if lease > 0 {
			cfg.ReadLease = lease
		}
	}})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	key := "k"
	if _, err := osdtest.Put(ctx, cl, bucket, key, []byte("v1"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	return c, key, c.Map.ActingSet(pool.Id, placement.PGOf(pool, bucket, key))
}

// clientOf is a client that takes its map from OSD id alone, so it sends
// to whoever that OSD's map names.
func clientOf(t *testing.T, c *osdtest.Cluster, id uint32) *client.Client {
	return c.Client(t, func(o *client.Options) {
		o.Seeds, o.RetryFor = []string{c.OSDs[id].PublicAddr()}, 300*time.Millisecond
	})
}

// TestReadLeaseLapses: a primary whose replicas stop answering its
// heartbeats (here: they stopped, and no mon changes the map) serves no
// more reads of their PGs once its read lease runs out: the PG is laggy
// (in its reported state too) and a get fails ServiceUnavailable, where it
// would have read its own copy. Once they answer again, reads go on.
func TestReadLeaseLapses(t *testing.T) {
	c, key, acting := leaseCluster(t, "lease", 0)
	ctx := ctxT(t, time.Minute)
	primary := acting[0]
	cl := clientOf(t, c, primary)
	if got, _, err := osdtest.Get(ctx, cl, "lease", key, client.GetOptions{}); err != nil || string(got) != "v1" {
		t.Fatalf("get with every lease held: %q %v", got, err)
	}
	for _, id := range acting[1:] {
		c.StopOSD(id)
	}
	var err error
	osdtest.Eventually(t, 10*time.Second, "the primary refuses reads once its lease lapsed", func() bool {
		_, _, err = osdtest.Get(ctx, cl, "lease", key, client.GetOptions{})
		return err != nil
	})
	if !errors.Is(err, client.ErrServiceUnavailable) || !strings.Contains(err.Error(), "laggy") {
		t.Fatalf("a get at a primary without a read lease: %v", err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "lease", key)
	if st := c.OSDs[primary].PGStatForTest(pool.Id, pg).GetState(); !strings.Contains(st, "laggy") {
		t.Fatalf("pg state without a read lease: %q", st)
	}
	if n := c.OSDs[primary].Stats().LaggyPGs; n == 0 {
		t.Fatal("Stats counts no laggy PG")
	}
	for _, id := range acting[1:] {
		c.StartOSD(id)
	}
	osdtest.Eventually(t, 20*time.Second, "reads once the replicas answer again", func() bool {
		got, _, err := osdtest.Get(ctx, cl, "lease", key, client.GetOptions{})
		return err == nil && string(got) == "v1"
	})
}

// cutOff drops every cluster message between OSD id and the others, both
// ways, until the test ends: its peers and it stop hearing each other
// (heartbeats, queries, replication), while clients still reach it.
func cutOff(t *testing.T, id uint32) {
	osd.ClusterReceived.Set(func(at, from uint32, _ osdpb.MsgType) bool { return (at == id) != (from == id) })
	t.Cleanup(func() { osd.ClusterReceived.Set(nil) })
}

// TestNoStaleReadsFromACutOffPrimary: a PG's primary is cut off from its
// peers while its clients still reach it, and a map reaching the others
// (not it) makes the next member the primary: the old one marked down for
// its silence, or marked out while up, or marked dead. Unless it is dead,
// the new primary takes no write (nor read) until the leases it granted
// the old one ran out; then a write of v2 through it is acknowledged, and a
// read through the old primary never answers v1 after that: its leases
// lapsed (laggy). With the old primary dead (its process gone, which the
// test only pretends), the new one serves at once.
func TestNoStaleReadsFromACutOffPrimary(t *testing.T) {
	for _, change := range []string{"down", "out", "dead"} {
		t.Run(change, func(t *testing.T) {
			// A lease long enough for the checks below to fall within,
			// past the 2 s a query of the cut-off primary takes to time
			// out (it is up in the "out" case, so it is asked).
			const lease = 6 * time.Second
			c, key, acting := leaseCluster(t, "cutoff", lease)
			ctx := ctxT(t, time.Minute)
			old := acting[0]
			oldCl := clientOf(t, c, old)
			if got, _, err := osdtest.Get(ctx, oldCl, "cutoff", key, client.GetOptions{}); err != nil || string(got) != "v1" {
				t.Fatalf("get before the cut: %q %v", got, err)
			}
			cutOff(t, old)
			next, err := c.Map.With(func(pb *osdpb.ClusterMap) {
				pb.Epoch++
				switch change {
				case "down":
					pb.Osds[old].Up = false
				case "out":
					pb.Osds[old].In = false
				case "dead":
					pb.Osds[old].Up, pb.Osds[old].Dead = false, true
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			changed := time.Now()
			for _, id := range acting[1:] {
				if err := c.OSDs[id].AdoptMap(next); err != nil {
					t.Fatal(err)
				}
			}
			pool, _ := next.PoolByName(placement.DefaultPoolName)
			pg := placement.PGOf(pool, "cutoff", key)
			successor, _ := next.Primary(pool.Id, pg)
			if successor == old || !slices.Contains(acting, successor) {
				t.Fatalf("the new map's primary is osd.%d (acting was %v)", successor, acting)
			}
			nextCl := clientOf(t, c, successor)
			_, err = osdtest.Put(ctx, nextCl, "cutoff", key, []byte("early"), client.PutOptions{})
			switch {
			case change == "dead" && err != nil:
				t.Fatalf("a put at the new primary of a dead one: %v", err)
			case change == "down" && (err == nil || !strings.Contains(err.Error(), "previous primary's read lease")):
				t.Fatalf("a put at the new primary %v after the map change: %v; want it to wait", time.Since(changed), err)
			case change == "out" && !errors.Is(err, client.ErrServiceUnavailable):
				// Its PG peers (the old primary is queried, and times
				// out) and then waits; or the meta PG, whose primary
				// changed too, does.
				t.Fatalf("a put at the new primary %v after the map change: %v; want it to wait", time.Since(changed), err)
			}
			if change != "dead" {
				// Out and up, the old primary is queried first: peering
				// waits for the query's timeout, then the lease's.
				if st := c.OSDs[successor].PGStatForTest(pool.Id, pg).GetState(); !strings.Contains(st, "wait") && (change != "out" || st != "peering") {
					t.Fatalf("the waiting pg's state: %q", st)
				}
			}
			newCl := c.Client(t, func(o *client.Options) { o.Seeds = []string{c.OSDs[successor].PublicAddr()} })
			if _, err := osdtest.Put(ctx, newCl, "cutoff", key, []byte("v2"), client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(changed); change != "dead" && took < lease/2 {
				t.Errorf("v2 acknowledged %v after the change, inside the old primary's lease (%v)", took, lease)
			}
			if change == "dead" {
				return // dead says its process is gone: here it is not, and may read on a lease
			}
			got, _, err := osdtest.Get(ctx, oldCl, "cutoff", key, client.GetOptions{})
			if err == nil {
				t.Fatalf("the cut-off primary answered %q after v2 was acknowledged through its successor", got)
			}
			if !strings.Contains(err.Error(), "laggy") {
				t.Fatalf("a get at the cut-off primary: %v; want laggy", err)
			}
		})
	}
}

// TestRestartedSuccessorWaits: the OSD that becomes a PG's primary
// restarted within a lease of the change, so it no longer knows what it
// granted the old primary (cut off, marked down, still serving): it waits
// a lease after its start all the same.
func TestRestartedSuccessorWaits(t *testing.T) {
	const lease = 3 * time.Second
	c, key, acting := leaseCluster(t, "restart", lease)
	ctx := ctxT(t, time.Minute)
	old, successor := acting[0], acting[1]
	oldCl := clientOf(t, c, old)
	if got, _, err := osdtest.Get(ctx, oldCl, "restart", key, client.GetOptions{}); err != nil || string(got) != "v1" {
		t.Fatalf("get before the cut: %q %v", got, err)
	}
	cutOff(t, old)
	c.StopOSD(successor)
	c.StartOSD(successor)
	down, err := c.OSDs[successor].Map().With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[old].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range acting[1:] {
		if err := c.OSDs[id].AdoptMap(down); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := osdtest.Put(ctx, clientOf(t, c, successor), "restart", key, []byte("early"), client.PutOptions{}); err == nil ||
		!strings.Contains(err.Error(), "previous primary's read lease") {
		t.Fatalf("a put at the restarted successor: %v; want it to wait", err)
	}
	newCl := c.Client(t, func(o *client.Options) { o.Seeds = []string{c.OSDs[successor].PublicAddr()} })
	if _, err := osdtest.Put(ctx, newCl, "restart", key, []byte("v2"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := osdtest.Get(ctx, oldCl, "restart", key, client.GetOptions{}); err == nil {
		t.Fatalf("the cut-off primary answered %q after v2 was acknowledged", got)
	}
}

// TestLeasesOfDifferentLengths: the new primary's own lease is shorter
// than the old primary's; it waits out the old one's, as its pings said.
func TestLeasesOfDifferentLengths(t *testing.T) {
	long, short := 3*time.Second, 300*time.Millisecond
	longFor := uint32(1 << 31) // none yet
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Size: 3, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.ReadLease = short
		if cfg.ID == longFor {
			cfg.ReadLease = long
		}
	}})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "lengths"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	// A key osd.0 leads, restarted with the long lease.
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("k%d", i)
		if p, _ := c.Map.Primary(pool.Id, placement.PGOf(pool, "lengths", key)); p == 0 {
			break
		}
	}
	if _, err := osdtest.Put(ctx, cl, "lengths", key, []byte("v1"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "lengths", key))
	c.StopOSD(0)
	longFor = 0
	c.StartOSD(0)
	oldCl := clientOf(t, c, 0)
	osdtest.Eventually(t, 10*time.Second, "osd.0 serves with leases", func() bool {
		got, _, err := osdtest.Get(ctx, oldCl, "lengths", key, client.GetOptions{})
		return err == nil && string(got) == "v1"
	})
	// The successor's start is more than a lease (its own) behind it.
	cutOff(t, 0)
	down, err := c.OSDs[acting[1]].Map().With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[0].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	for _, id := range acting[1:] {
		if err := c.OSDs[id].AdoptMap(down); err != nil {
			t.Fatal(err)
		}
	}
	newCl := c.Client(t, func(o *client.Options) { o.Seeds = []string{c.OSDs[acting[1]].PublicAddr()} })
	if _, err := osdtest.Put(ctx, newCl, "lengths", key, []byte("v2"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(changed); took < long/2 {
		t.Fatalf("v2 acknowledged %v after the change: the successor waited its own lease (%v), not the old primary's (%v)", took, short, long)
	}
	if got, _, err := osdtest.Get(ctx, oldCl, "lengths", key, client.GetOptions{}); err == nil {
		t.Fatalf("the cut-off primary answered %q after v2 was acknowledged", got)
	}
}

// TestConditionalWriteNeedsTheLease: a conditional write reads the
// primary's copy to check its condition: a primary whose leases lapsed
// refuses it (laggy) rather than judge it on a copy that may be old.
func TestConditionalWriteNeedsTheLease(t *testing.T) {
	c, key, acting := leaseCluster(t, "cond", 0)
	ctx := ctxT(t, time.Minute)
	old := acting[0]
	oldCl := clientOf(t, c, old)
	if _, _, err := osdtest.Get(ctx, oldCl, "cond", key, client.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	cutOff(t, old)
	osdtest.Eventually(t, 10*time.Second, "the cut-off primary's leases lapse", func() bool {
		_, _, err := osdtest.Get(ctx, oldCl, "cond", key, client.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "laggy")
	})
	// Its copy does not match: with its leases it would answer
	// PreconditionFailed, which may be wrong by now.
	_, err := osdtest.Put(ctx, oldCl, "cond", key, []byte("v3"), client.PutOptions{IfMatch: `"0123456789abcdef0123456789abcdef"`})
	if err == nil || errors.Is(err, client.ErrPreconditionFailed) || !strings.Contains(err.Error(), "laggy") {
		t.Fatalf("a conditional put at a primary without leases: %v; want laggy", err)
	}
}
