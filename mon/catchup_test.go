package mon

import (
	"slices"
	"strings"
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
	// Stored as any map, and the maps before the jump are kept: past
	// epochs read back.
	for _, e := range []uint64{was, was + 5} {
		if _, err := mon.store.get(ctxFor(t, 5*time.Second), e); err != nil {
			t.Fatalf("epoch %d in the history after the catch-up: %v", e, err)
		}
	}
	// Again within a minute (an OSD that keeps claiming newer maps), or
	// an epoch no history reaches: no jump.
	for _, ahead := range []uint64{10, maxCatchUp + 1} {
		bc = beaconOf(mon.Map(), 0)
		bc.Epoch = mon.Map().Epoch() + ahead
		if err := cl.Beacon(ctxFor(t, 10*time.Second), bc); err != nil {
			t.Fatal(err)
		}
		if got := mon.Map().Epoch(); got != was+6 {
			t.Fatalf("a beacon of epoch %d moved the map to %d", bc.Epoch, got)
		}
	}
}

// TestMonNameTaken: a second mon under a running mon's name is refused at
// start, saying where the first runs, and leaves the first registered
// and leading; once the first stops, a mon of that name starts.
func TestMonNameTaken(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	_, err := Start(ctxFor(t, 20*time.Second), testConfig(e, "a"))
	if err == nil || !strings.Contains(err.Error(), "mon.a runs already, at "+a.Addr()) {
		t.Fatalf("a second mon.a: %v", err)
	}
	mons, err := a.mons(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(mons) != 1 || !mons[0].Up || mons[0].Addr != a.Addr() || !a.IsLeader() {
		t.Fatalf("after the refusal: %+v (leader %v)", mons, a.IsLeader())
	}
	if err := a.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	again := startTestMon(t, testConfig(e, "a"))
	eventually(t, 10*time.Second, "the new mon.a leads", again.IsLeader)
}

// TestClientsLearnTheMons: a subscriber given one mon learns of a mon
// started later (pushed to it) and is served by it once the mon it was
// given is gone, as Ceph's monmap lets a client outlive its mon_host.
func TestClientsLearnTheMons(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, a.Addr())
	if _, err := c.Subscribe(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	b := startTestMon(t, testConfig(e, "b"))
	eventually(t, 5*time.Second, "the client knows mon.b (pushed to it)", func() bool { return slices.Contains(c.Mons(), b.Addr()) })
	// mon.a given by name is the mon.a listed by IP: not tried twice.
	byName := newTestClient(t, nil, strings.Replace(a.Addr(), "127.0.0.1", "localhost", 1))
	if _, err := byName.Subscribe(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the client given mon.a as localhost to try it and mon.b, mon.a once", func() bool {
		got := byName.Mons()
		return len(got) == 2 && slices.Contains(got, b.Addr()) && !slices.Contains(got, a.Addr())
	})
	if err := a.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd set", Var: "noout"})
	if rep.Epoch == 0 || !b.IsLeader() {
		t.Fatalf("a command with mon.a gone: %+v (mon.b leads: %v)", rep, b.IsLeader())
	}
}
