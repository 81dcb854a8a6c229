package mon

import (
	"math"

	"github.com/ospreystore/osprey/internal/placement"
)

// DF is what "df" returns, Ceph's `ceph df`: the up OSDs' disks and each
// pool's share of them.
type DF struct {
	// The up OSDs' data disks as their last beacons said (OSDs sharing a
	// file system each count all of it, as in status).
	TotalBytes uint64   `json:"total_bytes"`
	UsedBytes  uint64   `json:"used_bytes"`
	AvailBytes uint64   `json:"avail_bytes"`
	Pools      []PoolDF `json:"pools"`
}

// PoolDF is one pool of "df".
type PoolDF struct {
	PoolInfo
	// Stored is the objects' bytes, one copy each, and Objects their
	// count, as each PG's primary last reported them; Used is what their
	// copies take: each PG's bytes times its acting set's members (the
	// pool's size, or fewer while it is undersized).
	Stored  uint64 `json:"stored_bytes"`
	Objects uint64 `json:"objects"`
	Used    uint64 `json:"used_bytes"`
	// MaxAvail is how much more the pool can store (one copy) before the
	// first of its OSDs reaches the full ratio, each OSD taking its
	// weight's share of every copy, as Ceph projects it.
	MaxAvail    uint64  `json:"max_avail_bytes"`
	PercentUsed float64 `json:"percent_used"` // Used / (Used + MaxAvail × size)
}

// computeDF derives "df" from the map and the up OSDs' beacons.
func computeDF(in statusInput) *DF {
	mp, beacons := in.mp, in.beacons
	df := &DF{}
	for _, b := range upBeacons(mp, beacons) {
		df.UsedBytes += b.UsedBytes
		df.AvailBytes += b.AvailBytes
	}
	df.TotalBytes = df.UsedBytes + df.AvailBytes
	byPool := map[uint32]*PoolDF{}
	for _, p := range poolInfos(mp) {
		df.Pools = append(df.Pools, PoolDF{PoolInfo: p})
	}
	for i := range df.Pools {
		byPool[df.Pools[i].ID] = &df.Pools[i]
	}
	for v := range pgViews(in) {
		if p := byPool[v.Pool]; p != nil && v.counted {
			p.Stored += v.Bytes
			p.Objects += v.Objects
			p.Used += v.Bytes * uint64(len(v.Acting))
		}
	}
	avail := maxAvail(mp, beacons)
	for i := range df.Pools {
		p := &df.Pools[i]
		p.MaxAvail = avail / uint64(max(p.Size, 1))
		if room := float64(p.Used) + float64(p.MaxAvail)*float64(p.Size); room > 0 {
			p.PercentUsed = 100 * float64(p.Used) / room
		}
	}
	if df.Pools == nil {
		df.Pools = []PoolDF{}
	}
	return df
}

// maxAvail is the raw bytes (all copies together) the cluster can take
// before its first OSD reaches the full ratio: straw2 gives each up and
// in OSD its weight's share of every byte, so the OSD with the least
// room for its share bounds the whole. 0 when no OSD up and in has a
// beacon.
func maxAvail(mp *placement.Map, beacons map[uint32]*beaconRecord) uint64 {
	_, _, full := mp.FullRatios()
	var total float64
	for o := range mp.OSDs() {
		if o.Up && o.In && o.Weight > 0 {
			total += o.Weight
		}
	}
	best := math.Inf(1)
	for o := range mp.OSDs() {
		b := currentBeacon(o, beacons[o.Id])
		if !o.In || o.Weight <= 0 || b == nil {
			continue
		}
		size := float64(b.UsedBytes + b.AvailBytes)
		room := max(0, full*size-float64(b.UsedBytes))
		best = min(best, room*total/o.Weight)
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return uint64(best)
}
