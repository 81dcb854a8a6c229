package mon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// beaconAll sends each up OSD's beacon with state for the PGs it is
// primary of in mp, at mp's epoch.
// beaconOf is a beacon of OSD id under mp, saying nothing yet.
func beaconOf(mp *placement.Map, id uint32) *osdpb.MonBeacon {
	o, _ := mp.OSD(id)
	return &osdpb.MonBeacon{Fsid: mp.FSID(), Id: id, Uuid: o.Uuid, Epoch: mp.Epoch()}
}

func beaconAll(t *testing.T, c *monclient.Client, mp *placement.Map, state string) {
	t.Helper()
	for o := range mp.OSDs() {
		if !o.Up {
			continue
		}
		b := beaconOf(mp, o.Id)
		b.UsedBytes, b.AvailBytes = 100, 900
		for pool := range mp.Pools() {
			for pg, role := range mp.PGsOf(pool.Id, o.Id) {
				if role.IsPrimary() {
					b.Pgs = append(b.Pgs, &osdpb.PGStat{Pool: pool.Id, Pg: pg, State: state, Objects: 1, Epoch: mp.Epoch()})
				}
			}
		}
		if err := c.Beacon(ctxFor(t, 10*time.Second), b); err != nil {
			t.Fatalf("beacon of osd.%d: %v", o.Id, err)
		}
	}
}

func statusCmd(t *testing.T, c *monclient.Client) *Status {
	t.Helper()
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "status"})
	var st Status
	if err := json.Unmarshal([]byte(rep.Output), &st); err != nil {
		t.Fatalf("status output %q: %v", rep.Output, err)
	}
	return &st
}

// pgLs runs "pg ls" and checks it against st, the status of the same
// moment: one row per PG, in order, counted under the same states.
func pgLs(t *testing.T, c *monclient.Client, st *Status) []PGStat {
	t.Helper()
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "pg ls"})
	var pgs []PGStat
	if err := json.Unmarshal([]byte(rep.Output), &pgs); err != nil {
		t.Fatalf("pg ls output %q: %v", rep.Output, err)
	}
	byState := map[string]int{}
	for i, p := range pgs {
		byState[p.State]++
		want := placement.PGID{Pool: p.Pool, Seed: uint32(i)}
		if p.Seed != uint32(i) || p.PGID != want.String() {
			t.Errorf("pg ls row %d is %s (seed %d)", i, p.PGID, p.Seed)
		}
		if (len(p.Acting) == 0) != (p.Primary == -1) || len(p.Acting) > 0 && p.Primary != int64(p.Acting[0]) {
			t.Errorf("pg %s: primary %d, acting %v", p.PGID, p.Primary, p.Acting)
		}
	}
	if len(pgs) != st.PGTotal || !maps.Equal(byState, st.PGs) {
		t.Errorf("pg ls: %d PGs by state %v; status: %d, %v", len(pgs), byState, st.PGTotal, st.PGs)
	}
	return pgs
}

func hasCheck(st *Status, words string) bool {
	return slices.ContainsFunc(st.Health.Checks, func(c string) bool { return strings.Contains(c, words) })
}

