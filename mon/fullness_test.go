package mon

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestFullness: an OSD's beacon saying how full its disk is goes into the
// map (one new epoch per change, none when unchanged), health says it
// (full is an error, nearfull and backfillfull warnings, each naming the
// OSD and its usage), osd tree shows it; the ratio commands set the map's
// ratios and refuse ones out of order or out of range.
func TestFullness(t *testing.T) {
	m, c := cleanMon(t)
	beacon := func(id uint32, f osdpb.Fullness, used, avail uint64) error {
		b := beaconOf(m.Map(), id)
		b.UsedBytes, b.AvailBytes, b.Fullness = used, avail, f
		return c.Beacon(ctxFor(t, 10*time.Second), b)
	}

	before := m.Map().Epoch()
	if err := beacon(1, osdpb.Fullness_FULLNESS_FULL, 960, 40); err != nil {
		t.Fatal(err)
	}
	if o, _ := m.Map().OSD(1); o.Fullness != osdpb.Fullness_FULLNESS_FULL || m.Map().Epoch() != before+1 {
		t.Fatalf("after a full beacon: osd.1 %v at epoch %d (was %d)", o.Fullness, m.Map().Epoch(), before)
	}
	if err := beacon(1, osdpb.Fullness_FULLNESS_FULL, 961, 39); err != nil || m.Map().Epoch() != before+1 {
		t.Fatalf("the same fullness again made epoch %d: %v", m.Map().Epoch(), err)
	}
	if err := beacon(2, osdpb.Fullness_FULLNESS_NEARFULL, 870, 130); err != nil {
		t.Fatal(err)
	}
	st := statusCmd(t, c)
	if st.Health.Status != HealthErr || !hasCheck(st, "1 full osd(s) (over full_ratio 0.95): osd.1 (96.1% used)") ||
		!hasCheck(st, "1 nearfull osd(s) (over nearfull_ratio 0.85): osd.2 (87.0% used)") {
		t.Fatalf("one full, one nearfull: %q", st.Health.Checks)
	}
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd tree"})
	var tree []OSDTreeEntry
	if err := json.Unmarshal([]byte(rep.Output), &tree); err != nil {
		t.Fatal(err)
	}
	if tree[0].Fullness != "ok" || tree[1].Fullness != "full" || tree[2].Fullness != "nearfull" {
		t.Fatalf("osd tree: %+v", tree)
	}

	// At its failsafe below the full ratio (a small disk, its store's
	// reserved room reached): the line says so, not only the ratio its
	// percentage is under.
	if err := beacon(1, osdpb.Fullness_FULLNESS_FAILSAFE, 717, 283); err != nil {
		t.Fatal(err)
	}
	if st := statusCmd(t, c); !hasCheck(st, "1 full osd(s) (over full_ratio 0.95, or at their failsafe): osd.1 (71.7% used; at its failsafe: over its failsafe ratio, or its store's reserved room reached)") {
		t.Fatalf("one at its failsafe: %q", st.Health.Checks)
	}

	// Space back: the map and health follow.
	if err := beacon(1, osdpb.Fullness_FULLNESS_NONE, 500, 500); err != nil {
		t.Fatal(err)
	}
	if st := statusCmd(t, c); st.Health.Status != HealthWarn || hasCheck(st, "full osd(s) (over full_ratio") {
		t.Fatalf("after osd.1 freed space: %q", st.Health.Checks)
	}
	// A hostile beacon's unknown level is refused, and changes nothing.
	if err := beacon(0, osdpb.Fullness(42), 1, 1); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Fatalf("beacon with fullness 42: %v, want InvalidArgument", err)
	}

	// An OSD that boots on a full disk is full in the map that marks it up.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{2}})
	b := bootOf(2)
	b.Fullness = osdpb.Fullness_FULLNESS_FAILSAFE
	if rep := mustBoot(t, c, b); rep.Id != 2 {
		t.Fatalf("boot got id %d", rep.Id)
	}
	if o, _ := m.Map().OSD(2); !o.Up || o.Fullness != osdpb.Fullness_FULLNESS_FAILSAFE {
		t.Fatalf("osd.2 after a boot on a full disk: up %v, %v", o.Up, o.Fullness)
	}
	b.Fullness = 7
	if _, err := c.Boot(ctxFor(t, 10*time.Second), b); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Fatalf("boot with fullness 7: %v, want InvalidArgument", err)
	}

	// Ratios.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd set-nearfull-ratio", Ratio: 0.8})
	if near, back, full := m.Map().FullRatios(); near != 0.8 || back != 0.9 || full != 0.95 {
		t.Fatalf("ratios %v %v %v after set-nearfull-ratio 0.8", near, back, full)
	}
	for _, bad := range []*osdpb.MonCommand{
		{Prefix: "osd set-full-ratio", Ratio: 0.85},        // below backfillfull
		{Prefix: "osd set-backfillfull-ratio", Ratio: 0.7}, // below nearfull
		{Prefix: "osd set-full-ratio", Ratio: 1.5},
		{Prefix: "osd set-full-ratio", Ratio: 0},
	} {
		if _, err := c.Command(ctxFor(t, 10*time.Second), bad); !errors.Is(err, ops.ErrInvalidArgument) {
			t.Errorf("%s %v: %v, want InvalidArgument", bad.Prefix, bad.Ratio, err)
		}
	}
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd set-full-ratio", Ratio: 0.97})
	if _, _, full := m.Map().FullRatios(); full != 0.97 {
		t.Fatalf("full ratio %v after set-full-ratio 0.97", full)
	}
}

// TestFirstMapRatios: a mon that creates the cluster writes its Config's
// full ratios into the first map (which the OSDs judge their disks
// against); a mon joining the cluster later leaves the map's ratios alone; ratios out of order or out of range stop Start.
func TestFirstMapRatios(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.NearfullRatio, cfg.BackfillfullRatio, cfg.FullRatio = 0.97, 0.98, 0.99
	m := startTestMon(t, cfg)
	if near, back, full := m.Map().FullRatios(); near != 0.97 || back != 0.98 || full != 0.99 {
		t.Fatalf("first map's ratios %v %v %v, want the Config's 0.97 0.98 0.99", near, back, full)
	}
	b := testConfig(e, "b")
	b.NearfullRatio = 0.5
	if mb := startTestMon(t, b); mb.Map().FSID() != m.Map().FSID() {
		t.Fatalf("mon.b made cluster %s, want to join %s", mb.Map().FSID(), m.Map().FSID())
	} else if near, _, _ := mb.Map().FullRatios(); near != 0.97 {
		t.Fatalf("mon.b, joining, sees nearfull_ratio %v, want the cluster's 0.97", near)
	}

	for _, bad := range [][3]float64{{0.9, 0.8, 0.95}, {0.85, 0.9, 1.5}, {-0.1, 0, 0}} {
		cfg := testConfig(e, "c")
		cfg.NearfullRatio, cfg.BackfillfullRatio, cfg.FullRatio = bad[0], bad[1], bad[2]
		if m, err := Start(ctxFor(t, 10*time.Second), cfg); err == nil {
			m.Close(ctxFor(t, 10*time.Second))
			t.Errorf("Start with ratios %v: no error", bad)
		}
	}
}
