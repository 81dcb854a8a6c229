package mon

import (
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestReportRates: client bytes in beacons become per-OSD and cluster
// rates (measured as ops are), an OSD marked down shows no figures from
// its last beacon, and a beacon older than fresh shows its space but no
// rates.
func TestReportRates(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c") // osd.0-2, all up
	t0 := time.Unix(1700000000, 0)
	beacons := map[uint32]*beaconRecord{}
	for o := range mp.OSDs() {
		first := newBeaconRecord(&osdpb.MonBeacon{Id: o.Id}, t0, nil)
		first.WALSyncs, first.BaseWALSyncs, first.WALSyncNanos, first.BaseWALSyncNanos = 10, 10, 5e6, 5e6
		beacons[o.Id] = newBeaconRecord(&osdpb.MonBeacon{Id: o.Id, Epoch: mp.Epoch(), Ops: 20, ClientReadBytes: 4 << 20, ClientWriteBytes: 2 << 20,
			UsedBytes: 10, AvailBytes: 90, WalSyncs: 30, WalSyncNanos: 45e6}, t0.Add(2*time.Second), first)
	}
	beacons[2].AtUnixNano = t0.Add(-time.Hour).UnixNano() // stale
	r := computeReport(statusInput{mp: mp, beacons: beacons, now: t0.Add(2 * time.Second), fresh: time.Minute})
	if len(r.OSDs) != 3 || r.Map != mp {
		t.Fatalf("report of %d OSDs", len(r.OSDs))
	}
	o := r.OSDs[0]
	// 20 syncs in the window took 40 ms: osd perf's commit latency.
	if o.ReadBytesPerSec != 2<<20 || o.WriteBytesPerSec != 1<<20 || o.OpsPerSec != 10 || o.UsedBytes != 10 || o.BeaconAt.IsZero() || o.CommitLatencyMs != 2 {
		t.Fatalf("osd.0: %+v", o)
	}
	if s := r.OSDs[2]; s.OpsPerSec != 0 || s.ReadBytesPerSec != 0 || s.UsedBytes != 10 || s.CommitLatencyMs != 0 {
		t.Fatalf("stale osd.2: %+v", s)
	}
	if st := r.Status; st.ReadBytesPerSec != 4<<20 || st.WriteBytesPerSec != 2<<20 || st.OpsPerSec != 20 {
		t.Fatalf("cluster rates: read %v write %v ops %v", st.ReadBytesPerSec, st.WriteBytesPerSec, st.OpsPerSec)
	}

	pb := mp.Proto()
	pb.Osds[1].Up = false
	down, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	r = computeReport(statusInput{mp: down, beacons: beacons, now: t0.Add(2 * time.Second), fresh: time.Minute})
	if o := r.OSDs[1]; o.Up || o.UsedBytes != 0 || o.OpsPerSec != 0 || !o.BeaconAt.IsZero() {
		t.Fatalf("down osd.1 keeps its beacon's figures: %+v", o)
	}
	// Counters that drop (a restart) start the rates again.
	again := newBeaconRecord(&osdpb.MonBeacon{Id: 0, Ops: 25, ClientReadBytes: 1}, t0.Add(4*time.Second), beacons[0])
	if again.ReadBytesPerSec != 0 || again.WriteBytesPerSec != 0 || again.CommitLatency != 0 {
		t.Fatalf("after a restart: %+v", again)
	}
}