func TestStatusHealth(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a")) // size 3, min_size 2, 16 PGs
	c := newTestClient(t, nil, m.Addr())

	st := statusCmd(t, c)
	if st.Health.Status != HealthWarn || !hasCheck(st, "no osds") || st.PGTotal != 16 || st.FSID != m.FSID() {
		t.Fatalf("empty cluster: %+v", st)
	}
	if len(st.Mons) != 1 || !st.Mons[0].Leader || st.Mons[0].Addr != m.Addr() {
		t.Fatalf("mons: %+v", st.Mons)
	}
	for n := range 3 {
		mustBoot(t, c, bootOf(n))
	}
	// Up, but nobody has reported: unknown.
	st = statusCmd(t, c)
	if st.Health.Status != HealthWarn || st.PGs["unknown"] != 16 || !hasCheck(st, "16 pgs unknown") {
		t.Fatalf("before reports: %+v", st)
	}
	for _, p := range pgLs(t, c, st) {
		if p.ReportedEpoch != 0 || p.Objects != 0 {
			t.Errorf("pg ls before reports: %+v", p)
		}
	}
	// A primary that reports it has no state yet: unknown too, in the
	// one check (it was a second, "16 pgs unknown" by the word).
	beaconAll(t, c, m.Map(), "unknown")
	st = statusCmd(t, c)
	if n := len(slices.DeleteFunc(slices.Clone(st.Health.Checks), func(c string) bool { return !strings.Contains(c, "unknown") })); n != 1 || !hasCheck(st, "16 pgs unknown (no state") {
		t.Fatalf("reported unknown: %d checks about it in %q", n, st.Health.Checks)
	}
	beaconAll(t, c, m.Map(), "active+clean")
	st = statusCmd(t, c)
	if st.Health.Status != HealthOK || st.PGs["active+clean"] != 16 || st.OSDs != (OSDCounts{3, 3, 3}) || st.Objects != 16 || st.UsedBytes != 300 {
		t.Fatalf("all reported clean: %+v", st)
	}

	// A report of PGs recovering: WARN, by state.
	beaconAll(t, c, m.Map(), "active+recovering+degraded")
	st = statusCmd(t, c)
	if st.Health.Status != HealthWarn || !hasCheck(st, "16 pgs recovering") || !hasCheck(st, "16 pgs degraded") {
		t.Fatalf("recovering: %+v", st)
	}

	// Members up, but fewer than min_size hold a whole copy (the others
	// being backfilled): ERR, inactive, not a warning about a word.
	beaconAll(t, c, m.Map(), "backfilling+degraded+peered")
	st = statusCmd(t, c)
	if st.Health.Status != HealthErr || !hasCheck(st, "16 pgs inactive: fewer than min_size members hold a whole copy") ||
		!hasCheck(st, "16 pgs backfilling") || hasCheck(st, "pgs peered") || st.PGs["backfilling+degraded+peered"] != 16 {
		t.Fatalf("backfilling below min_size: %+v", st)
	}

	// One OSD down: WARN (down, undersized), not ERR.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{2}})
	beaconAll(t, c, m.Map(), "active+undersized+degraded")
	st = statusCmd(t, c)
	if st.Health.Status != HealthWarn || !hasCheck(st, "1 osds down") || !hasCheck(st, "16 pgs undersized") {
		t.Fatalf("one OSD down: %+v", st)
	}
	for _, p := range pgLs(t, c, st) {
		if p.State != "active+undersized+degraded" || len(p.Acting) != 2 || slices.Contains(p.Acting, 2) || p.Objects != 1 || p.ReportedEpoch != m.Map().Epoch() {
			t.Errorf("pg ls with osd.2 down: %+v", p)
		}
	}
	// osd df: the up OSDs' beacons' space; none for the down one.
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd df"})
	var df []OSDReport
	if err := json.Unmarshal([]byte(rep.Output), &df); err != nil {
		t.Fatal(err)
	}
	if len(df) != 3 || df[0].UsedBytes != 100 || df[1].AvailBytes != 900 || df[2].Up || df[2].UsedBytes+df[2].AvailBytes != 0 || df[0].PGs != 16 {
		t.Errorf("osd df: %+v", df)
	}

	// Two down: every PG has one member, below min_size 2: ERR.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{1}})
	st = statusCmd(t, c)
	if st.Health.Status != HealthErr || !hasCheck(st, "2 osds down") || !hasCheck(st, "min_size") || st.PGs["undersized+degraded+peered"] != 16 ||
		!hasCheck(st, "16 pgs degraded") {
		t.Fatalf("two OSDs down: %+v", st)
	}
	t.Logf("checks: %q", st.Health.Checks)
	pgLs(t, c, st)

	// osd tree: every PG counted once as primary.
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd tree"})
	var tree []OSDTreeEntry
	if err := json.Unmarshal([]byte(rep.Output), &tree); err != nil {
		t.Fatal(err)
	}
	primaries := 0
	for _, o := range tree {
		primaries += o.PrimaryPGs
	}
	if len(tree) != 3 || primaries != 16 || !tree[0].Up || tree[1].Up || tree[0].Host != "host-0" {
		t.Fatalf("osd tree: %+v", tree)
	}
}

