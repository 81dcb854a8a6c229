package mon

import (
	"cmp"
	"slices"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// pg_temp, as Ceph's mon primes it (mon_osd_prime_pg_temp): a map change
// that gives a PG an up set with a member the PG's acting set lacks (an
// OSD marked out while it runs, a new OSD in, a reweight) would make that
// member, which holds nothing of the PG, a member at once, and the old
// one, which holds all of it, a stray. Instead the new map keeps the old
// acting set as the PG's pg_temp entry: the old members serve on, with
// every copy, while the new one is backfilled beside them, and the PG is
// remapped (its copies to move are misplaced, not degraded). Once the up
// set holds the PG its primary says so in its beacon (PGStat.up_filled)
// and the mon drops the entry.
//
// An entry is made only when the old acting set, less the members the new
// map marks down, is at least as large as the new up set: where it is
// smaller (a down OSD marked out, a pool's size raised) keeping it would
// leave the PG with fewer members than placement gives it, and the new
// members, filled in the acting set, are counted as what they are
// (pg.PG.Backfilling).
//
// An entry is also made when placement has no replacement for a member it
// drops (fewer OSDs in than the pool's size, the member out but running):
// the old acting set keeps its whole copy serving, as Ceph keeps such an
// OSD acting, and the PG is active+clean+remapped with nothing to move.
// The entry goes when the member comes back in, or when all its up
// members are down; while the member is down the PG runs on the others,
// and it is a member again when it boots. If an OSD comes in instead, it
// is filled and the primary reports the up set full.

// tidyPGTemp drops what of pb's pg_temp entries pb no longer allows: the
// entries of pools gone or PGs past their pool's pg_count and OSDs removed
// from the map; an entry longer than its pool's size (the size lowered) is
// shortened to it, keeping the members up and in first, in their order.
// Dropped instead, a PG whose new up set held a member being backfilled
// had it act at once, holding part of the PG: as its primary it served
// nothing until filled (71 s in a probe) and the others kept one whole
// copy; Ceph keeps complete OSDs acting. It runs inside each edit, before
// the map is validated.
func tidyPGTemp(pb *osdpb.ClusterMap) {
	if len(pb.PgTemp) == 0 {
		return
	}
	pools := map[uint32]*osdpb.Pool{}
	for _, p := range pb.Pools {
		pools[p.GetId()] = p
	}
	pb.PgTemp = slices.DeleteFunc(pb.PgTemp, func(t *osdpb.PGTemp) bool {
		p := pools[t.GetPool()]
		if p == nil || t.GetPg() >= p.PgCount {
			return true
		}
		t.Osds = slices.DeleteFunc(t.Osds, func(id uint32) bool { return osdByID(pb, id) == nil })
		if n := int(p.Size); len(t.Osds) > n {
			serving := func(id uint32) bool { o := osdByID(pb, id); return o.Up && o.In }
			t.Osds = append(slices.DeleteFunc(slices.Clone(t.Osds), func(id uint32) bool { return !serving(id) }),
				slices.DeleteFunc(slices.Clone(t.Osds), serving)...)[:n]
		}
		return len(t.Osds) == 0
	})
}

// primePGTemp returns next with its pg_temp entries brought up to date
// against cur, the map it follows: an entry for each PG whose new up set
// has a member cur's acting set lacked (see above), and none that is
// redundant (its up members are the up set) or has no member up; none at
// all while an up OSD's build predates pg_temp (it would take the up set
// for the acting set). It returns next itself when nothing changes.
func primePGTemp(cur, next *placement.Map) (*placement.Map, error) {
	pb := next.Proto()
	var temps []*osdpb.PGTemp
	changed := false
	isUp, isOut := map[uint32]bool{}, map[uint32]bool{}
	for o := range next.OSDs() {
		isUp[o.Id], isOut[o.Id] = o.Up, !o.In
	}
	up := func(id uint32) bool { return isUp[id] }
	primeOK := next.AllUpHave(placement.FeaturePGTemp)
	for pool := range next.Pools() {
		_, existed := cur.Pool(pool.Id)
		for pg := range pool.PgCount {
			upSet := next.UpSet(pool.Id, pg)
			if t, ok := next.PGTemp(pool.Id, pg); ok {
				acting := slices.DeleteFunc(slices.Clone(t), func(id uint32) bool { return !up(id) })
				// An entry that keeps an out OSD for want of a
				// replacement stays while that OSD is down: when it
				// boots again, still out, it is a member again (and
				// catches up), as Ceph's primary would take it back.
				extra := slices.DeleteFunc(slices.Clone(t), func(id uint32) bool { return slices.Contains(upSet, id) })
				waits := len(upSet) < int(pool.Size) && len(extra) > 0 &&
					!slices.ContainsFunc(extra, func(id uint32) bool { return !isOut[id] })
				if len(acting) == 0 || slices.Equal(acting, upSet) && !waits || !primeOK {
					// Served by its up set again; or an OSD that cannot
					// read entries is up, and every OSD must agree on
					// the acting sets: all entries go.
					changed = true
					continue
				}
				temps = append(temps, &osdpb.PGTemp{Pool: pool.Id, Pg: pg, Osds: t})
				continue
			}
			if !existed || !primeOK || slices.Equal(cur.UpSet(pool.Id, pg), upSet) {
				// Only a change of placement makes an entry: one the
				// edit dropped (filled) stays dropped. And only while
				// every up OSD reads entries: an older one would take
				// the up set for the acting set.
				continue
			}
			old := slices.DeleteFunc(cur.ActingSet(pool.Id, pg), func(id uint32) bool { return !up(id) })
			if len(old) == 0 || len(old) > int(pool.Size) {
				continue
			}
			gains := slices.ContainsFunc(upSet, func(id uint32) bool { return !slices.Contains(old, id) })
			// No replacement: placement found fewer OSDs than size, and
			// an old member it dropped (out, but running) still holds a
			// whole copy. As Ceph's choose_acting fills its want set
			// from the old acting set, it stays a member: the PG keeps
			// size copies, remapped, until the member goes down, comes
			// back in, or placement finds it a replacement to fill.
			noReplacement := !gains && len(upSet) < int(pool.Size) && len(old) > len(upSet)
			if !noReplacement && (!gains || len(old) < len(upSet)) {
				continue
			}
			temps = append(temps, &osdpb.PGTemp{Pool: pool.Id, Pg: pg, Osds: old})
			changed = true
		}
	}
	if !changed {
		return next, nil
	}
	slices.SortFunc(temps, func(a, b *osdpb.PGTemp) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Pg, b.Pg))
	})
	pb.PgTemp = temps
	return placement.FromProto(pb)
}

