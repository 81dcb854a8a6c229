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
	if got := downOut(m, now, 10*time.Minute); !slices.Equal(got, []uint32{1}) || m.Osds[1].In || !m.Osds[1].AutoOut || !m.Osds[2].In {
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
	if got := downOut(m, now, cfg.DownOutInterval); len(got) != 0 || !m.Osds[1].In {
		t.Fatalf("NeverOut marked %v out", got)
	}
}