// TestComputeStatus covers what the mon derives without etcd: a PG with no
// OSD up is down (ERR); a primary's report of an older epoch does not
// count; a reported "incomplete" is ERR.
func TestComputeStatus(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c") // pool 1: size 3, 8 PGs; epoch 10
	now := time.Unix(1000, 0)
	reportAll := func(mp *placement.Map, state string, epoch uint64) map[uint32]*beaconRecord {
		out := map[uint32]*beaconRecord{}
		for o := range mp.OSDs() {
			r := &beaconRecord{ID: o.Id, AtUnixNano: now.UnixNano(), Epoch: epoch}
			for pg, role := range mp.PGsOf(1, o.Id) {
				if role.IsPrimary() {
					r.PGs = append(r.PGs, pgRecord{Pool: 1, PG: pg, State: state, Epoch: epoch})
				}
			}
			out[o.Id] = r
		}
		return out
	}
	st := computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "active+clean", 10), now: now, fresh: time.Minute})
	if st.Health.Status != HealthOK {
		t.Fatalf("clean: %+v", st.Health)
	}
	// Between two leaders (a mon restarted, its old election key not yet
	// expired) nobody acts on failures: the status says so.
	for _, lead := range []bool{true, false} {
		st = computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "active+clean", 10), now: now, fresh: time.Minute,
			mons: []MonStatus{{Name: "a", Addr: "tcp://127.0.0.1:1", Up: true, Leader: lead}}})
		noLeader := slices.ContainsFunc(st.Health.Checks, func(c string) bool { return strings.Contains(c, "no mon leads") })
		if want := map[bool]string{true: HealthOK, false: HealthWarn}[lead]; st.Health.Status != want || noLeader == lead {
			t.Fatalf("mon a leading %v: %+v", lead, st.Health)
		}
	}
	st = computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "active+clean", 9), now: now, fresh: time.Minute})
	if st.Health.Status != HealthWarn || st.PGs["unknown"] != 8 {
		t.Fatalf("stale reports: %+v %v", st.Health, st.PGs)
	}
	// A report of an older epoch whose map gave the PG the same acting set
	// (a flag changed since, say) still says the PG's state; one of a map
	// that placed it elsewhere does not.
	same, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch = 9; pb.Flags = nil })
	if err != nil {
		t.Fatal(err)
	}
	st = computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "active+clean", 9), now: now, fresh: time.Minute,
		past: map[uint64]*placement.Map{9: same}})
	if st.Health.Status != HealthOK || st.PGs["active+clean"] != 8 {
		t.Fatalf("reports of epoch 9, same acting sets: %+v %v", st.Health, st.PGs)
	}
	moved, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch = 9; pb.Osds[2].In = false })
	if err != nil {
		t.Fatal(err)
	}
	st = computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "active+clean", 9), now: now, fresh: time.Minute,
		past: map[uint64]*placement.Map{9: moved}})
	if st.PGs["unknown"] != 8 {
		t.Fatalf("reports of epoch 9, another acting set: %v", st.PGs)
	}

	// Former primaries, not yet told, still report the PGs they led: each
	// PG's state is its current primary's report all the same.
	withFormer := reportAll(mp, "active+clean", 10)
	for o := range mp.OSDs() {
		for pg, role := range mp.PGsOf(1, o.Id) {
			if !role.IsPrimary() {
				r := withFormer[o.Id]
				r.PGs = append(r.PGs, pgRecord{Pool: 1, PG: pg, State: "peering", Objects: 5, Epoch: 9})
			}
		}
	}
	st = computeStatus(statusInput{mp: mp, beacons: withFormer, now: now, fresh: time.Minute})
	if st.Health.Status != HealthOK || st.PGs["active+clean"] != 8 || st.Objects != 0 {
		t.Fatalf("with former primaries' reports: %+v %v, %d objects", st.Health, st.PGs, st.Objects)
	}
	// Remapped with nothing misplaced (an out OSD kept acting for want of
	// a replacement): no warning, as Ceph's; with copies to move, one.
	st = computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "active+clean+remapped", 10), now: now, fresh: time.Minute})
	if st.Health.Status != HealthOK || st.PGs["active+clean+remapped"] != 8 {
		t.Fatalf("remapped, nothing misplaced: %+v %v", st.Health, st.PGs)
	}
	moving := reportAll(mp, "active+backfilling+remapped", 10)
	for _, r := range moving {
		for i := range r.PGs {
			r.PGs[i].Misplaced = 1
		}
	}
	st = computeStatus(statusInput{mp: mp, beacons: moving, now: now, fresh: time.Minute})
	if st.Health.Status != HealthWarn || !hasCheck(st, "8 pgs remapped") || !hasCheck(st, "8 objects misplaced") {
		t.Fatalf("remapped, copies to move: %+v", st.Health)
	}
	st = computeStatus(statusInput{mp: mp, beacons: reportAll(mp, "incomplete", 10), now: now, fresh: time.Minute})
	if st.Health.Status != HealthErr || !hasCheck(st, "8 pgs incomplete") {
		t.Fatalf("incomplete: %+v", st.Health)
	}
	pb := mp.Proto()
	for _, o := range pb.Osds {
		o.Up = false
	}
	allDown, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	st = computeStatus(statusInput{mp: allDown, now: now})
	if st.Health.Status != HealthErr || st.PGs["down"] != 8 || !hasCheck(st, "3 osds down") {
		t.Fatalf("all down: %+v %v", st.Health, st.PGs)
	}

	// osd.2 reported every PG before it died (a former primary's records
	// of epoch 9); the primaries now have not reported yet: the PGs are
	// unknown, their objects those last reported, whoever reported them,
	// and a down OSD's record says nothing of space or rates.
	pb = mp.Proto()
	pb.Osds[2].Up = false
	twoUp, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	before := map[uint32]*beaconRecord{
		0: {ID: 0, AtUnixNano: now.UnixNano(), Epoch: 10}, 1: {ID: 1, AtUnixNano: now.UnixNano(), Epoch: 10},
		2: {ID: 2, AtUnixNano: now.UnixNano(), Epoch: 9, UsedBytes: 7, OpsPerSec: 9},
	}
	for pg := range uint32(8) {
		before[2].PGs = append(before[2].PGs, pgRecord{Pool: 1, PG: pg, State: "active+clean", Objects: 2, Degraded: 1, Epoch: 9})
	}
	st = computeStatus(statusInput{mp: twoUp, beacons: before, now: now, fresh: time.Minute})
	if st.PGs["unknown+undersized"] != 8 || st.Objects != 16 || st.DegradedObjects != 0 || st.UsedBytes != 0 || st.OpsPerSec != 0 {
		t.Fatalf("primaries yet to report, osd.2's last reports: %v, %d objects, %d degraded, %d used, %.0f ops/s", st.PGs, st.Objects, st.DegradedObjects, st.UsedBytes, st.OpsPerSec)
	}
	// The new primaries report the PGs down (waiting for a past member),
	// counting what their own stores hold: nothing. The objects are still
	// those the last primary that served the PGs counted.
	for o := range twoUp.OSDs() {
		if !o.Up {
			continue
		}
		for pg, role := range twoUp.PGsOf(1, o.Id) {
			if role.IsPrimary() {
				before[o.Id].PGs = append(before[o.Id].PGs, pgRecord{Pool: 1, PG: pg, State: "down", Epoch: 10})
			}
		}
	}
	st = computeStatus(statusInput{mp: twoUp, beacons: before, now: now, fresh: time.Minute})
	if st.Objects != 16 || st.PGs["down+undersized"] != 8 {
		t.Fatalf("primaries report the PGs down, osd.2 served them: %v, %d objects", st.PGs, st.Objects)
	}

	// osd.0 died and booted again (up from epoch 11) under the same
	// placement: its record from before, which the unchanged acting sets
	// would take as current, says nothing of its PGs until its first
	// beacon of this run.
	rebooted, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch = 11; pb.Osds[0].UpFrom = 11 })
	if err != nil {
		t.Fatal(err)
	}
	led := 0
	for _, role := range mp.PGsOf(1, 0) {
		if role.IsPrimary() {
			led++
		}
	}
	if led == 0 {
		t.Fatal("osd.0 leads no PG in this placement")
	}
	st = computeStatus(statusInput{mp: rebooted, beacons: reportAll(mp, "active+clean", 10), now: now, fresh: time.Minute,
		past: map[uint64]*placement.Map{10: mp}})
	if st.PGs["unknown"] != led || st.PGs["active+clean"] != 8-led {
		t.Fatalf("osd.0 rebooted, its record from before: %v, want its %d PGs unknown", st.PGs, led)
	}
}

