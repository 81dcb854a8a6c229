package mon

import (
	"fmt"
	"slices"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// The maintenance checks an operator runs before stopping or destroying
// OSDs, Ceph's `ceph osd ok-to-stop` and `ceph osd safe-to-destroy`. Both
// read the map and the primaries' last reports; neither changes anything.

// OKToStop is "osd ok-to-stop"'s answer: whether stopping the OSDs now
// leaves every PG they serve active, with min_size members that hold a
// whole copy (a member being backfilled holds none yet), and the PGs
// that would go inactive or only be degraded.
type OKToStop struct {
	OKToStop bool     `json:"ok_to_stop"`
	OSDs     []uint32 `json:"osds"`
	// NumOKPGs and NumNotOKPGs count the PGs the OSDs are acting members
	// of.
	NumOKPGs    int `json:"num_ok_pgs"`
	NumNotOKPGs int `json:"num_not_ok_pgs"`
	// BadBecomeInactive are the PGs that are not active now or would not
	// be (Ceph's key); OKBecomeDegraded those that stay active with fewer
	// members than size.
	BadBecomeInactive []string `json:"bad_become_inactive"`
	OKBecomeDegraded  []string `json:"ok_become_degraded"`
	// Detail says why each PG of BadBecomeInactive is there.
	Detail []string `json:"detail"`
}

// namesOSDs refuses an empty list of OSDs.
func namesOSDs(ids []uint32) error {
	if len(ids) == 0 {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "name at least one OSD")
	}
	return nil
}

// checkOSDIDs refuses an empty list or an OSD the map does not have.
func checkOSDIDs(mp *placement.Map, ids []uint32) error {
	if err := namesOSDs(ids); err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := mp.OSD(id); !ok {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd.%d does not exist (map epoch %d)", id, mp.Epoch())
		}
	}
	return nil
}

// okToStop answers "osd ok-to-stop IDS" from in.
func okToStop(in statusInput, ids []uint32) (*OKToStop, error) {
	mp := in.mp
	if err := checkOSDIDs(mp, ids); err != nil {
		return nil, err
	}
	out := &OKToStop{OSDs: slices.Clone(ids), BadBecomeInactive: []string{}, OKBecomeDegraded: []string{}, Detail: []string{}}
	stopping := func(id uint32) bool { return slices.Contains(ids, id) }
	bad := func(v pgView, format string, args ...any) {
		out.NumNotOKPGs++
		out.BadBecomeInactive = append(out.BadBecomeInactive, v.PGID)
		out.Detail = append(out.Detail, fmt.Sprintf("pg %s: ", v.PGID)+fmt.Sprintf(format, args...))
	}
	for v := range pgViews(in) {
		if !slices.ContainsFunc(v.Acting, stopping) {
			continue
		}
		pool, _ := mp.Pool(v.Pool)
		minSize := placement.MinSize(pool)
		if !v.fresh || !hasToken(v.State, "active") {
			bad(v, "%s now, acting %s", v.State, ActingList(v.Acting))
			continue
		}
		if hasToken(v.State, "backfilling", "backfill_toofull") && !namesFilling(mp, in.beacons, uint32(v.Primary)) {
			// A primary of an older build does not name the members it
			// is backfilling: they cannot be told from whole ones.
			bad(v, "%s, and its primary osd.%d does not say which members are being backfilled (an older build)", v.State, v.Primary)
			continue
		}
		left := slices.DeleteFunc(slices.Clone(v.Acting), stopping)
		whole := slices.DeleteFunc(slices.Clone(left), func(id uint32) bool { return slices.Contains(v.filling, id) })
		if len(whole) < minSize {
			detail := ""
			if n := len(left) - len(whole); n > 0 {
				detail = fmt.Sprintf(" (%d being backfilled)", n)
			}
			bad(v, "%d of min_size %d members with a whole copy would be left, %s%s", len(whole), minSize, ActingList(whole), detail)
			continue
		}
		out.NumOKPGs++
		if len(left) < int(pool.Size) {
			out.OKBecomeDegraded = append(out.OKBecomeDegraded, v.PGID)
		}
	}
	// The bucket records (the meta PG) live on every OSD up and in, and
	// take writes (bucket creates and deletes) while min_size of them are.
	if acting, pool := metaPG(mp); pool != nil && slices.ContainsFunc(acting, stopping) {
		if left, minSize := len(slices.DeleteFunc(slices.Clone(acting), stopping)), placement.MinSize(pool); left < minSize {
			out.NumNotOKPGs++
			out.BadBecomeInactive = append(out.BadBecomeInactive, placement.PGID{Seed: placement.MetaPG}.String())
			out.Detail = append(out.Detail, fmt.Sprintf("pg meta: the bucket records would have %d of min_size %d OSDs up and in: bucket creates and deletes would fail", left, minSize))
		}
	}
	out.OKToStop = out.NumNotOKPGs == 0
	return out, nil
}

