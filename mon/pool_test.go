package mon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestPoolSetEdit: "osd pool set" changes a pool's size and min_size
// within bounds, and refuses what would leave the pool unable to take
// writes by construction or names nothing it can change.
func TestPoolSetEdit(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c") // pool "p": size 3, min_size default (2)
	now := time.Unix(1000, 0)
	set := func(pb *osdpb.ClusterMap, v, val string) error {
		_, err := osdCommand{prefix: "osd pool set", pool: "p", variable: v, value: val}.apply(pb, now)
		return err
	}
	pb := mp.Proto()
	if err := set(pb, "size", "2"); err != nil || pb.Pools[0].Size != 2 || pb.Pools[0].MinSize != 0 {
		t.Fatalf("size 2: %v, %+v", err, pb.Pools[0])
	}
	if err := set(pb, "size", "2"); err != errNoChange {
		t.Fatalf("size 2 again: %v, want no change", err)
	}
	if err := set(pb, "min_size", "3"); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), "above its size 2") {
		t.Fatalf("min_size 3 over size 2: %v", err)
	}
	if err := set(pb, "min_size", "2"); err != nil || pb.Pools[0].MinSize != 2 {
		t.Fatalf("min_size 2: %v, %+v", err, pb.Pools[0])
	}
	if err := set(pb, "size", "1"); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), "--yes-i-really-mean-it") {
		t.Fatalf("size 1 without sure: %v", err)
	}
	// A new size sets min_size back to its default, as in Ceph.
	if err := set(pb, "size", "4"); err != nil || pb.Pools[0].Size != 4 || pb.Pools[0].MinSize != 0 {
		t.Fatalf("size 4: %v, %+v", err, pb.Pools[0])
	}
	// size 7 would need 4 members up with 3 OSDs in: no PG could write.
	if err := set(pb, "size", "7"); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), "min_size would be 4 with 3 OSDs in") {
		t.Fatalf("size 7 on 3 OSDs: %v", err)
	}
	if err := set(pb, "min_size", "4"); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), "no PG could take a write") {
		t.Fatalf("min_size 4 on 3 OSDs: %v", err)
	}
	for _, v := range []string{"7", "1"} {
		if _, err := (osdCommand{prefix: "osd pool set", pool: "p", variable: "size", value: v, sure: true}).apply(pb, now); err != nil {
			t.Fatalf("size %s, sure: %v", v, err)
		}
	}
	if pb.Pools[0].Size != 1 || pb.Pools[0].MinSize != 0 {
		t.Fatalf("size 1, sure: %+v", pb.Pools[0])
	}
	for _, c := range []struct{ pool, v, val, want string }{
		{"p", "size", "0", "from 1 to 10"},
		{"p", "size", "11", "from 1 to 10"},
		{"p", "size", "-1", "from 1 to 10"},
		{"p", "size", "two", "from 1 to 10"},
		{"p", "pg_num", "64", "fixed when the cluster is made"},
		{"p", "crush_rule", "1", "unknown variable"},
		{"nope", "size", "2", `no pool "nope"`},
		{"", "size", "2", "no pool named"},
	} {
		pb := mp.Proto()
		_, err := osdCommand{prefix: "osd pool set", pool: c.pool, variable: c.v, value: c.val}.apply(pb, now)
		if statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pool set %s %s %s: %v, want %q", c.pool, c.v, c.val, err, c.want)
		}
	}
}

// TestPoolSetCommand: through a mon, "osd pool set" makes a new map with
// the pool's new size, "osd pool ls" and status show it, and the PGs'
// acting sets follow (undersized with more replicas than OSDs).
func TestPoolSetCommand(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a")) // pool "default": size 3, 16 PGs
	c := newTestClient(t, nil, m.Addr())
	for n := range 3 {
		mustBoot(t, c, bootOf(n))
	}
	before := m.Map().Epoch()
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd pool set", Pool: "default", Var: "size", Val: "4"})
	if rep.Epoch != before+1 || !strings.Contains(rep.Output, "set pool default size to 4") {
		t.Fatalf("pool set: epoch %d (before %d), %s", rep.Epoch, before, rep.Output)
	}
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd pool ls"})
	var pools []PoolInfo
	if err := json.Unmarshal([]byte(rep.Output), &pools); err != nil || len(pools) != 1 || pools[0].Size != 4 || pools[0].MinSize != 2 {
		t.Fatalf("osd pool ls: %v %s", err, rep.Output)
	}
	beaconAll(t, c, m.Map(), "active+clean")
	st := statusCmd(t, c)
	if st.PGs["active+clean+undersized"] != 16 || !hasCheck(st, "16 pgs undersized") {
		t.Fatalf("size 4 on 3 OSDs: %v %q", st.PGs, st.Health.Checks)
	}
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd pool set", Pool: "default", Var: "size", Val: "1", Sure: true})
	beaconAll(t, c, m.Map(), "active+clean")
	if st := statusCmd(t, c); st.Health.Status != HealthWarn || !hasCheck(st, "1 pool(s) have no replicas configured (size 1): default") {
		t.Fatalf("size 1: %+v", st.Health)
	}
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd pool set", Pool: "default", Var: "size", Val: "2"})
	for _, p := range pgLs(t, c, statusCmd(t, c)) {
		if len(p.Acting) != 2 {
			t.Fatalf("size 2: pg %s acting %v", p.PGID, p.Acting)
		}
	}
	if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "osd pool set", Pool: "default", Var: "size", Val: "0"}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("size 0: %v", err)
	}
}
