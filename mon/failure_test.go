package mon

import (
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// trackerMap is a map of OSDs 0..len(hosts)-1 on the given hosts, all up
// from epoch 2, at epoch 10.
func trackerMap(t *testing.T, hosts ...string) *placement.Map {
	t.Helper()
	pb := &osdpb.ClusterMap{Epoch: 10, Fsid: "f", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 3, PgCount: 8}}}
	for i, h := range hosts {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: uint32(i), PublicAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 6800+i),
			ClusterAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 7800+i), Weight: 1, Up: true, In: true, Host: h, UpFrom: 2})
	}
	mp, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

func failureOf(reporter, target uint32, failedFor time.Duration) *osdpb.MonFailure {
	return &osdpb.MonFailure{Reporter: reporter, Target: target, Epoch: 10, FailedForNanos: int64(failedFor)}
}

func TestFailureTrackerReporters(t *testing.T) {
	const grace = 20 * time.Second
	now := time.Unix(1000, 0)
	mp := trackerMap(t, "a", "b", "c", "d")
	ft := newFailureTracker(grace, 2)

	if down, _ := ft.report(mp, failureOf(0, 3, grace), now); down {
		t.Fatal("one reporter marked osd.3 down")
	}
	// The same reporter again does not make two.
	if down, _ := ft.report(mp, failureOf(0, 3, grace+time.Second), now); down {
		t.Fatal("one reporter, twice, marked osd.3 down")
	}
	// A second reporter, but not failed for the grace yet.
	if down, _ := ft.report(mp, failureOf(1, 3, grace/2), now); down {
		t.Fatal("a report under the grace counted")
	}
	// ... until it has aged: due finds it.
	if ids, _ := ft.due(mp, now.Add(grace/4)); len(ids) != 0 {
		t.Fatalf("due too early: %v", ids)
	}
	ids, whys := ft.due(mp, now.Add(grace/2))
	if len(ids) != 1 || ids[0] != 3 {
		t.Fatalf("due after the report aged: %v", ids)
	}
	t.Log(whys[0])

	// Alive withdraws a report.
	ft = newFailureTracker(grace, 2)
	ft.report(mp, failureOf(0, 3, grace), now)
	alive := failureOf(0, 3, 0)
	alive.Alive = true
	ft.report(mp, alive, now)
	if down, _ := ft.report(mp, failureOf(1, 3, grace), now); down {
		t.Fatal("a withdrawn report still counted")
	}

	// Reports older than twice the grace are dropped.
	ft = newFailureTracker(grace, 2)
	ft.report(mp, failureOf(0, 3, grace), now)
	if down, _ := ft.report(mp, failureOf(1, 3, grace), now.Add(2*grace+time.Second)); down {
		t.Fatal("a stale report counted")
	}

	// Immediate: one reporter suffices.
	ft = newFailureTracker(grace, 2)
	imm := failureOf(2, 3, 0)
	imm.Immediate = true
	if down, _ := ft.report(mp, imm, now); !down {
		t.Fatal("an immediate report did not mark down")
	}
}

func TestFailureTrackerIgnores(t *testing.T) {
	const grace = 20 * time.Second
	now := time.Unix(1000, 0)
	mp := trackerMap(t, "a", "b", "c")
	pb := mp.Proto()
	pb.Osds[1].Up = false
	withDown, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	imm := func(reporter, target uint32, epoch uint64) *osdpb.MonFailure {
		f := failureOf(reporter, target, 0)
		f.Immediate, f.Epoch = true, epoch
		return f
	}
	ft := newFailureTracker(grace, 1)
	for _, c := range []struct {
		what string
		mp   *placement.Map
		f    *osdpb.MonFailure
	}{
		{"a down reporter", withDown, imm(1, 2, 10)},
		{"a target already down", withDown, imm(0, 1, 10)},
		{"a report about a previous incarnation", mp, imm(0, 2, 1)},
		{"an unknown target", mp, imm(0, 9, 10)},
		{"an unknown reporter", mp, imm(9, 2, 10)},
		{"a reporter reporting itself", mp, imm(2, 2, 10)},
	} {
		if down, _ := ft.report(c.mp, c.f, now); down {
			t.Errorf("%s marked down", c.what)
		}
	}
	// A reporter that goes down no longer counts.
	ft = newFailureTracker(grace, 2)
	ft.report(mp, failureOf(1, 2, grace), now)
	if down, _ := ft.report(withDown, failureOf(0, 2, grace), now); down {
		t.Fatal("a report from a reporter now down counted")
	}
}

