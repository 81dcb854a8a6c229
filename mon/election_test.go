package mon

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFailover: two mons on one etcd. The standby refuses leader work
// with NOT_LEADER and the leader's address; a client given both follows
// it. When the leader closes, the standby leads within seconds and the
// client's requests and subscription go on.
func TestFailover(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	b := startTestMon(t, testConfig(e, "b"))
	if a.FSID() != b.FSID() {
		t.Fatalf("two mons, two fsids: %s %s", a.FSID(), b.FSID())
	}
	eventually(t, 5*time.Second, "exactly one leader", func() bool { return a.IsLeader() != b.IsLeader() })
	leader, standby := a, b
	if b.IsLeader() {
		leader, standby = b, a
	}
	eventually(t, 5*time.Second, "the standby knows the leader", func() bool { return standby.Leader() == leader.Addr() })

	// A client that knows only the standby is redirected.
	only := newTestClient(t, nil, standby.Addr())
	if rep := mustBoot(t, only, bootOf(0)); rep.Id != 0 {
		t.Fatalf("boot via the standby: id %d", rep.Id)
	}
	st, err := standby.Status(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var leaders []string
	for _, ms := range st.Mons {
		if ms.Leader {
			leaders = append(leaders, ms.Name)
		}
	}
	if len(st.Mons) != 2 || len(leaders) != 1 {
		t.Fatalf("status mons: %+v", st.Mons)
	}

	// The standby learns the boot's map from its etcd watch, after the
	// leader answered: the subscription may ask either mon.
	eventually(t, 10*time.Second, "the standby at the leader's epoch", func() bool {
		return standby.Map().Epoch() == leader.Map().Epoch()
	})
	rec := &mapRecorder{}
	c := newTestClient(t, rec, a.Addr(), b.Addr())
	mp, err := c.Subscribe(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if mp.Epoch() != leader.Map().Epoch() {
		t.Fatalf("subscribed at epoch %d, the leader has %d", mp.Epoch(), leader.Map().Epoch())
	}

	closedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := leader.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, 5*time.Second, "the standby leads", standby.IsLeader)
	t.Logf("standby leads %v after the leader closed", time.Since(closedAt))

	rep := mustBoot(t, c, bootOf(1))
	if rep.Id != 1 {
		t.Fatalf("boot after failover: id %d", rep.Id)
	}
	// The push of the new map reaches the subscriber (which moved to the
	// remaining mon) soon.
	eventually(t, 5*time.Second, "the subscriber sees the boot's map", func() bool {
		return c.Map() != nil && c.Map().Epoch() >= rep.Map.Epoch
	})

	// The closed mon is not forgotten: status warns it is down (Ceph's
	// MON_DOWN) until an operator removes it; a running mon cannot be.
	st, err = standby.Status(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	down := "mon." + leader.cfg.Name
	if !slices.ContainsFunc(st.Health.Checks, func(c string) bool { return strings.Contains(c, "1/2 mons down") }) || len(st.Mons) != 2 {
		t.Fatalf("status with %s closed: %+v, mons %+v", down, st.Health, st.Mons)
	}
	if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "mon rm", Var: standby.cfg.Name}); err == nil || !strings.Contains(err.Error(), "runs; stop it first") {
		t.Fatalf("mon rm of the running mon: %v", err)
	}
	for range 2 { // again: nothing to change
		if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "mon rm", Var: leader.cfg.Name}); err != nil {
			t.Fatalf("mon rm %s: %v", leader.cfg.Name, err)
		}
	}
	if st, err = standby.Status(ctxFor(t, 10*time.Second)); err != nil || len(st.Mons) != 1 ||
		slices.ContainsFunc(st.Health.Checks, func(c string) bool { return strings.Contains(c, "mons down") }) {
		t.Fatalf("status after mon rm: %v %+v, mons %+v", err, st.Health, st.Mons)
	}
	// Its registration lapsed (a stall past its etcd session), the mon
	// that answers does not call itself down.
	if _, err := standby.cli.Delete(ctxFor(t, 10*time.Second), standby.k.monsPrefix()+standby.cfg.Name); err != nil {
		t.Fatal(err)
	}
	if st, err = standby.Status(ctxFor(t, 10*time.Second)); err != nil || len(st.Mons) != 1 || !st.Mons[0].Up ||
		slices.ContainsFunc(st.Health.Checks, func(c string) bool { return strings.Contains(c, "mons down") }) {
		t.Fatalf("status of a mon whose registration lapsed: %v %+v, mons %+v", err, st.Health, st.Mons)
	}
}

// TestSubscriptionPushes: a change reaches a subscribed client within a
// second, through OnMap, in increasing epochs, whichever mon it is
// subscribed to.
func TestSubscriptionPushes(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	b := startTestMon(t, testConfig(e, "b"))
	admin := newTestClient(t, nil, a.Addr(), b.Addr())
	mustBoot(t, admin, bootOf(0))

	for _, mon := range []*Mon{a, b} {
		rec := &mapRecorder{}
		sub := newTestClient(t, rec, mon.Addr())
		mp, err := sub.Subscribe(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			start := time.Now()
			rep := mustCommand(t, admin, &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: float64(i + 2)})
			eventually(t, 5*time.Second, "the push arrives", func() bool { return sub.Map().Epoch() >= rep.Epoch })
			if d := time.Since(start); d > time.Second {
				t.Errorf("mon.%s: the push of epoch %d took %v", mon.cfg.Name, rep.Epoch, d)
			}
		}
		eventually(t, 5*time.Second, "OnMap has every map", func() bool {
			ep := rec.epochs()
			return len(ep) > 0 && ep[len(ep)-1] == sub.Map().Epoch()
		})
		ep := rec.epochs()
		if !slices.IsSorted(ep) || slices.Compact(slices.Clone(ep)) == nil || len(slices.Compact(slices.Clone(ep))) != len(ep) {
			t.Fatalf("OnMap epochs not strictly increasing: %v", ep)
		}
		if ep[0] != mp.Epoch() {
			t.Fatalf("OnMap began at %d, Subscribe returned %d", ep[0], mp.Epoch())
		}
	}
}

