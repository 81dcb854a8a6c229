package mon

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestFlagEdits: noout stops the down-out clock; noin keeps a booting OSD
// that is out, and a new one, out; set and unset change the map once.
func TestFlagEdits(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	pb := &osdpb.ClusterMap{Epoch: 3, Fsid: "f", Osds: []*osdpb.OSDInfo{
		{Id: 0, Uuid: "u0", In: true, DownSinceUnixNano: now.Add(-time.Hour).UnixNano()},
		{Id: 1, Uuid: "u1", AutoOut: true, PublicAddr: "tcp://127.0.0.1:1"},
	}}
	cmd := func(prefix, flag string) error {
		_, err := osdCommand{prefix: prefix, variable: flag}.apply(pb, now)
		return err
	}
	if err := cmd("osd set", placement.FlagNoOut); err != nil || !slices.Equal(pb.Flags, []string{"noout"}) {
		t.Fatalf("set noout: %v, flags %v", err, pb.Flags)
	}
	if err := cmd("osd set", placement.FlagNoOut); err != errNoChange {
		t.Fatalf("set noout again: %v", err)
	}
	if got, _ := downOut(pb, now, time.Minute, 0); len(got) != 0 || !pb.Osds[0].In {
		t.Fatalf("noout: marked %v out", got)
	}
	if err := cmd("osd set", placement.FlagNoIn); err != nil || !slices.Equal(pb.Flags, []string{"noin", "noout"}) {
		t.Fatalf("set noin: %v, flags %v", err, pb.Flags)
	}
	// Under noin, osd.1 (out by the mon) boots and stays out; a new OSD
	// enters out.
	if _, err := applyBoot(pb, &osdpb.MonBoot{HasId: true, Id: 1, Uuid: "u1", PublicAddr: "tcp://127.0.0.1:1"}); err != nil || pb.Osds[1].In || !pb.Osds[1].Up {
		t.Fatalf("noin boot of osd.1: %v, %+v", err, pb.Osds[1])
	}
	id, err := applyBoot(pb, &osdpb.MonBoot{Uuid: "u2", PublicAddr: "tcp://127.0.0.1:2"})
	if err != nil || id != 2 || pb.Osds[2].In {
		t.Fatalf("noin boot of a new OSD: %v %d, %+v", err, id, pb.Osds)
	}
	if err := cmd("osd unset", placement.FlagNoOut); err != nil || !slices.Equal(pb.Flags, []string{"noin"}) {
		t.Fatalf("unset noout: %v, flags %v", err, pb.Flags)
	}
	if got, _ := downOut(pb, now, time.Minute, 0); !slices.Equal(got, []uint32{0}) {
		t.Fatalf("after unset noout: marked %v out, want osd.0", got)
	}
	if err := cmd("osd unset", placement.FlagNoOut); err != errNoChange {
		t.Fatalf("unset noout again: %v", err)
	}
	if err := cmd("osd set", "nodown"); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), "known flags: noin, noout") {
		t.Fatalf("set nodown: %v", err)
	}
}

// TestFlagsCommand: through a mon, osd set makes a new map with the flag,
// status warns while it is set (Ceph's OSDMAP_FLAGS), unset clears both.
func TestFlagsCommand(t *testing.T) {
	m, c := cleanMon(t)
	if st := statusCmd(t, c); st.Health.Status != HealthOK {
		t.Fatalf("before: %+v", st.Health)
	}
	before := m.Map().Epoch()
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd set", Var: "noout"})
	if rep.Epoch != before+1 || !m.Map().HasFlag("noout") || !strings.Contains(rep.Output, "noout is set") {
		t.Fatalf("osd set noout: epoch %d (before %d), %s", rep.Epoch, before, rep.Output)
	}
	beaconAll(t, c, m.Map(), "active+clean")
	if st := statusCmd(t, c); st.Health.Status != HealthWarn || !hasCheck(st, "noout flag(s) set") {
		t.Fatalf("with noout: %+v", st.Health)
	}
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd unset", Var: "noout"})
	beaconAll(t, c, m.Map(), "active+clean")
	if st := statusCmd(t, c); st.Health.Status != HealthOK || m.Map().HasFlag("noout") {
		t.Fatalf("after unset: %+v", st.Health)
	}
}
