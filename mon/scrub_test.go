package mon

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestScrubErrorsHealth: scrub errors an OSD's beacon reports make the
// health HEALTH_ERR with a line naming the OSDs and counts; a later
// beacon without them clears it.
func TestScrubErrorsHealth(t *testing.T) {
	m, c := cleanMon(t)
	beacon := func(id uint32, scrubErrors uint64) {
		t.Helper()
		b := beaconOf(m.Map(), id)
		b.UsedBytes, b.AvailBytes, b.ScrubErrors = 100, 900, scrubErrors
		if err := c.Beacon(ctxFor(t, 10*time.Second), b); err != nil {
			t.Fatal(err)
		}
	}
	if st := statusCmd(t, c); st.Health.Status != HealthOK {
		t.Fatalf("before any scrub error: %s %q", st.Health.Status, st.Health.Checks)
	}
	beacon(2, 3)
	beacon(0, 1)
	const want = "4 scrub errors: damaged objects no replica could repair on osd.0 (1), osd.2 (3)"
	if st := statusCmd(t, c); st.Health.Status != HealthErr || !hasCheck(st, want) {
		t.Fatalf("with scrub errors on osd.0 and osd.2: %s %q, want %q", st.Health.Status, st.Health.Checks, want)
	}
	beacon(2, 0)
	beacon(0, 0)
	// (These beacons carry no PG states: the PGs read unknown, a warning.)
	if st := statusCmd(t, c); st.Health.Status == HealthErr || slices.ContainsFunc(st.Health.Checks, func(c string) bool {
		return strings.Contains(c, "scrub errors")
	}) {
		t.Fatalf("after the errors were cleared: %s %q", st.Health.Status, st.Health.Checks)
	}
}

// TestInconsistentPGsHealth: a PG its primary reports inconsistent makes
// the health HEALTH_ERR with Ceph's PG_DAMAGED line (not a warning for its
// state's token as well) and counts its objects; the report of the PG
// repaired clears it.
func TestInconsistentPGsHealth(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, m.Addr())
	for n := range 3 {
		mustBoot(t, c, bootOf(n))
	}
	mp := m.Map()
	beaconAll(t, c, mp, "active+clean")
	// Every PG osd.0 leads, one of them inconsistent.
	report := func(inconsistent uint64) {
		t.Helper()
		b := beaconOf(mp, 0)
		b.UsedBytes, b.AvailBytes = 100, 900
		for pool := range mp.Pools() {
			for pg, role := range mp.PGsOf(pool.Id, 0) {
				if !role.IsPrimary() {
					continue
				}
				st := &osdpb.PGStat{Pool: pool.Id, Pg: pg, State: "active+clean", Objects: 1, Epoch: mp.Epoch()}
				if inconsistent > 0 {
					st.State, st.Inconsistent = "active+clean+inconsistent", inconsistent
					inconsistent = 0
				}
				b.Pgs = append(b.Pgs, st)
			}
		}
		if err := c.Beacon(ctxFor(t, 10*time.Second), b); err != nil {
			t.Fatal(err)
		}
	}
	report(2)
	const want = "Possible data damage: 1 pgs inconsistent"
	st := statusCmd(t, c)
	if st.Health.Status != HealthErr || !hasCheck(st, want) || len(st.Health.Checks) != 1 || st.InconsistentObjects != 2 {
		t.Fatalf("with an inconsistent pg: %s %q, %d inconsistent objects; want only %q, 2", st.Health.Status, st.Health.Checks, st.InconsistentObjects, want)
	}
	report(0)
	if st := statusCmd(t, c); st.Health.Status != HealthOK || st.InconsistentObjects != 0 {
		t.Fatalf("after the repair: %s %q", st.Health.Status, st.Health.Checks)
	}
}