// TestFailoverAfterCrash: a leader that dies without resigning holds the
// election until its etcd session expires (2s here); then the standby
// leads, and a boot a client started meanwhile goes through.
func TestFailoverAfterCrash(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	b := startTestMon(t, testConfig(e, "b"))
	eventually(t, 5*time.Second, "exactly one leader", func() bool { return a.IsLeader() != b.IsLeader() })
	leader, standby := a, b
	if b.IsLeader() {
		leader, standby = b, a
	}
	c := newTestClient(t, nil, a.Addr(), b.Addr())
	mustBoot(t, c, bootOf(0))

	leader.abandon.Store(true)
	crashed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	leader.Close(ctx)
	cancel()
	rep := mustBoot(t, c, bootOf(1))
	t.Logf("boot answered %v after the crash; standby leads: %v", time.Since(crashed), standby.IsLeader())
	if rep.Id != 1 || !standby.IsLeader() {
		t.Fatalf("after the crash: id %d, standby leads %v", rep.Id, standby.IsLeader())
	}
	if d := time.Since(crashed); d > 8*time.Second {
		t.Fatalf("failover took %v", d)
	}
}

// TestLostElectionKeyStepsDown: a leader whose election key vanished
// while its session lives (so it was not told) cannot write, because every
// write is fenced by that key; it steps down and campaigns again.
func TestLostElectionKeyStepsDown(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, m.Addr())
	mustBoot(t, c, bootOf(0))
	l := m.lead.Load()
	if l == nil {
		t.Fatal("not leading")
	}
	ctx := ctxFor(t, 20*time.Second)
	if _, err := m.cli.Delete(ctx, m.k.election(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	before := m.Map().Epoch()
	_, err := l.command(ctx, osdCommand{prefix: "osd reweight", ids: []uint32{0}, weight: 3}, nil)
	if statusOf(err) != osdpb.Status_NOT_LEADER {
		t.Fatalf("write without the election key: %v", err)
	}
	if m.Map().Epoch() != before {
		t.Fatal("the unfenced write went through")
	}
	eventually(t, 10*time.Second, "leading again, on a new key", func() bool {
		nl := m.lead.Load()
		return nl != nil && nl != l
	})
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: 3})
}

// TestTakeoverRenewsOSDLeases: while no mon leads, nobody renews the OSDs'
// liveness leases, and with a short grace they expire during a failover.
// The new leader must not take that for dead OSDs (with a 3 s grace a
// leader's crash marked every OSD down): it grants each up OSD a fresh
// lease, one grace to beacon to it. An OSD that then stays silent is
// still marked down when that lease runs out.
func TestTakeoverRenewsOSDLeases(t *testing.T) {
	e := startTestEtcd(t)
	cfg := func(name string) Config {
		c := testConfig(e, name)
		c.HeartbeatGrace = 2 * time.Second
		return c
	}
	a := startTestMon(t, cfg("a"))
	eventually(t, 5*time.Second, "mon.a leads", a.IsLeader)
	c := newTestClient(t, nil, a.Addr())
	mustBoot(t, c, bootOf(0))
	a.abandon.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	a.Close(ctx)
	cancel()

	// Wait until the OSD's lease has expired, with no mon leading.
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	alive := keys{"/osprey/"}.alive(0)
	hasKey := func() bool {
		resp, err := cli.Get(ctxFor(t, 5*time.Second), alive)
		return err == nil && len(resp.Kvs) == 1
	}
	eventually(t, 10*time.Second, "the OSD's lease expires while no mon leads", func() bool { return !hasKey() })

	b := startTestMon(t, cfg("b"))
	eventually(t, 10*time.Second, "mon.b leads", b.IsLeader)
	eventually(t, 5*time.Second, "mon.b decides about osd.0", func() bool { return hasKey() || !osdOf(t, b.Map(), 0).Up })
	if o := osdOf(t, b.Map(), 0); !o.Up {
		t.Fatalf("the new leader marked osd.0 down for a lease that expired while no mon led (epoch %d)", b.Map().Epoch())
	}
	// Silent for the fresh grace too: down.
	eventually(t, 10*time.Second, "osd.0 down once its fresh lease expires", func() bool { return !osdOf(t, b.Map(), 0).Up })
}

// TestDeadFirstMon: a client whose first mon address accepts connections
// and never answers reaches the live mon after a short first try, not
// after its whole per-mon Timeout.
func TestDeadFirstMon(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	eventually(t, 5*time.Second, "mon.a leads", a.IsLeader)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := dead.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	c, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{"tcp://" + dead.Addr().String(), a.Addr()},
		Name: "client.test", Logger: testLogger(), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	rep := mustBoot(t, c, bootOf(0))
	took := time.Since(start)
	t.Logf("booted osd.%d through the live mon %v after trying the dead one", rep.Id, took.Round(time.Millisecond))
	if took >= 10*time.Second {
		t.Fatalf("the boot took %v: the dead mon cost the whole per-mon timeout (20s)", took)
	}
	mu.Lock()
	n := len(held)
	mu.Unlock()
	if n == 0 {
		t.Fatal("the dead mon was never tried")
	}
}
