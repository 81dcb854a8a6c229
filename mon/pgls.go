package mon

import (
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// PGStat is one PG as "pg ls" lists it, Ceph's `ceph pg ls`: the state
// "status" counts it under, its acting set, and what its primary last
// reported of it.
type PGStat struct {
	PGID  string `json:"pgid"` // Ceph's POOL.SEED, the seed in hex (1.1f)
	Pool  uint32 `json:"pool"`
	Seed  uint32 `json:"seed"`
	State string `json:"state"`
	// Acting is the PG's acting set under the map, primary first; Primary
	// is its first member, -1 when no OSD is up and in to serve it. Of a
	// stale PG (no OSD up and in) both are the last ones a report of it
	// was taken in under, as Ceph shows them; none of them serves it.
	Acting  []uint32 `json:"acting"`
	Primary int64    `json:"primary"`
	// Up is placement's set for the PG; it differs from Acting while a
	// pg_temp entry keeps the old members serving (remapped).
	Up []uint32 `json:"up"`
	// The counts are the primary's last report at any epoch; while the
	// primary has sent none, the last report of the PG from any OSD (a
	// down one's included: what the PG held does not vanish from the
	// totals while it cannot be reached), with no degraded, misplaced or
	// inconsistent count; zero when no OSD ever reported it. Objects and
	// Bytes of a PG whose primary has not served it yet (peering, down)
	// are the last counts of a primary that did.
	// ReportedEpoch is that report's map epoch, 0 for none. A report
	// older than the map's epoch does not set State ("unknown").
	Objects       uint64 `json:"objects"`
	Bytes         uint64 `json:"bytes"` // the objects' bytes, one copy
	Degraded      uint64 `json:"degraded"`
	Misplaced     uint64 `json:"misplaced"`
	Inconsistent  uint64 `json:"inconsistent"`
	ReportedEpoch uint64 `json:"reported_epoch"`
}

// PGStateWords are the words PG states are made of, joined by "+", as
// Ceph's: the OSDs' reports (osd.pgStat) and the mon's own (pgViews).
var PGStateWords = []string{"active", "clean", "peering", "peered", "down", "incomplete", "undersized", "degraded",
	"remapped", "recovering", "backfilling", "recovery_toofull", "backfill_toofull", "inconsistent", "unknown", "stale",
	"laggy", "wait"}

// pgView is a PG's PGStat and how the health checks count it.
type pgView struct {
	PGStat
	reported string // the state its primary reported, "" for none
	// fresh: the report is from the current primary at the map's epoch;
	// counted: from the current primary, at any epoch (its counts count),
	// or, while it has sent none, the PG's last report from any OSD (its
	// objects and bytes count).
	fresh, counted bool
	unknown        bool     // no OSDs at all, or no fresh report
	down           bool     // no OSD up to serve it, and no report of it ever
	stale          bool     // no OSD up to serve it: State is "stale+" its last report's
	lastFrom       uint32   // with stale: the OSD that made that report
	filling        []uint32 // acting members being backfilled, as the primary's report says
	belowMin       bool     // fewer than min_size up: inactive (undersized+degraded+peered)
	undersized     bool     // fewer than size up, belowMin included
	broken         bool     // its primary reports it down or incomplete
}

// currentBeacon is b, OSD o's last beacon record, if it says what o does
// now: o is up, and b was made in o's current run. Records outlive their
// OSDs (a stale PG's last report), so one made before o last booted (its
// epoch before o's up_from) is left until o's first beacon replaces it.
func currentBeacon(o *osdpb.OSDInfo, b *beaconRecord) *beaconRecord {
	if o == nil || !o.Up || b == nil || b.Epoch < o.UpFrom {
		return nil
	}
	return b
}

// upBeacons are the current beacons (currentBeacon) of the OSDs up in mp,
// in id order: a down OSD's space, rates and PG reports are not current.
func upBeacons(mp *placement.Map, beacons map[uint32]*beaconRecord) []*beaconRecord {
	ids := make([]uint32, 0, len(beacons))
	for id, b := range beacons {
		if o, ok := mp.OSD(id); ok && currentBeacon(o, b) != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]*beaconRecord, len(ids))
	for i, id := range ids {
		out[i] = beacons[id]
	}
	return out
}

