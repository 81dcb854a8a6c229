package osd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestNewStoreBuildsNoMachineBeforeBoot: an OSD booting on a new store
// builds no peering machine, and answers no query, until the mon has
// acknowledged that store: the map it holds meanwhile may show it a
// member with its old store's born, and a machine built on that would take
// its empty copy for a witness of what the old one held (and could go
// active on nothing, rolling the others' writes back later).
func TestNewStoreBuildsNoMachineBeforeBoot(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 4})
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const pg = 0
	sid, _ := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	acting := c.Map.ActingSet(pool.Id, pg)
	var fresh uint32
	for _, o := range c.OSDs {
		if id := o.ID(); id != acting[0] && id != acting[1] && id != acting[2] {
			fresh = id
		}
	}
	c.OSDs[fresh].SetFreshStoreForTest(true)
	// acting[2] out: the fresh OSD joins the PG.
	adoptEdit(t, c, func(pb *osdpb.ClusterMap) { pb.Osds[acting[2]].In = false })
	osdtest.Eventually(t, 10*time.Second, "the fresh OSD asked about the pg", func() bool {
		_, err := c.OSDs[fresh].QueryForTest(pool.Id, pg, acting[0])
		return errors.Is(err, ops.ErrServiceUnavailable)
	})
	if c.OSDs[fresh].HasMachineForTest(sid) {
		t.Fatal("a machine built on a new store before its boot was acknowledged")
	}
	c.OSDs[fresh].SetFreshStoreForTest(false)
	osdtest.Eventually(t, 10*time.Second, "the booted OSD answers", func() bool {
		_, err := c.OSDs[fresh].QueryForTest(pool.Id, pg, acting[0])
		return err == nil && c.OSDs[fresh].HasMachineForTest(sid)
	})
}