func TestFailureTrackerHosts(t *testing.T) {
	const grace = 20 * time.Second
	now := time.Unix(1000, 0)
	// osd.0 and osd.1 share host a: their reports count once.
	mp := trackerMap(t, "a", "a", "b", "c")
	ft := newFailureTracker(grace, 2)
	ft.report(mp, failureOf(0, 3, grace), now)
	if down, _ := ft.report(mp, failureOf(1, 3, grace), now); down {
		t.Fatal("two reporters on one host counted twice")
	}
	if down, _ := ft.report(mp, failureOf(2, 3, grace), now); !down {
		t.Fatal("reporters on two hosts did not mark down")
	}
	// When every OSD is on one host, each OSD counts.
	one := trackerMap(t, "a", "a", "a")
	ft = newFailureTracker(grace, 2)
	ft.report(one, failureOf(0, 2, grace), now)
	if down, _ := ft.report(one, failureOf(1, 2, grace), now); !down {
		t.Fatal("a single-host cluster can never mark down by reports")
	}
}

// TestFailureReportsMarkDown drives reports through a mon: one reporter is
// not enough, two are; an immediate one is.
func TestFailureReportsMarkDown(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, m.Addr())
	for n := range 3 {
		mustBoot(t, c, bootOf(n))
	}
	grace := m.cfg.HeartbeatGrace
	report := func(f *osdpb.MonFailure) {
		t.Helper()
		f.Fsid, f.Epoch = m.FSID(), m.Map().Epoch()
		if err := c.ReportFailure(ctxFor(t, 10*time.Second), f); err != nil {
			t.Fatal(err)
		}
	}
	report(failureOf(0, 2, grace+time.Second))
	if o := osdOf(t, m.Map(), 2); !o.Up {
		t.Fatal("one reporter marked osd.2 down")
	}
	report(failureOf(1, 2, grace+time.Second))
	if o := osdOf(t, m.Map(), 2); o.Up || o.DownSinceUnixNano == 0 || o.Dead {
		// Silent is not dead: it may still serve (docs/osd.md, Read leases).
		t.Fatalf("two reporters did not mark osd.2 down, alive: %v", o)
	}

	if rep := mustBoot(t, c, bootOf(2)); time.Duration(rep.HeartbeatGraceNanos) != grace {
		t.Fatalf("the boot reply's grace: %v, want the mon's %v", time.Duration(rep.HeartbeatGraceNanos), grace)
	}
	imm := failureOf(0, 2, 0)
	imm.Immediate = true
	report(imm)
	if o := osdOf(t, m.Map(), 2); o.Up || !o.Dead {
		t.Fatalf("an immediate report did not mark osd.2 down and dead: %v", o)
	}
	// A beacon from the OSD now says: boot again.
	err := c.Beacon(ctxFor(t, 10*time.Second), &osdpb.MonBeacon{Fsid: m.FSID(), Id: 2, Uuid: "uuid-2"})
	if statusOf(err) != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Fatalf("beacon of a down OSD: %v", err)
	}
	mustBoot(t, c, bootOf(2))
	if o := osdOf(t, m.Map(), 2); !o.Up || o.Dead {
		t.Fatalf("osd.2 booted again, still dead: %v", o)
	}
	// Another cluster's report is refused.
	f := failureOf(0, 1, 0)
	f.Immediate, f.Fsid = true, "other"
	if err := c.ReportFailure(ctxFor(t, 10*time.Second), f); statusOf(err) != osdpb.Status_WRONG_CLUSTER {
		t.Fatalf("report with another fsid: %v", err)
	}
}

// TestLeaseExpiry: an OSD that stops beaconing is marked down after about
// the grace, and out after the down-out interval; one that beacons stays
// up.
func TestLeaseExpiry(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.HeartbeatGrace = 2 * time.Second
	cfg.DownOutInterval = time.Second
	m := startTestMon(t, cfg)
	c := newTestClient(t, nil, m.Addr())
	for n := range 2 {
		mustBoot(t, c, bootOf(n))
	}
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				c.Beacon(ctxFor(t, 5*time.Second), &osdpb.MonBeacon{Fsid: m.FSID(), Id: 0, Uuid: "uuid-0", Epoch: m.Map().Epoch()})
			}
		}
	}()
	defer func() { close(stop); <-beating }()

	start := time.Now()
	eventually(t, 15*time.Second, "osd.1 marked down by lease expiry", func() bool { return !osdOf(t, m.Map(), 1).Up })
	took := time.Since(start)
	t.Logf("osd.1 down after %v (grace %v)", took, cfg.HeartbeatGrace)
	if osdOf(t, m.Map(), 1).Dead {
		t.Fatal("osd.1, marked down for its expired lease, is dead in the map: it may still run")
	}
	if took < cfg.HeartbeatGrace/2 {
		t.Fatalf("osd.1 marked down after %v, well before the grace", took)
	}
	if !osdOf(t, m.Map(), 0).Up {
		t.Fatal("osd.0, which beacons, was marked down")
	}
	eventually(t, 10*time.Second, "osd.1 marked out after the down-out interval", func() bool {
		o := osdOf(t, m.Map(), 1)
		return !o.In && o.AutoOut
	})
	if o := osdOf(t, m.Map(), 0); !o.Up || !o.In {
		t.Fatalf("osd.0 after osd.1's down-out: %v", o)
	}
}

