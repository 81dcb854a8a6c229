package mon

import (
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestEpochCatchesUpWithTheOSDs: a beacon from an OSD that holds a newer
// map than the mon's (etcd restored from an older snapshot) moves the
// map past the OSD's epoch, so the next command's map is one the OSDs
// take; an epoch far past any history moves nothing.
func TestEpochCatchesUpWithTheOSDs(t *testing.T) {
	e := startTestEtcd(t)
	mon := startTestMon(t, testConfig(e, "a"))
	cl := newTestClient(t, nil, mon.Addr())
	mustBoot(t, cl, bootOf(0))
	was := mon.Map().Epoch()
	// osd.0 holds maps up to was+4, made before the restore.
	bc := beaconOf(mon.Map(), 0)
	bc.Epoch = was + 4
	if err := cl.Beacon(ctxFor(t, 10*time.Second), bc); err != nil {
		t.Fatal(err)
	}
	if got := mon.Map().Epoch(); got != was+5 {
		t.Fatalf("after a beacon of epoch %d, the mon's map is at %d; want %d", was+4, got, was+5)
	}
	rep := mustCommand(t, cl, &osdpb.MonCommand{Prefix: "osd set", Var: "noout"})
	if rep.Epoch != was+6 || mon.Map().Epoch() != was+6 {
		t.Fatalf("the next command's map: epoch %d (mon at %d), want %d", rep.Epoch, mon.Map().Epoch(), was+6)
	}
	// Stored as any map: a past epoch reads back.
	if _, err := mon.store.get(ctxFor(t, 5*time.Second), was+5); err != nil {
		t.Fatalf("the caught-up map in the history: %v", err)
	}
	// An epoch no history reaches: no jump.
	bc = beaconOf(mon.Map(), 0)
	bc.Epoch = mon.Map().Epoch() + maxCatchUp + 1
	if err := cl.Beacon(ctxFor(t, 10*time.Second), bc); err != nil {
		t.Fatal(err)
	}
	if got := mon.Map().Epoch(); got != was+6 {
		t.Fatalf("a beacon of epoch %d moved the map to %d", bc.Epoch, got)
	}
}