// metaPG is the meta PG's acting set (every OSD up and in) and the pool
// whose size and min_size its bucket writes go by (placement.Map.MetaPool);
// nil with no pool.
func metaPG(mp *placement.Map) ([]uint32, *osdpb.Pool) {
	pool := mp.MetaPool()
	if pool == nil {
		return nil, nil
	}
	return mp.ActingSet(pool.Id, placement.MetaPG), pool
}

// namesFilling reports whether OSD id's current beacon comes from a build
// that names the members its PGs are backfilling (PGStat.filling): one
// that also counts the PG copies it holds (MonBeacon.pgs_held, added
// with it).
func namesFilling(mp *placement.Map, beacons map[uint32]*beaconRecord, id uint32) bool {
	o, _ := mp.OSD(id)
	b := currentBeacon(o, beacons[id])
	return b != nil && b.PGsHeld != nil
}

// SafeToDestroy is "osd safe-to-destroy"'s answer, Ceph's: which of the
// OSDs can be destroyed (their disks wiped) without losing a copy of
// anything, and why the others cannot.
type SafeToDestroy struct {
	SafeToDestroy []uint32 `json:"safe_to_destroy"`
	// Mapped: a PG's up or acting set holds it (Ceph's "active"): its
	// copies are still wanted there.
	Mapped []uint32 `json:"mapped"`
	// StoredPGs: it runs and its store still holds PG copies (strays its
	// PGs' primaries have not let it remove yet).
	StoredPGs []uint32 `json:"stored_pgs"`
	// MissingStats: no current count of what its store holds (it is
	// down, or its build does not say), and not every PG is active+clean,
	// so nothing can be concluded.
	MissingStats []uint32 `json:"missing_stats"`
	Detail       []string `json:"detail"`
}

// Safe reports whether every OSD asked about is safe to destroy.
func (s *SafeToDestroy) Safe() bool {
	return len(s.Mapped)+len(s.StoredPGs)+len(s.MissingStats) == 0
}

// safeToDestroy answers "osd safe-to-destroy IDS" from in.
func safeToDestroy(in statusInput, ids []uint32) (*SafeToDestroy, error) {
	mp := in.mp
	if err := namesOSDs(ids); err != nil {
		return nil, err // one the map lacks is safe, below
	}
	out := &SafeToDestroy{SafeToDestroy: []uint32{}, Mapped: []uint32{}, StoredPGs: []uint32{}, MissingStats: []uint32{}, Detail: []string{}}
	// mapped counts the PGs each OSD is a member of; nowhere those it is
	// kept acting in for want of a replacement (out of the up set, which
	// is short of the pool's size).
	mapped, nowhere := map[uint32]int{}, map[uint32]int{}
	allClean := true
	for v := range pgViews(in) {
		// The acting set and the up members being filled beside it.
		pool, _ := mp.Pool(v.Pool)
		for _, id := range mp.Members(v.Pool, v.Seed) {
			mapped[id]++
			if !slices.Contains(v.Up, id) && len(v.Up) < int(pool.Size) {
				nowhere[id]++
			}
		}
		allClean = allClean && v.fresh && hasToken(v.State, "active") && hasToken(v.State, "clean")
	}
	for _, id := range ids {
		o, exists := mp.OSD(id)
		b := currentBeacon(o, in.beacons[id])
		switch {
		case !exists:
			// Gone already (osd rm): nothing of it is left to lose, as
			// Ceph answers; a script waiting on it ends.
			out.SafeToDestroy = append(out.SafeToDestroy, id)
			out.Detail = append(out.Detail, fmt.Sprintf("osd.%d does not exist (map epoch %d)", id, mp.Epoch()))
		case nowhere[id] > 0:
			out.Mapped = append(out.Mapped, id)
			out.Detail = append(out.Detail, fmt.Sprintf("osd.%d: %d pgs map to it though it is out: no other OSD can take them, so it stays acting (add an OSD, or lower the pools' size)", id, nowhere[id]))
		case mapped[id] > 0 && !o.In:
			out.Mapped = append(out.Mapped, id)
			out.Detail = append(out.Detail, fmt.Sprintf("osd.%d: %d pgs still map to it while they move to others (backfill)", id, mapped[id]))
		case mapped[id] > 0:
			out.Mapped = append(out.Mapped, id)
			out.Detail = append(out.Detail, fmt.Sprintf("osd.%d: %d pgs map to it (up or acting set): mark it out and let them move", id, mapped[id]))
		case b != nil && b.PGsHeld != nil && *b.PGsHeld > 0:
			out.StoredPGs = append(out.StoredPGs, id)
			out.Detail = append(out.Detail, fmt.Sprintf("osd.%d: its store still holds %d pg copies (strays it removes once their PGs are clean)", id, *b.PGsHeld))
		case b != nil && b.PGsHeld != nil, allClean:
			out.SafeToDestroy = append(out.SafeToDestroy, id)
		default:
			out.MissingStats = append(out.MissingStats, id)
			out.Detail = append(out.Detail, fmt.Sprintf("osd.%d: no current count of the pg copies it holds (down, or an older build), and not every PG is active+clean: cannot tell", id))
		}
	}
	return out, nil
}