// TestBeaconRates: recovery and op rates are measured over at least
// rateWindow, so an early beacon does not turn a burst into a spike, and a
// restarted OSD's counters start the rates again.
func TestBeaconRates(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	var prev *beaconRecord
	step := func(after time.Duration, recovered, ops uint64, wantRate, wantOps float64) {
		t.Helper()
		prev = newBeaconRecord(&osdpb.MonBeacon{Id: 1, RecoveryBytes: recovered, Ops: ops}, t0.Add(after), prev)
		if prev.RecoveryBytesPerSec != wantRate || prev.OpsPerSec != wantOps {
			t.Fatalf("at %v: %.0f B/s %.0f ops/s, want %.0f and %.0f", after, prev.RecoveryBytesPerSec, prev.OpsPerSec, wantRate, wantOps)
		}
	}
	step(0, 0, 0, 0, 0)
	step(500*time.Millisecond, 2<<20, 50, 0, 0)         // too early: no rate yet
	step(time.Second, 4<<20, 100, 4<<20, 100)           // over [0, 1s]
	step(1050*time.Millisecond, 8<<20, 100, 4<<20, 100) // 50 ms later: kept, not 80 MiB/s
	step(2*time.Second, 8<<20, 300, 4<<20, 200)         // over [1s, 2s]
	step(3*time.Second, 1<<20, 10, 0, 0)                // restarted: counters dropped
	step(4*time.Second, 3<<20, 110, 2<<20, 100)         // from the restart
}

