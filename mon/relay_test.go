package mon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// TestStandbyRelaysBeacons: an OSD that reaches only a standby mon (the
// leader cut off from it) stays up on beacons the standby relays, past
// several graces, while an OSD that sends none is marked down; the leader
// still acts on what the relayed beacons say (a fullness change reaches the
// map) and status names the OSDs it hears only through a standby, until one
// reaches it directly again. A beacon of an OSD marked down is refused by
// the standby as by the leader ("boot again").
func TestStandbyRelaysBeacons(t *testing.T) {
	a, b, cfg := leaderAndStandby(t, 2*time.Second)

	direct := newTestClient(t, nil, a.Addr())
	mustBoot(t, direct, bootOf(0))
	mustBoot(t, direct, bootOf(1))
	booted := time.Now()
	eventually(t, 10*time.Second, "mon.b at the leader's epoch", func() bool { return b.Map().Epoch() == a.Map().Epoch() })

	// A beacon that says nothing of the leader is sent on to it: no relay.
	if err := newTestClient(t, nil, b.Addr()).Beacon(ctxFor(t, 5*time.Second), beaconOf(a.Map(), 0)); err != nil {
		t.Fatal(err)
	}
	if st := statusCmd(t, direct); hasCheck(st, "reach the leader mon only through") {
		t.Fatalf("a beacon that did not ask was relayed: %q", st.Health.Checks)
	}
	// osd.0 reaches only mon.b (a client that knows no other mon), and
	// says the leader is out of reach (as the mon client does when its
	// last attempt there failed): mon.b relays its beacons.
	viaB, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{b.Addr()}, Name: "client.test",
		Logger: testLogger(), Timeout: 2 * time.Second, LeaderRetry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaB.Close() })
	send := func(f osdpb.Fullness) error {
		bc := beaconOf(a.Map(), 0)
		bc.UsedBytes, bc.AvailBytes, bc.Fullness = 870, 130, f
		bc.LeaderUnreachable = true
		return viaB.Beacon(ctxFor(t, 5*time.Second), bc)
	}
	if err := send(osdpb.Fullness_FULLNESS_NONE); err != nil {
		t.Fatalf("a beacon through the standby: %v", err)
	}
	stop := make(chan struct{})
	beating := make(chan error, 1)
	go func() {
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				beating <- nil
				return
			case <-tk.C:
				if err := send(osdpb.Fullness_FULLNESS_NONE); err != nil {
					beating <- err
					return
				}
			}
		}
	}()
	eventually(t, 15*time.Second, "osd.1, silent, marked down by lease expiry", func() bool { return !osdOf(t, a.Map(), 1).Up })
	// Three graces after the boot, osd.0 must still be up: its lease was
	// renewed by mon.b alone.
	for time.Since(booted) < 3*cfg.HeartbeatGrace {
		if !osdOf(t, a.Map(), 0).Up {
			t.Fatalf("osd.0 marked down %v after its boot, though it beaconed through mon.b", time.Since(booted))
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	if err := <-beating; err != nil {
		t.Fatalf("a beacon through the standby: %v", err)
	}

	st := statusCmd(t, viaB)
	if !hasCheck(st, "1 osds reach the leader mon only through standby mons") {
		t.Fatalf("status while osd.0 beacons through mon.b: %q", st.Health.Checks)
	}
	rep := mustCommand(t, viaB, &osdpb.MonCommand{Prefix: "health detail"})
	if !strings.Contains(rep.Output, "osd.0 reaches the leader only through mon.b") {
		t.Fatalf("health detail: %s", rep.Output)
	}

	// What only the leader does, it does for a relayed beacon too.
	before := a.Map().Epoch()
	if err := send(osdpb.Fullness_FULLNESS_NEARFULL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the relayed nearfull in the leader's map", func() bool {
		return osdOf(t, a.Map(), 0).Fullness == osdpb.Fullness_FULLNESS_NEARFULL && a.Map().Epoch() > before
	})

	// A failure report goes the way the beacons go: osd.0 finds osd.2's
	// connection refused, and the leader marks it down (dead) at once,
	// not when its lease runs out.
	mustBoot(t, direct, bootOf(2))
	eventually(t, 10*time.Second, "mon.b sees osd.2 up", func() bool { o, ok := b.Map().OSD(2); return ok && o.Up })
	f := failureOf(0, 2, 0)
	f.Fsid, f.Epoch, f.Immediate = a.FSID(), a.Map().Epoch(), true
	reported := time.Now()
	if err := viaB.ReportFailure(ctxFor(t, 5*time.Second), f); err != nil {
		t.Fatalf("a failure report through the standby: %v", err)
	}
	eventually(t, 10*time.Second, "osd.2 marked down (dead) on the relayed report", func() bool {
		o := osdOf(t, a.Map(), 2)
		return !o.Up && o.Dead
	})
	if took := time.Since(reported); took >= cfg.HeartbeatGrace {
		t.Fatalf("osd.2 marked down %v after the report: by its lease (grace %v), not the report", took, cfg.HeartbeatGrace)
	}
	// Through mon.b, not by its redirect (this client could follow one).
	if resp, err := b.cli.Get(ctxFor(t, 5*time.Second), b.k.relayFailure(0, 2)); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the report is not in etcd as relayed by mon.b: %v", err)
	}

	// So does a mark-me-down (osd.3 stops, or gives up a stuck disk).
	mustBoot(t, direct, bootOf(3))
	eventually(t, 10*time.Second, "mon.b sees osd.3 up", func() bool { o, ok := b.Map().OSD(3); return ok && o.Up })
	asked := time.Now()
	epoch, err := viaB.MarkMeDown(ctxFor(t, 5*time.Second), &osdpb.MonMarkMeDown{Fsid: a.FSID(), Id: 3, Uuid: bootOf(3).Uuid, Epoch: a.Map().Epoch()})
	if err != nil || epoch != 0 {
		t.Fatalf("a mark-me-down through the standby: epoch %d (want 0: relayed), %v", epoch, err)
	}
	eventually(t, 10*time.Second, "osd.3 marked down (dead) on the relayed request", func() bool {
		o := osdOf(t, a.Map(), 3)
		return !o.Up && o.Dead
	})
	if took := time.Since(asked); took >= cfg.HeartbeatGrace {
		t.Fatalf("osd.3 marked down %v after it asked: by its lease (grace %v)", took, cfg.HeartbeatGrace)
	}

	// Straight to the leader again: the warning goes.
	bc := beaconOf(a.Map(), 0)
	bc.Fullness = osdpb.Fullness_FULLNESS_NEARFULL
	if err := direct.Beacon(ctxFor(t, 5*time.Second), bc); err != nil {
		t.Fatal(err)
	}
	if st := statusCmd(t, direct); hasCheck(st, "reach the leader mon only through") {
		t.Fatalf("status after a beacon to the leader: %q", st.Health.Checks)
	}

	// osd.1 is down: the standby refuses its beacon as the leader does.
	down := beaconOf(a.Map(), 1)
	down.LeaderUnreachable = true
	err = viaB.Beacon(ctxFor(t, 5*time.Second), down)
	if statusOf(err) != osdpb.Status_SERVICE_UNAVAILABLE || !strings.Contains(err.Error(), "boot again") {
		t.Fatalf("a down OSD's beacon through the standby: %v", err)
	}

	// Once mon.b leads, it takes osd.0's beacons itself.
	if err := a.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "mon.b leads", b.IsLeader)
	if err := send(osdpb.Fullness_FULLNESS_NEARFULL); err != nil {
		t.Fatalf("a beacon to the new leader: %v", err)
	}
	if st := statusCmd(t, viaB); hasCheck(st, "reach the leader mon only through") {
		t.Fatalf("status once mon.b leads: %q", st.Health.Checks)
	}
}

