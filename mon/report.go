package mon

import (
	"context"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
)

// Report is the status together with each OSD's own figures, from one
// read of etcd: what a dashboard samples. Any mon can make it, a standby
// included, since the leader keeps the beacons in etcd.
type Report struct {
	Status *Status
	// Map is the map the report was computed from.
	Map *placement.Map
	// OSDs is "osd tree" with each OSD's last beacon, in id order.
	OSDs []OSDReport
}

// OSDReport is one OSD of the tree and what its last beacon said. The
// beacon fields are zero for an OSD the mon holds no current beacon of
// (down, or not beaconed since it booted): the leader drops the stats of
// an OSD it marks down.
type OSDReport struct {
	OSDTreeEntry
	BeaconAt            time.Time `json:"beacon_at,omitzero"`
	UsedBytes           uint64    `json:"used_bytes"`
	AvailBytes          uint64    `json:"avail_bytes"`
	OpsPerSec           float64   `json:"ops_per_sec"`
	ReadBytesPerSec     float64   `json:"client_read_bytes_per_sec"`
	WriteBytesPerSec    float64   `json:"client_write_bytes_per_sec"`
	RecoveryBytesPerSec float64   `json:"recovery_bytes_per_sec"`
	// CommitLatencyMs is the mean of the OSD's WAL syncs, which every
	// synced write waits for, over its last beacons' window (Ceph's osd
	// perf commit latency); 0 when none synced then.
	CommitLatencyMs float64 `json:"commit_latency_ms"`
}

// Report gathers the status and the OSD tree with each OSD's beacon.
func (m *Mon) Report(ctx context.Context) (*Report, error) {
	in, err := m.statusInput(ctx)
	if err != nil {
		return nil, err
	}
	return computeReport(in), nil
}

// computeReport is Report's pure part. A beacon older than in.fresh
// contributes its space but no rates, as in computeStatus.
func computeReport(in statusInput) *Report {
	r := &Report{Status: computeStatus(in), Map: in.mp}
	for _, e := range osdTree(in.mp) {
		o := OSDReport{OSDTreeEntry: e}
		info, _ := in.mp.OSD(e.ID)
		if b := currentBeacon(info, in.beacons[e.ID]); b != nil {
			o.BeaconAt = time.Unix(0, b.AtUnixNano)
			o.UsedBytes, o.AvailBytes = b.UsedBytes, b.AvailBytes
			if in.now.Sub(o.BeaconAt) <= in.fresh {
				o.OpsPerSec, o.RecoveryBytesPerSec = b.OpsPerSec, b.RecoveryBytesPerSec
				o.ReadBytesPerSec, o.WriteBytesPerSec = b.ReadBytesPerSec, b.WriteBytesPerSec
				o.CommitLatencyMs = float64(b.CommitLatency) / float64(time.Millisecond)
			}
		}
		r.OSDs = append(r.OSDs, o)
	}
	if r.OSDs == nil {
		r.OSDs = []OSDReport{}
	}
	return r
}
