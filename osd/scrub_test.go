package osd_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
)

// TestDeepScrub: a deep scrub of a replica's PG copy finds the object
// that rotted there (no get would: gets go to the primary) and repairs it
// from another member; an object damaged on every member is counted as a
// scrub error until the PG's next scrub finds it rewritten.
func TestDeepScrub(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) {
		cfg.DeepScrubInterval = -1 // the test scrubs by hand
	})
	body := osdtest.Payload(1<<20+5, 1)
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pg := placement.PGOf(pool, "rot", "k")
	acting := c.Map.ActingSet(pool.Id, pg)
	replica := c.OSDs[acting[2]]

	res, err := replica.DeepScrub(ctx, pool.Id, pg)
	if err != nil || res.Objects != 1 || res.Bytes != uint64(len(body)) || res.Damaged != 0 {
		t.Fatalf("scrub of an intact copy: %+v, %v", res, err)
	}
	damageDataFile(t, c, acting[2], body, 700_000)
	res, err = replica.DeepScrub(ctx, pool.Id, pg)
	if err != nil || res.Damaged != 1 || res.Repaired != 1 {
		t.Fatalf("scrub of a copy with a damaged object: %+v, %v; want 1 damaged, 1 repaired", res, err)
	}
	if _, got, err := replica.Store().ReadRange(ctx, "rot", "k", 0, -1, nil); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the replica's copy after the scrub: %d bytes, %v", len(got), err)
	}
	if st := replica.Stats(); st.ScrubRepaired != 1 || st.ScrubErrors != 0 || st.ScrubbedObjects != 2 {
		t.Fatalf("replica's stats: %+v", st)
	}

	// Every copy damaged: the primary's scrub cannot repair it.
	for _, id := range acting {
		damageDataFile(t, c, id, body, 200_000)
	}
	primary := c.OSDs[acting[0]]
	res, err = primary.DeepScrub(ctx, pool.Id, pg)
	if err != nil || res.Damaged != 1 || res.Repaired != 0 {
		t.Fatalf("scrub with every copy damaged: %+v, %v; want 1 damaged, 0 repaired", res, err)
	}
	if n := primary.Stats().ScrubErrors; n != 1 {
		t.Fatalf("primary reports %d scrub errors, want 1", n)
	}
	// The client rewrites the object: the next scrub finds it whole.
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, err = primary.DeepScrub(ctx, pool.Id, pg); err != nil || res.Damaged != 0 {
		t.Fatalf("scrub after the rewrite: %+v, %v", res, err)
	}
	if n := primary.Stats().ScrubErrors; n != 0 {
		t.Fatalf("primary still reports %d scrub errors after a clean scrub", n)
	}
}

// TestDeepScrubScheduled: with a short DeepScrubInterval the OSDs scrub
// on their own, and a replica's damaged copy is repaired with nobody
// reading it.
func TestDeepScrubScheduled(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) {
		cfg.DeepScrubInterval = 300 * time.Millisecond
		cfg.ScrubBytesPerSec = -1
	})
	body := osdtest.Payload(1<<20, 2)
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "rot", "k"))[1]
	damageDataFile(t, c, id, body, 500_000)
	deadline := time.Now().Add(30 * time.Second)
	for c.OSDs[id].Stats().ScrubRepaired == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("osd.%d repaired nothing in 30 s of scrubs every 300 ms: %+v", id, c.OSDs[id].Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, got, err := c.OSDs[id].Store().ReadRange(ctx, "rot", "k", 0, -1, nil); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("osd.%d's copy after its scrub: %d bytes, %v", id, len(got), err)
	}
}

// TestDeepScrubRequested: an admin's request scrubs at once a PG's copies
// on every member (a damaged replica copy repaired), even on OSDs that
// never scrub on their own; an OSD asked for all its PGs queues each copy
// it holds.
func TestDeepScrubRequested(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) {
		cfg.DeepScrubInterval = -1 // --no-scrub: only requests
		cfg.ScrubBytesPerSec = -1
	})
	body := osdtest.Payload(1<<20, 5)
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pg := placement.PGOf(pool, "rot", "k")
	acting := c.Map.ActingSet(pool.Id, pg)
	damageDataFile(t, c, acting[1], body, 123_456)
	osds, err := cl.DeepScrubPG(ctx, placement.PGID{Pool: pool.Id, Seed: pg})
	if err != nil || !slices.Equal(osds, acting) {
		t.Fatalf("DeepScrubPG: %v, %v; want the acting set %v", osds, err, acting)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range acting {
		done := func(st osd.Stats) bool { return st.ScrubbedObjects > 0 }
		if id == acting[1] {
			done = func(st osd.Stats) bool { return st.ScrubRepaired == 1 }
		}
		for !done(c.OSDs[id].Stats()) {
			if time.Now().After(deadline) {
				t.Fatalf("osd.%d did not scrub pg %d.%x within 30 s of the request: %+v", id, pool.Id, pg, c.OSDs[id].Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	n, err := cl.DeepScrubOSD(ctx, acting[0])
	if err != nil || n < 2 { // the object's PG and the meta PG at least
		t.Fatalf("DeepScrubOSD: %d queued, %v", n, err)
	}
	if _, err := cl.DeepScrubPG(ctx, placement.PGID{Pool: 77, Seed: 1}); err == nil {
		t.Fatal("DeepScrubPG of a pool that does not exist: no error")
	}
}
