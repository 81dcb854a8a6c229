package mon

import (
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestDownOut: an OSD down and in for longer than the interval is marked
// out (automatically, so its return brings it in again); one down for
// less, one up, or one out already is not; with NeverOut none is.
func TestDownOut(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	since := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	pb := func() *osdpb.ClusterMap {
		return &osdpb.ClusterMap{Osds: []*osdpb.OSDInfo{
			{Id: 0, Up: true, In: true},
			{Id: 1, In: true, DownSinceUnixNano: since(11 * time.Minute)},
			{Id: 2, In: true, DownSinceUnixNano: since(9 * time.Minute)},
			{Id: 3, DownSinceUnixNano: since(time.Hour)},
		}}
	}
	m := pb()
	if got, _ := downOut(m, now, 10*time.Minute, 0); !slices.Equal(got, []uint32{1}) || m.Osds[1].In || !m.Osds[1].AutoOut || !m.Osds[2].In {
		t.Fatalf("down-out after 10m: %v, map %v", got, m.Osds)
	}
	if cfg := (Config{EmbedEtcdDir: "x"}); cfg.setDefaults() != nil || cfg.DownOutInterval != 10*time.Minute {
		t.Fatalf("the default down-out interval: %v", cfg.DownOutInterval)
	}
	cfg := Config{EmbedEtcdDir: "x", DownOutInterval: NeverOut}
	if err := cfg.setDefaults(); err != nil || cfg.DownOutInterval != NeverOut {
		t.Fatalf("NeverOut after the defaults: %v %v", cfg.DownOutInterval, err)
	}
	m = pb()
	if got, _ := downOut(m, now, cfg.DownOutInterval, 0); len(got) != 0 || !m.Osds[1].In {
		t.Fatalf("NeverOut marked %v out", got)
	}
}

// TestDownOutMinInRatio: as Ceph's mon_osd_min_in_ratio (0.75 by
// default), the mon marks no more down OSDs out once fewer than that
// fraction of the OSDs are in (Ceph's test, before each one); the longest
// down go first, and an OSD back in lets the next go.
func TestDownOutMinInRatio(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	rack := func() (*osdpb.ClusterMap, []*osdpb.OSDInfo) {
		var osds []*osdpb.OSDInfo
		for i := range 8 {
			osds = append(osds, &osdpb.OSDInfo{Id: uint32(i), Up: true, In: true})
		}
		// A rack of four goes down, osd.5 first.
		for i, id := range []int{5, 4, 6, 7} {
			osds[id].Up, osds[id].DownSinceUnixNano = false, now.Add(-time.Hour+time.Duration(i)*time.Minute).UnixNano()
		}
		return &osdpb.ClusterMap{Osds: osds}, osds
	}
	cfg := Config{EmbedEtcdDir: "x"}
	if err := cfg.setDefaults(); err != nil || cfg.MinInRatio != 0.75 {
		t.Fatalf("the default min_in_ratio: %v %v", cfg.MinInRatio, err)
	}
	pb, osds := rack()
	out, held := downOut(pb, now, 10*time.Minute, cfg.MinInRatio)
	if !slices.Equal(out, []uint32{5, 4, 6}) || !slices.Equal(held, []uint32{7}) || !osds[7].In {
		t.Fatalf("four of eight down: out %v, held %v; want 5, 4, 6 out (the last with 6 of 8 in), 7 kept in", out, held)
	}
	if out, held := downOut(pb, now, 10*time.Minute, cfg.MinInRatio); len(out) != 0 || !slices.Equal(held, []uint32{7}) {
		t.Fatalf("next tick: out %v, held %v", out, held)
	}
	osds[5].Up, osds[5].In = true, true // back
	if out, held := downOut(pb, now, 10*time.Minute, cfg.MinInRatio); !slices.Equal(out, []uint32{7}) || len(held) != 0 {
		t.Fatalf("osd.5 back in: out %v, held %v; want osd.7 out", out, held)
	}
	pb, _ = rack()
	if out, held := downOut(pb, now, 10*time.Minute, -1); len(out) != 4 || len(held) != 0 {
		t.Fatalf("no floor: out %v, held %v", out, held)
	}
	if err := (&Config{EmbedEtcdDir: "x", MinInRatio: 1.5}).setDefaults(); err == nil {
		t.Fatal("MinInRatio 1.5 accepted")
	}
}