// TestHealthDetail: "health detail" gives each check of the status, in the
// same order, with Ceph's code and a line per OSD or PG it is about; the
// status itself carries no detail.
func TestHealthDetail(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c", "d") // pool 1: size 3, 8 PGs; epoch 10
	mp, err := mp.With(func(pb *osdpb.ClusterMap) {
		pb.Osds[3].Up, pb.Osds[3].LostAt = false, 11
		pb.Flags = []string{placement.FlagNoOut}
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	beacons := map[uint32]*beaconRecord{}
	var undersized, degraded []string
	for o := range mp.OSDs() {
		if !o.Up {
			continue
		}
		r := &beaconRecord{ID: o.Id, AtUnixNano: now.UnixNano(), Epoch: mp.Epoch()}
		for pg, role := range mp.PGsOf(1, o.Id) {
			if !role.IsPrimary() {
				continue
			}
			rec := pgRecord{Pool: 1, PG: pg, State: "active+clean", Epoch: mp.Epoch()}
			if acting := mp.ActingSet(1, pg); len(acting) < 3 {
				rec.State, rec.Degraded = "active+undersized+degraded", 2
				undersized = append(undersized, fmt.Sprintf("pg 1.%x is active+undersized+degraded, acting %s", pg, ActingList(acting)))
				degraded = append(degraded, fmt.Sprintf("pg 1.%x has 2 objects degraded, acting %s", pg, ActingList(acting)))
			}
			r.PGs = append(r.PGs, rec)
		}
		beacons[o.Id] = r
	}
	if len(undersized) == 0 {
		t.Fatal("no PG lost a member with osd.3 down: the test tests nothing")
	}
	// pgViews goes in pool and seed order.
	slices.SortFunc(undersized, func(a, b string) int { return cmp.Compare(pgSeedOf(t, a), pgSeedOf(t, b)) })
	slices.SortFunc(degraded, func(a, b string) int { return cmp.Compare(pgSeedOf(t, a), pgSeedOf(t, b)) })
	in := statusInput{mp: mp, beacons: beacons, now: now, fresh: time.Minute}
	if st := computeStatus(in); st.Health.Detail != nil || st.Health.Status != HealthWarn {
		t.Fatalf("status: %+v, want HEALTH_WARN without detail", st.Health)
	}
	in.detail = true
	h := computeStatus(in).Health
	// One check per code: PG_DEGRADED's three lines merge, each PG once.
	want := []HealthCheck{
		{Code: "OSDMAP_FLAGS", Severity: HealthWarn, Summary: "noout flag(s) set", Detail: []string{}},
		{Code: "OSD_DOWN", Severity: HealthWarn, Summary: "1 osds down", Detail: []string{"osd.3 (host d) is down (lost)"}},
		{Code: "PG_DEGRADED", Severity: HealthWarn,
			Summary: fmt.Sprintf("%d pgs undersized; %d pgs degraded; %d objects degraded", len(undersized), len(undersized), 2*len(undersized)),
			Detail:  slices.Concat(undersized, degraded)},
	}
	var summaries []string
	for _, c := range h.Detail {
		summaries = append(summaries, c.Summary)
	}
	if got, checks := strings.Join(summaries, "; "), strings.Join(h.Checks, "; "); got != checks {
		t.Errorf("the checks' summaries say %q, Checks %q", got, checks)
	}
	if !reflect.DeepEqual(h.Detail, want) {
		t.Fatalf("detail:\n%+v\nwant\n%+v", h.Detail, want)
	}
}

// pgSeedOf is the seed of the PG a detail line ("pg 1.SEED ...") names.
func pgSeedOf(t *testing.T, line string) uint64 {
	t.Helper()
	var seed uint64
	if _, err := fmt.Sscanf(line, "pg 1.%x ", &seed); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return seed
}

// TestHealthByCode: checks of one code merge into one with the worse
// severity, their summaries joined and each detail line once.
func TestHealthByCode(t *testing.T) {
	got := byCode([]HealthCheck{
		{Code: "PG_AVAILABILITY", Severity: HealthErr, Summary: "1 pgs down", Detail: []string{"pg 1.0 is down"}},
		{Code: "OSD_DOWN", Severity: HealthWarn, Summary: "1 osds down", Detail: []string{"osd.1 is down"}},
		{Code: "PG_AVAILABILITY", Severity: HealthWarn, Summary: "2 pgs unknown", Detail: []string{"pg 1.0 is down", "pg 1.1 is unknown"}},
	})
	want := []HealthCheck{
		{Code: "PG_AVAILABILITY", Severity: HealthErr, Summary: "1 pgs down; 2 pgs unknown", Detail: []string{"pg 1.0 is down", "pg 1.1 is unknown"}},
		{Code: "OSD_DOWN", Severity: HealthWarn, Summary: "1 osds down", Detail: []string{"osd.1 is down"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("byCode:\n%+v\nwant\n%+v", got, want)
	}
}

// TestStalePGsKeepTheirLastReports: an OSD's beacon record outlives its
// lease, so when every OSD of a PG dies the PG is stale, as its primary
// last reported it (Ceph's stale+active+clean), with its last acting set,
// and its objects stay in status's and df's totals instead of vanishing
// with the OSDs.
func TestStalePGsKeepTheirLastReports(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.HeartbeatGrace = 2 * time.Second
	cfg.Pool = &osdpb.Pool{Id: 1, Name: "default", Size: 2, PgCount: 16}
	m := startTestMon(t, cfg)
	c := newTestClient(t, nil, m.Addr())
	for n := range 2 {
		mustBoot(t, c, bootOf(n))
	}
	beaconAll(t, c, m.Map(), "active+clean")
	reported, lastActing := m.Map().Epoch(), m.Map().ActingSet(1, 0)
	if st := statusCmd(t, c); st.PGs["active+clean"] != 16 || st.Objects != 16 {
		t.Fatalf("reported clean: %v, %d objects", st.PGs, st.Objects)
	}
	// A flag makes a new epoch; the OSDs' last beacons still report the
	// one before (their maps lag): the acting sets the reports were first
	// taken in under are kept for them.
	was := m.Map()
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd set", Var: "noout"})
	beaconAll(t, c, was, "active+clean")
	// Both fall silent: their leases expire and the mon marks them down.
	eventually(t, 20*time.Second, "both OSDs marked down by lease expiry", func() bool {
		return !osdOf(t, m.Map(), 0).Up && !osdOf(t, m.Map(), 1).Up
	})
	st := statusCmd(t, c)
	if st.Health.Status != HealthErr || st.PGs["stale+active+clean"] != 16 || st.Objects != 16 || !hasCheck(st, "16 pgs stale") {
		t.Fatalf("every OSD down: %+v", st)
	}
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "health detail"})
	var h Health
	if err := json.Unmarshal([]byte(rep.Output), &h); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(h.Detail, func(c HealthCheck) bool { return c.Code == "PG_AVAILABILITY" })
	if i < 0 || len(h.Detail[i].Detail) != 17 || !slices.Contains(h.Detail[i].Detail, "pg meta (the bucket records) has 0 OSDs up and in, acting []") ||
		h.Detail[i].Detail[0] != fmt.Sprintf("pg 1.0 is stale+active+clean, acting %s, last reported by osd.%d at epoch %d", ActingList(lastActing), lastActing[0], reported) {
		t.Fatalf("health detail: %+v", h.Detail)
	}
	for _, p := range pgLs(t, c, st) {
		if p.State != "stale+active+clean" || p.Objects != 1 || p.ReportedEpoch != reported || len(p.Acting) != 2 {
			t.Errorf("pg ls, every OSD down: %+v", p)
		}
	}
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "df"})
	var df DF
	if err := json.Unmarshal([]byte(rep.Output), &df); err != nil {
		t.Fatal(err)
	}
	if len(df.Pools) != 1 || df.Pools[0].Objects != 16 || df.TotalBytes != 0 {
		t.Fatalf("df, every OSD down: %+v", df)
	}
}