// TestMarkMeDown: an OSD that stops cleanly asks to be marked down and is,
// at once and at a new epoch, though the grace is long. It may ask only
// for itself: another OSD, or a client, is refused and nothing changes.
// A request from an earlier incarnation (sent before the OSD booted
// again) marks the new one nothing down.
func TestMarkMeDown(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.NoAuth = false
	cfg.HeartbeatGrace = time.Minute
	m := startTestMon(t, cfg)
	ctx := ctxFor(t, 30*time.Second)
	bootstrap := authClient(t, m.Addr(), keyringOf(t, m, "client.bootstrap-osd", BootstrapOSDCaps))
	var osds [2]*monclient.Client
	for n := range osds {
		rep, err := bootstrap.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: fmt.Sprintf("uuid-%d", n)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Ids[0] != uint32(n) {
			t.Fatalf("osd create gave id %d, want %d", rep.Ids[0], n)
		}
		osds[n] = authClient(t, m.Addr(), mustKeyring(t, rep))
		b := bootOf(n)
		b.HasId, b.Id = true, uint32(n)
		mustBoot(t, osds[n], b)
	}
	req := func(id uint32) *osdpb.MonMarkMeDown {
		mp := m.Map()
		return &osdpb.MonMarkMeDown{Fsid: m.FSID(), Id: id, Uuid: osdOf(t, mp, id).Uuid, Epoch: mp.Epoch()}
	}

	before := m.Map().Epoch()
	_, err := osds[0].MarkMeDown(ctx, req(1))
	wantDenied(t, err, "osd.0 may not ask to be marked down for osd.1")
	admin := authClient(t, m.Addr(), keyringOf(t, m, "client.admin", AdminCaps))
	_, err = admin.MarkMeDown(ctx, req(1))
	wantDenied(t, err, "client.admin may not ask to be marked down (needs mon 'allow profile osd')")
	if o := osdOf(t, m.Map(), 1); !o.Up || m.Map().Epoch() != before {
		t.Fatalf("refused requests changed the map: epoch %d (was %d), osd.1 %v", m.Map().Epoch(), before, o)
	}

	stale := req(1)
	epoch, err := osds[1].MarkMeDown(ctx, req(1))
	if err != nil {
		t.Fatalf("osd.1 asking to be marked down: %v", err)
	}
	mp := m.Map()
	if o := osdOf(t, mp, 1); o.Up || !o.Dead || o.DownSinceUnixNano == 0 || epoch != before+1 || mp.Epoch() != epoch {
		t.Fatalf("after osd.1's mark-me-down: reply epoch %d, map epoch %d (was %d), osd.1 %v", epoch, mp.Epoch(), before, o)
	}
	if !osdOf(t, mp, 0).Up {
		t.Fatal("osd.1's mark-me-down marked osd.0 down")
	}
	// Asking again changes nothing and is no error: the reply may have
	// been lost.
	if _, err := osds[1].MarkMeDown(ctx, stale); err != nil || m.Map().Epoch() != epoch {
		t.Fatalf("a second mark-me-down: %v, epoch %d (was %d)", err, m.Map().Epoch(), epoch)
	}

	b := bootOf(1)
	b.HasId, b.Id = true, 1
	mustBoot(t, osds[1], b)
	if _, err := osds[1].MarkMeDown(ctx, stale); err != nil {
		t.Fatalf("a stale mark-me-down: %v", err)
	}
	if !osdOf(t, m.Map(), 1).Up {
		t.Fatal("a mark-me-down from before osd.1's boot marked the new incarnation down")
	}

	wrong := req(1)
	wrong.Uuid = "uuid-other"
	_, err = osds[1].MarkMeDown(ctx, wrong)
	if statusOf(err) != osdpb.Status_WRONG_CLUSTER {
		t.Fatalf("mark-me-down with another daemon's uuid: %v", err)
	}
	wrong = req(1)
	wrong.Fsid = "other"
	if _, err = osds[1].MarkMeDown(ctx, wrong); statusOf(err) != osdpb.Status_WRONG_CLUSTER {
		t.Fatalf("mark-me-down with another fsid: %v", err)
	}
	wrong = req(1)
	wrong.Epoch = 0
	if _, err = osds[1].MarkMeDown(ctx, wrong); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("mark-me-down without an epoch: %v", err)
	}
	if !osdOf(t, m.Map(), 1).Up {
		t.Fatal("a refused mark-me-down marked osd.1 down")
	}
}
