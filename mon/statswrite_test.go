package mon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestStatsWrittenThrough: the leader writes an OSD's beacon record to
// etcd at once when what the health checks and PG states read of it
// changes, and otherwise once every statsEvery, however often the OSD
// beacons; its own status reads the newest record it holds, a standby's
// what etcd has; an OSD marked down leaves its last beacon in etcd.
func TestStatsWrittenThrough(t *testing.T) {
	a, b, _ := leaderAndStandby(t, 6*time.Second) // statsEvery: 3 s
	c := newTestClient(t, nil, a.Addr())
	mustBoot(t, c, bootOf(0))
	mp := a.Map()
	beacon := func(ops uint64, state string) {
		t.Helper()
		bc := beaconOf(mp, 0)
		bc.Ops = ops
		bc.Pgs = []*osdpb.PGStat{{Pool: 1, Pg: 0, State: state, Objects: ops, Epoch: mp.Epoch()}}
		if err := c.Beacon(ctxFor(t, 5*time.Second), bc); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() (rec beaconRecord, version int64) {
		t.Helper()
		resp, err := a.cli.Get(ctxFor(t, 5*time.Second), a.k.stats(0))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("stats/0 in etcd: %v, %v", resp, err)
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
			t.Fatal(err)
		}
		return rec, resp.Kvs[0].Version
	}
	seen := func(m *Mon) *beaconRecord {
		t.Helper()
		rs, err := m.beacons(ctxFor(t, 5*time.Second))
		if err != nil || rs[0] == nil {
			t.Fatalf("mon.%s's records: %v, %v", m.cfg.Name, rs, err)
		}
		return rs[0]
	}

	beacon(1, "active+clean")
	first, v0 := stored()
	if first.Ops != 1 {
		t.Fatalf("the first beacon's record: %+v", first)
	}
	// Counters alone: held back (one write per statsEvery at most, however
	// long the beacons took on a loaded machine), but the leader's status
	// has them.
	t0 := time.Now()
	for ops := uint64(2); ops <= 20; ops++ {
		beacon(ops, "active+clean")
	}
	elapsed := time.Since(t0)
	rec, v := stored()
	if allowed := int64(elapsed / a.cfg.statsEvery()); v-v0 > allowed {
		t.Fatalf("19 beacons of counters in %v wrote %d records (ops %d), want at most %d (one per %v)", elapsed, v-v0, rec.Ops, allowed, a.cfg.statsEvery())
	}
	if r := seen(a); r.Ops != 20 || r.PGs[0].Objects != 20 {
		t.Fatalf("the leader's status reads ops %d, objects %d; want its newest beacon's 20", r.Ops, r.PGs[0].Objects)
	}
	if r := seen(b); v == v0 && r.Ops != 1 {
		t.Fatalf("the standby's status reads ops %d; want etcd's 1", r.Ops)
	}
	// A PG's state changed: written at once, counters and all, and the
	// standby reads it.
	beacon(21, "active+clean+scrubbing")
	if rec, v2 := stored(); v2 != v+1 || rec.Ops != 21 || rec.PGs[0].State != "active+clean+scrubbing" {
		t.Fatalf("a state change: %d records written, ops %d, state %q", v2-v, rec.Ops, rec.PGs[0].State)
	}
	if r := seen(b); r.PGs[0].State != "active+clean+scrubbing" {
		t.Fatalf("the standby reads state %q", r.PGs[0].State)
	}
	// Counters keep changing: written again once statsEvery passed.
	ops := uint64(22)
	eventually(t, 3*a.cfg.statsEvery(), "the counters written after statsEvery", func() bool {
		beacon(ops, "active+clean+scrubbing")
		ops++
		rec, _ := stored()
		return rec.Ops > 21
	})
	// Marked down: its last beacon, held back, is written first.
	beacon(1000, "active+clean+scrubbing")
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{0}})
	if rec, _ := stored(); rec.Ops != 1000 {
		t.Fatalf("after osd down, etcd holds ops %d; want the last beacon's 1000", rec.Ops)
	}
}