// TestSlowOpsCheck: SLOW_OPS sums the up OSDs' fresh reports of ops in
// flight too long, in Ceph's words, and names the replicas whose acks
// came too late, leaving out those the map has down since (OSD_DOWN says
// it); an OSD holding itself down says so in OSD_DOWN until its hold ends.
func TestSlowOpsCheck(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c", "d")
	mp, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Osds[3].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	beacons := primaryReports(mp, "active+clean", nil)
	for _, b := range beacons {
		b.AtUnixNano = now.UnixNano()
	}
	b0, b1 := beacons[0], beacons[1]
	b0.SlowOps, b0.OldestSlowOp, b0.OldestSlowOpType, b0.OpComplaintTime = 2, 41500*time.Millisecond, "put_object", 30*time.Second
	b1.SlowOps, b1.OldestSlowOp, b1.OldestSlowOpType, b1.OpComplaintTime = 1, 35*time.Second, "get_object", 30*time.Second
	b0.RepTimeouts = []repTimeoutRecord{{OSD: 2, Writes: 14, Timeout: 10 * time.Second}, {OSD: 3, Writes: 5, Timeout: 10 * time.Second}}
	b1.RepTimeouts = []repTimeoutRecord{{OSD: 2, Writes: 1, Timeout: 10 * time.Second}}
	beacons[3] = &beaconRecord{ID: 3, HeldDown: &heldDownRecord{UntilUnixNano: now.Add(5 * time.Minute).UnixNano(), Markdowns: 6, Period: 10 * time.Minute}}
	h := computeStatus(statusInput{mp: mp, beacons: beacons, now: now, fresh: time.Minute, detail: true}).Health
	check := func(code string) HealthCheck {
		t.Helper()
		i := slices.IndexFunc(h.Detail, func(c HealthCheck) bool { return c.Code == code })
		if i < 0 {
			t.Fatalf("no %s in %+v", code, h.Detail)
		}
		return h.Detail[i]
	}
	want := HealthCheck{Code: "SLOW_OPS", Severity: HealthWarn,
		Summary: "3 slow ops, oldest one blocked for 41 sec, daemons [osd.0, osd.1] have slow ops.; 15 writes failed in the last minute waiting for replica acks from [osd.2]",
		Detail: []string{
			"osd.0: 2 ops in flight for more than 30s, the oldest (put_object) for 42s",
			"osd.1: 1 ops in flight for more than 30s, the oldest (get_object) for 35s",
			"osd.0: 14 writes in the last minute failed after waiting 10s for osd.2's ack (osd.2 slow, its disk stalled, or the cluster network between them losing packets)",
			"osd.1: 1 writes in the last minute failed after waiting 10s for osd.2's ack (osd.2 slow, its disk stalled, or the cluster network between them losing packets)",
		}}
	if got := check("SLOW_OPS"); !reflect.DeepEqual(got, want) {
		t.Errorf("SLOW_OPS:\n%+v\nwant\n%+v", got, want)
	}
	const held = "osd.3 (host d) is down (held down by itself until 00:21:40: marked down 6 times within 10m0s while running; check its cluster network, or restart it to boot at once)"
	if got := check("OSD_DOWN").Detail; !slices.Equal(got, []string{held}) {
		t.Errorf("OSD_DOWN detail %q, want %q", got, held)
	}

	// Old reports say nothing: an OSD's beacon out of date, a hold over.
	later := now.Add(10 * time.Minute)
	h = computeStatus(statusInput{mp: mp, beacons: beacons, now: later, fresh: time.Minute, detail: true}).Health
	if i := slices.IndexFunc(h.Detail, func(c HealthCheck) bool { return c.Code == "SLOW_OPS" }); i >= 0 {
		t.Errorf("SLOW_OPS from beacons 10 minutes old: %+v", h.Detail[i])
	}
	if got := check("OSD_DOWN").Detail; !slices.Equal(got, []string{"osd.3 (host d) is down"}) {
		t.Errorf("OSD_DOWN detail %q after the hold", got)
	}
}