// dropFilledPGTemp removes the pg_temp entries of the PGs that OSD id, as
// their acting primary at pb's epoch (the epoch of mp), reported filled:
// their up sets hold them now. A report counts when it was made at that
// epoch, or at one whose map (past, by epoch; nil when not kept) gave the
// PG the same entry, up set and primary: each drop is a new epoch, and
// the other primaries' reports of the same round would otherwise wait a
// beacon each. It returns the PGs it removed.
func dropFilledPGTemp(pb *osdpb.ClusterMap, mp *placement.Map, id uint32, stats []*osdpb.PGStat, past func(epoch uint64) *placement.Map) []placement.PGID {
	var dropped []placement.PGID
	for _, st := range stats {
		if !st.GetUpFilled() || st.GetEpoch() > pb.Epoch || !mp.IsPrimary(st.GetPool(), st.GetPg(), id) {
			continue
		}
		if st.GetEpoch() < pb.Epoch && !samePGTemp(past(st.GetEpoch()), mp, st.GetPool(), st.GetPg()) {
			continue
		}
		i := slices.IndexFunc(pb.PgTemp, func(t *osdpb.PGTemp) bool { return t.GetPool() == st.GetPool() && t.GetPg() == st.GetPg() })
		if i < 0 {
			continue
		}
		pb.PgTemp = slices.Delete(pb.PgTemp, i, i+1)
		dropped = append(dropped, placement.PGID{Pool: st.GetPool(), Seed: st.GetPg()})
	}
	return dropped
}

// samePGTemp reports whether old (nil: not kept) gave PG pg of pool the
// pg_temp entry, up set and acting set that mp gives it.
func samePGTemp(old, mp *placement.Map, pool, pg uint32) bool {
	if old == nil {
		return false
	}
	a, okA := old.PGTemp(pool, pg)
	b, okB := mp.PGTemp(pool, pg)
	return okA && okB && slices.Equal(a, b) && slices.Equal(old.UpSet(pool, pg), mp.UpSet(pool, pg)) &&
		slices.Equal(old.ActingSet(pool, pg), mp.ActingSet(pool, pg))
}