// pgViews derives every PG of every pool of mp, in pool and seed order,
// from the map and the up OSDs' reports. From the map alone it knows
// which PGs have no OSD up ("down") and which have fewer than size
// ("undersized") or min_size ("undersized+degraded+peered": they take no writes);
// the rest is what each PG's current primary reported at the current
// epoch, or "unknown". It is the one place "status" and "pg ls" take a
// PG's state from, so the two always agree.
func pgViews(in statusInput) iter.Seq[pgView] {
	mp, beacons := in.mp, in.beacons
	return func(yield func(pgView) bool) {
		// Each up OSD's reports, by PG and reporter: a PG's state is its
		// current primary's report, whoever else (a former primary, not
		// yet told) still reports it.
		type from struct {
			pgKey
			osd uint32
		}
		reports := map[from]pgRecord{}
		for _, b := range upBeacons(mp, beacons) {
			for _, p := range b.PGs {
				reports[from{pgKey{p.Pool, p.PG}, b.ID}] = p
			}
		}
		// The newest report of each PG from any OSD, down ones included
		// (their records outlive their leases): Ceph's PG map keeps a PG's
		// last stats when no OSD of it is left to send new ones.
		// On a tie an up reporter's, else the lowest id's.
		type lastReport struct {
			pgRecord
			from uint32
			up   bool
		}
		// served is the newest of a primary that served the PG (active, or
		// peered below min_size): its counts are the PG's, where a primary
		// still peering, or down waiting for a past member, may count only
		// what its own store holds (nothing, on a new member).
		last, served := map[pgKey]lastReport{}, map[pgKey]lastReport{}
		for _, id := range slices.Sorted(maps.Keys(beacons)) {
			for _, p := range beacons[id].PGs {
				k := pgKey{p.Pool, p.PG}
				_, up := reports[from{k, id}]
				newer := func(l lastReport, ok bool) bool {
					return !ok || p.Epoch > l.Epoch || p.Epoch == l.Epoch && up && !l.up
				}
				if l, ok := last[k]; newer(l, ok) {
					last[k] = lastReport{p, id, up}
				}
				if l, ok := served[k]; hasToken(p.State, "active", "peered") && newer(l, ok) {
					served[k] = lastReport{p, id, up}
				}
			}
		}
		noOSDs := true
		for range mp.OSDs() {
			noOSDs = false
			break
		}
		for pool := range mp.Pools() { // in id order
			minSize := placement.MinSize(pool)
			for pg := range pool.PgCount {
				acting := mp.ActingSet(pool.Id, pg)
				v := pgView{PGStat: PGStat{PGID: placement.PGID{Pool: pool.Id, Seed: pg}.String(), Pool: pool.Id, Seed: pg,
					Acting: acting, Up: mp.UpSet(pool.Id, pg), Primary: -1}}
				if len(acting) > 0 {
					v.Primary = int64(acting[0])
				}
				if len(acting) > 0 {
					if r, ok := reports[from{pgKey{pool.Id, pg}, acting[0]}]; ok {
						v.counted = true
						v.reported = r.State
						v.fresh = r.Epoch >= mp.Epoch() || sameInterval(in.past[r.Epoch], mp, pool, pg, acting)
						v.Objects, v.Bytes, v.Degraded, v.Misplaced, v.Inconsistent = r.Objects, r.Bytes, r.Degraded, r.Misplaced, r.Inconsistent
						v.ReportedEpoch, v.filling = r.Epoch, r.Filling
					}
				}
				l, known := last[pgKey{pool.Id, pg}]
				sv, wasServed := served[pgKey{pool.Id, pg}]
				switch {
				case v.counted && !hasToken(v.reported, "active", "peered") && wasServed:
					v.Objects, v.Bytes = sv.Objects, sv.Bytes
				case !v.counted && known:
					v.counted = true
					v.Objects, v.Bytes, v.ReportedEpoch = l.Objects, l.Bytes, l.Epoch
					if wasServed {
						v.Objects, v.Bytes = sv.Objects, sv.Bytes
					}
				}
				switch {
				case noOSDs:
					v.State, v.unknown = "unknown", true
				case len(acting) == 0 && known:
					v.State, v.stale, v.lastFrom = "stale+"+strings.TrimPrefix(l.State, "stale+"), true, l.from
					// The last ones known, as Ceph shows a stale PG's (none
					// of them serves it now).
					v.Acting = l.Acting
					if len(l.Acting) > 0 {
						v.Primary = int64(l.Acting[0])
					}
				case len(acting) == 0:
					v.State, v.down = "down", true
				case len(acting) < minSize:
					v.undersized = true
					if v.fresh && hasToken(v.reported, "down", "incomplete") {
						v.State, v.broken = v.reported, true
					} else {
						v.State, v.belowMin = "undersized+degraded+peered", true
					}
				default:
					v.State = "unknown"
					if v.fresh {
						v.State = v.reported
					} else {
						v.unknown = true
					}
					if len(acting) < int(pool.Size) {
						v.undersized = true
						if !hasToken(v.State, "undersized") {
							v.State += "+undersized"
						}
					}
					v.broken = v.fresh && hasToken(v.reported, "down", "incomplete")
				}
				if !yield(v) {
					return
				}
			}
		}
	}
}

// sameInterval reports whether old, a map the PG's report was made at,
// gave PG pg of pool the acting set it has now and the pool the same size
// and min_size: a change elsewhere (a flag, another PG's OSD) leaves the
// report's state current, so the PG does not turn unknown until its
// primary's next beacon. (A change and its undoing between the two maps
// is seen at that beacon.)
func sameInterval(old, mp *placement.Map, pool *osdpb.Pool, pg uint32, acting []uint32) bool {
	if old == nil {
		return false
	}
	p, ok := old.Pool(pool.Id)
	return ok && p.Size == pool.Size && placement.MinSize(p) == placement.MinSize(pool) && pg < p.PgCount &&
		slices.Equal(old.ActingSet(pool.Id, pg), acting) && slices.Equal(old.UpSet(pool.Id, pg), mp.UpSet(pool.Id, pg))
}

// pgList is "pg ls": every PG of mp, in pool and seed order.
func pgList(in statusInput) []PGStat {
	out := []PGStat{}
	for v := range pgViews(in) {
		out = append(out, v.PGStat)
	}
	return out
}