// TestStatusVersions: the status counts the builds of the daemons up
// ("unknown" for one that does not tell), and an OSD up without a feature
// other up OSDs have (mid-upgrade) is OSD_OLD_BUILD, naming what its
// presence turns off; with every OSD alike, old or new, nothing is said.
func TestStatusVersions(t *testing.T) {
	base := trackerMap(t, "a", "b", "c")
	now := time.Unix(1000, 0)
	mons := []MonStatus{{Name: "a", Up: true, Leader: true, Version: "v2"}, {Name: "b", Up: true, Version: "v2"},
		{Name: "c", Up: true}, {Name: "d", Version: "v1"}}
	mixed, err := base.With(func(pb *osdpb.ClusterMap) {
		for i, o := range pb.Osds {
			o.Features, o.Version = placement.Features, "v2"
			if i == 2 {
				o.Features, o.Version = 0, ""
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	st := computeStatus(statusInput{mp: mixed, now: now, mons: mons, detail: true})
	want := map[string]map[string]int{"mon": {"v2": 2, UnknownVersion: 1}, "osd": {"v2": 2, UnknownVersion: 1}}
	if fmt.Sprint(st.Versions) != fmt.Sprint(want) {
		t.Fatalf("versions %v, want %v", st.Versions, want)
	}
	var old *HealthCheck
	for i := range st.Health.Detail {
		if st.Health.Detail[i].Code == "OSD_OLD_BUILD" {
			old = &st.Health.Detail[i]
		}
	}
	if old == nil || !strings.Contains(old.Summary, "1 osds run an older build than the others; while they are up, pg_temp is off") ||
		len(old.Detail) != 1 || !strings.HasPrefix(old.Detail[0], "osd.2 runs a build without pg_temp") {
		t.Fatalf("mid-upgrade: %+v", st.Health)
	}
	upgraded, err := mixed.With(func(pb *osdpb.ClusterMap) { pb.Osds[2].Features, pb.Osds[2].Version = placement.Features, "v2" })
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range []*placement.Map{base, upgraded} {
		st := computeStatus(statusInput{mp: mp, now: now, mons: mons, detail: true})
		if slices.ContainsFunc(st.Health.Detail, func(c HealthCheck) bool { return c.Code == "OSD_OLD_BUILD" }) {
			t.Fatalf("OSDs all of one build: %+v", st.Health)
		}
	}
}