// TestNewLeaderTakesPendingMarkMeDown: a mark-me-down a standby relayed
// while no mon led (it is sent once: an OSD stops after it) is taken by
// the next leader from etcd, not only those relayed while it watches: the
// OSD is marked down and dead, not left to its lease.
func TestNewLeaderTakesPendingMarkMeDown(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a") // a grace of 30 s: the lease outlives the handover
	a := startTestMon(t, cfg)
	eventually(t, 10*time.Second, "mon.a leads", a.IsLeader)
	c := newTestClient(t, nil, a.Addr())
	mustBoot(t, c, bootOf(0))
	mp := a.Map()
	if err := a.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// As relayMarkMeDown leaves it, with no leader to watch.
	r := &osdpb.MonMarkMeDown{Fsid: mp.FSID(), Id: 0, Uuid: bootOf(0).Uuid, Epoch: mp.Epoch()}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	alive, err := cli.Get(ctxFor(t, 5*time.Second), a.k.alive(0))
	if err != nil || len(alive.Kvs) != 1 {
		t.Fatalf("osd.0's liveness key: %v", err)
	}
	v, err := proto.Marshal(&osdpb.RelayedMarkMeDown{Request: r, Mon: "c", AtUnixNanos: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxFor(t, 5*time.Second), a.k.relayMarkMeDown(0), string(v), clientv3.WithLease(clientv3.LeaseID(alive.Kvs[0].Lease))); err != nil {
		t.Fatal(err)
	}
	cfg.Name = "b"
	b := startTestMon(t, cfg)
	eventually(t, 15*time.Second, "mon.b leads", b.IsLeader)
	eventually(t, 10*time.Second, "osd.0 marked down (dead) by mon.b on the pending request", func() bool {
		o, ok := b.Map().OSD(0)
		return ok && !o.Up && o.Dead
	})
}

// TestStandbyRelaysBoots: an OSD that reaches only a standby mon (the
// leader cut off from it) boots through it, new or restarted: the standby
// brings back the leader's reply (the id, the map that marks it up, the
// grace); a boot the leader refuses is refused through the standby with
// the leader's reason; and the relay leaves nothing in etcd.
func TestStandbyRelaysBoots(t *testing.T) {
	a, b, cfg := leaderAndStandby(t, 0)
	direct := newTestClient(t, nil, a.Addr())
	first := mustBoot(t, direct, bootOf(0))
	viaB := newTestClient(t, nil, b.Addr())

	booted := func(what string, bt *osdpb.MonBoot) *osdpb.MonBootReply {
		t.Helper()
		bt.LeaderUnreachable = true
		rep := mustBoot(t, viaB, bt)
		if rep.RelayedBy != "b" || rep.Fsid != a.FSID() || rep.HeartbeatGraceNanos != int64(cfg.HeartbeatGrace) || rep.Map == nil {
			t.Fatalf("%s through mon.b: relayed by %q, fsid %q, grace %v, map %v", what, rep.RelayedBy, rep.Fsid,
				time.Duration(rep.HeartbeatGraceNanos), rep.Map != nil)
		}
		o := osdOf(t, a.Map(), rep.Id)
		if !o.Up || o.Uuid != bt.Uuid || o.UpFrom != rep.Map.Epoch {
			t.Fatalf("%s through mon.b: the leader's map has osd.%d up %v, uuid %q, up_from %d (reply's epoch %d)",
				what, rep.Id, o.Up, o.Uuid, o.UpFrom, rep.Map.Epoch)
		}
		return rep
	}
	if rep := booted("a new OSD's boot", bootOf(1)); rep.Id != 1 {
		t.Fatalf("the new OSD got id %d; want 1", rep.Id)
	}
	again := bootOf(0)
	again.Fsid, again.HasId, again.Id = a.FSID(), true, 0
	if rep := booted("osd.0's boot again", again); rep.Map.Epoch <= first.Map.Epoch {
		t.Fatalf("osd.0 booted again at epoch %d, not after its first boot's %d", rep.Map.Epoch, first.Map.Epoch)
	}

	// The leader's refusal, through the standby.
	other := bootOf(5)
	other.HasId, other.Id, other.LeaderUnreachable = true, 0, true
	_, err := viaB.Boot(ctxFor(t, 10*time.Second), other)
	if statusOf(err) != osdpb.Status_WRONG_CLUSTER || !strings.Contains(err.Error(), "belongs to another daemon") {
		t.Fatalf("another daemon's boot as osd.0 through mon.b: %v", err)
	}
	if o := osdOf(t, a.Map(), 0); o.Uuid != bootOf(0).Uuid || !o.Up {
		t.Fatalf("osd.0 after a refused boot: uuid %q, up %v", o.Uuid, o.Up)
	}

	eventually(t, 5*time.Second, "no relayed boot or reply left in etcd", func() bool {
		resp, err := b.cli.Get(ctxFor(t, 5*time.Second), b.k.pfx+"relayboot", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
}

// leaderAndStandby starts mon.a, the leader, and mon.b, a standby that
// knows it, on one etcd; grace, unless 0, is their heartbeat grace.
func leaderAndStandby(t *testing.T, grace time.Duration) (a, b *Mon, cfg Config) {
	t.Helper()
	e := startTestEtcd(t)
	cfg = testConfig(e, "a")
	if grace != 0 {
		cfg.HeartbeatGrace = grace
	}
	a = startTestMon(t, cfg)
	eventually(t, 10*time.Second, "mon.a leads", a.IsLeader)
	cfg.Name = "b"
	b = startTestMon(t, cfg)
	eventually(t, 5*time.Second, "mon.b knows the leader", func() bool { return b.Leader() == a.Addr() })
	return a, b, cfg
}

// TestRelayedBootTakenOnce: a boot a standby relayed while no mon led is
// booted by the next leader, which claims the request (deletes it) as it
// takes it and leaves its reply: a leader after it finds no request to
// boot again (only the reply, on the standby's lease, until it ends).
func TestRelayedBootTakenOnce(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	k := keys{pfx: defaultPrefix}
	lease, err := cli.Grant(ctxFor(t, 5*time.Second), 60)
	if err != nil {
		t.Fatal(err)
	}
	v, err := proto.Marshal(&osdpb.RelayedBoot{Boot: bootOf(0), Mon: "c", AtUnixNanos: time.Now().UnixNano(), Lease: int64(lease.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxFor(t, 5*time.Second), k.relayBoot("n1"), string(v), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	a := startTestMon(t, cfg)
	eventually(t, 15*time.Second, "mon.a leads", a.IsLeader)
	var rep osdpb.MonBootReply
	eventually(t, 10*time.Second, "the relayed boot answered", func() bool {
		resp, err := cli.Get(ctxFor(t, 5*time.Second), k.relayBootReply("n1"))
		return err == nil && len(resp.Kvs) == 1 && proto.Unmarshal(resp.Kvs[0].Value, &rep) == nil
	})
	if rep.Header.GetStatus() != osdpb.Status_OK {
		t.Fatalf("the relayed boot: %v", rep.Header)
	}
	if resp, err := cli.Get(ctxFor(t, 5*time.Second), k.relayBoot("n1")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the request is still in etcd once taken (%v)", err)
	}
}

// TestStandbyRedirectsAfterAFailover: a beacon that says a leader failed
// its sender, naming a leader that is not the one the standby knows (the
// old one, gone: a failover, no cut), is sent on to the current leader
// rather than relayed, and no MON_LEADER_UNREACHABLE follows; one naming
// the current leader is relayed.
func TestStandbyRedirectsAfterAFailover(t *testing.T) {
	a, b, _ := leaderAndStandby(t, 0)
	direct := newTestClient(t, nil, a.Addr())
	mustBoot(t, direct, bootOf(0))
	eventually(t, 10*time.Second, "mon.b at the leader's epoch", func() bool { return b.Map().Epoch() == a.Map().Epoch() })
	send := func(failed string) {
		t.Helper()
		bc := beaconOf(a.Map(), 0)
		bc.LeaderUnreachable, bc.UnreachableLeader = true, failed
		// A client that knows mon.b alone (one redirected knows mon.a).
		if err := newTestClient(t, nil, b.Addr()).Beacon(ctxFor(t, 5*time.Second), bc); err != nil {
			t.Fatal(err)
		}
	}
	// The leader's record of osd.0's newest beacon: taken in after t0,
	// and by which standby.
	recorded := func(t0 time.Time) (by string, ok bool) {
		rs, err := a.beacons(ctxFor(t, 5*time.Second))
		if err != nil || rs[0] == nil || rs[0].AtUnixNano < t0.UnixNano() {
			return "", false
		}
		return rs[0].RelayedBy, true
	}
	t0 := time.Now()
	send("tcp://127.0.0.1:1") // a leader that was
	eventually(t, 10*time.Second, "the beacon naming a former leader taken in", func() bool { _, ok := recorded(t0); return ok })
	if by, _ := recorded(t0); by != "" {
		t.Fatalf("a beacon naming a former leader was relayed by mon.%s", by)
	}
	if hasCheck(statusCmd(t, direct), "reach the leader mon only through standby mons") {
		t.Fatal("MON_LEADER_UNREACHABLE after a failover's beacon")
	}
	t1 := time.Now()
	send(a.Addr())
	eventually(t, 10*time.Second, "a beacon naming the current leader relayed", func() bool { by, _ := recorded(t1); return by == "mon.b" })
}
