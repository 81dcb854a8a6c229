package mon

import (
	"testing"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestComputeDF: df sums each pool's PGs as their primaries reported
// them (one copy), multiplies by size for what the copies use, and
// bounds what more fits by the OSD with the least room for its weight's
// share before the full ratio.
func TestComputeDF(t *testing.T) {
	pb := &osdpb.ClusterMap{Epoch: 10, Fsid: "f", FullRatio: 0.9, Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 2, PgCount: 8}}}
	for i, w := range []float64{1, 1, 2, 1} {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: uint32(i), PublicAddr: "tcp://127.0.0.1:6800", ClusterAddr: "tcp://127.0.0.1:6801",
			Weight: w, Up: i != 3, In: true, UpFrom: 2})
	}
	mp, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	beacons := map[uint32]*beaconRecord{}
	// osd.0: 100 GiB, 20 used: room 70. osd.1: 100, 60 used: room 30, the
	// least for a weight of 1. osd.2: 200, 20 used: room 160, for weight 2.
	// osd.3 is down: neither its space nor its reports count.
	for id, used := range map[uint32]uint64{0: 20, 1: 60, 2: 20, 3: 0} {
		size := uint64(100)
		if id == 2 {
			size = 200
		}
		beacons[id] = &beaconRecord{ID: id, Epoch: mp.Epoch(), UsedBytes: used * gib, AvailBytes: (size - used) * gib}
	}
	copies := uint64(0) // osd.3 is down: some PGs have one member
	for pg := range uint32(8) {
		acting := mp.ActingSet(1, pg)
		copies += uint64(len(acting))
		r := beacons[acting[0]]
		r.PGs = append(r.PGs, pgRecord{Pool: 1, PG: pg, State: "active+clean", Objects: 2, Bytes: 1000, Epoch: 10})
	}
	beacons[3].PGs = []pgRecord{{Pool: 1, PG: 0, State: "active+clean", Objects: 99, Bytes: 99, Epoch: 10}}
	df := computeDF(statusInput{mp: mp, beacons: beacons})
	if df.TotalBytes != 400*gib || df.UsedBytes != 100*gib || df.AvailBytes != 300*gib {
		t.Errorf("raw: %+v", df)
	}
	if len(df.Pools) != 1 {
		t.Fatalf("pools: %+v", df.Pools)
	}
	p := df.Pools[0]
	// The up and in weight is 4 (osd.3 is down): osd.1's 30 GiB of room
	// for a quarter of every byte bounds the raw total at 120 GiB, 60 GiB
	// of objects at size 2.
	if p.Stored != 8000 || p.Objects != 16 || p.Used != 1000*copies || copies == 16 || p.MaxAvail != 60*gib {
		t.Errorf("pool: %+v (%d copies of PGs)", p, copies)
	}
	if want := 100 * float64(p.Used) / (float64(p.Used) + 120.0*gib); p.PercentUsed != want {
		t.Errorf("%%used %v, want %v", p.PercentUsed, want)
	}
	if df := computeDF(statusInput{mp: mp}); df.Pools[0].MaxAvail != 0 || df.TotalBytes != 0 {
		t.Errorf("no beacons: %+v", df)
	}
}
