package placement

import (
	"cmp"
	"iter"
	"math"
	"slices"
	"strconv"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// MetaPG is the PG that holds bucket records. Its acting set is every up and
// in OSD, so every such OSD holds every bucket record and can answer
// "does this bucket exist" from its own store; the order (and so the
// primary, which orders bucket creations and deletions) is straw2's.
// PGOf never returns it: pg_count is at most MaxPGCount.
const MetaPG = math.MaxUint32

// Role is an OSD's position in a PG's acting set: 0 is the primary, 1 the
// first replica, and so on.
type Role int

// RolePrimary is the role of the first OSD of an acting set.
const RolePrimary Role = 0

// IsPrimary reports whether the role is the primary's.
func (r Role) IsPrimary() bool { return r == RolePrimary }

func (r Role) String() string {
	if r == RolePrimary {
		return "primary"
	}
	return "replica " + strconv.Itoa(int(r))
}

// ActingSet returns the OSDs that serve PG pg of pool, primary first: the
// up members of its pg_temp entry when the map has one (the old members
// serving on while the new ones fill: PGTemp), else its up set (UpSet).
// It returns nil for an unknown pool or a PG out of range.
//
// straw2 gives each eligible OSD i the draw ln(u_i)/weight_i, with u_i in
// (0, 1] a stable hash of (pool id, pg, OSD id), and ranks by draw, highest
// first; equal draws rank the lower id first. Each OSD's draw depends only
// on itself, so adding, removing or reweighting one OSD moves data only to
// or from that OSD. See drawCost for how the draw is computed exactly alike
// on every platform.
//
// The result is a fresh slice the caller may keep and change;
// AppendActingSet avoids the allocation. The first call for a pool builds
// the pool's whole placement table (O(pg_count x OSDs) hashes); later calls
// are lookups.
func (m *Map) ActingSet(pool, pg uint32) []uint32 {
	set := m.acting(pool, pg)
	if set == nil {
		return nil
	}
	return slices.Clone(set)
}

// ActingView is ActingSet without the copy, for paths that run per op and
// only look: the caller must not modify it.
func (m *Map) ActingView(pool, pg uint32) []uint32 {
	set := m.acting(pool, pg)
	return set[:len(set):len(set)]
}

// UpSet returns the OSDs placement puts PG pg of pool on, primary first:
// of the top pool.size OSDs by straw2 among those in and of weight > 0
// (all of them when there are fewer), the ones that are up; or for MetaPG
// every up and in OSD. A PG with a member down has fewer than pool.size:
// it is undersized until that member comes back or is marked out. The
// members of the up set that are not acting (a pg_temp entry is in force)
// are being backfilled: they take the PG's writes, and the primary asks
// the mon to drop the entry once they hold it.
func (m *Map) UpSet(pool, pg uint32) []uint32 {
	return slices.Clone(m.up(pool, pg))
}

// PGTemp returns PG pg of pool's pg_temp entry as the map has it, down
// members included; false when it has none.
func (m *Map) PGTemp(pool, pg uint32) ([]uint32, bool) {
	i, ok := slices.BinarySearchFunc(m.pb.PgTemp, [2]uint32{pool, pg}, func(t *osdpb.PGTemp, k [2]uint32) int {
		return cmp.Or(cmp.Compare(t.Pool, k[0]), cmp.Compare(t.Pg, k[1]))
	})
	if !ok {
		return nil, false
	}
	return slices.Clone(m.pb.PgTemp[i].Osds), true
}

// The features of a build that a map may depend on (OSDInfo.features,
// which each OSD's boot sets): the mon relies on one only once every up
// OSD has it.
const (
	// FeaturePGTemp: acting sets come from pg_temp entries (PGTemp).
	FeaturePGTemp uint64 = 1 << 0

	// Features are those this build has.
	Features = FeaturePGTemp
)

// AllUpHave reports whether every up OSD of the map has feature f.
func (m *Map) AllUpHave(f uint64) bool {
	for _, o := range m.osds {
		if o.Up && o.Features&f != f {
			return false
		}
	}
	return true
}

// Members returns every OSD that takes PG pg of pool's writes: its acting
// set, primary first, then the members of its up set outside it (being
// filled while a pg_temp entry is in force).
func (m *Map) Members(pool, pg uint32) []uint32 {
	set := slices.Clone(m.acting(pool, pg))
	for _, id := range m.up(pool, pg) {
		if !slices.Contains(set, id) {
			set = append(set, id)
		}
	}
	return set
}

// IsMember reports whether osd is among PG pg of pool's Members.
func (m *Map) IsMember(pool, pg, osd uint32) bool {
	return slices.Contains(m.acting(pool, pg), osd) || slices.Contains(m.up(pool, pg), osd)
}

// FillingPGsOf yields, in ascending order, each PG of pool that osd is in
// the up set of but not the acting set of (a pg_temp entry is in force):
// the PGs it is being filled with, beside those PGsOf yields.
func (m *Map) FillingPGsOf(pool, osd uint32) iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		ps := m.pool(pool)
		if ps == nil || len(ps.temp) == 0 {
			return
		}
		pgs := make([]uint32, 0, len(ps.temp))
		for pg := range ps.temp {
			pgs = append(pgs, pg)
		}
		slices.Sort(pgs)
		for _, pg := range pgs {
			if slices.Contains(m.up(pool, pg), osd) && !slices.Contains(ps.temp[pg], osd) && !yield(pg) {
				return
			}
		}
	}
}

// Remapped reports whether PG pg of pool's acting set is not its up set (a
// pg_temp entry is in force): Ceph's "remapped".
func (m *Map) Remapped(pool, pg uint32) bool {
	return !slices.Equal(m.acting(pool, pg), m.up(pool, pg))
}

// AppendActingSet appends ActingSet(pool, pg) to dst and returns it.
func (m *Map) AppendActingSet(dst []uint32, pool, pg uint32) []uint32 {
	return append(dst, m.acting(pool, pg)...)
}

// Primary returns the primary OSD of PG pg of pool; false when the pool or
// PG does not exist or no OSD is eligible.
func (m *Map) Primary(pool, pg uint32) (uint32, bool) {
	set := m.acting(pool, pg)
	if len(set) == 0 {
		return 0, false
	}
	return set[0], true
}

// IsPrimary reports whether osd is the primary of PG pg of pool.
func (m *Map) IsPrimary(pool, pg, osd uint32) bool {
	p, ok := m.Primary(pool, pg)
	return ok && p == osd
}

// RoleOf returns osd's position in the acting set of PG pg of pool; false
// when osd is not in it.
func (m *Map) RoleOf(pool, pg, osd uint32) (Role, bool) {
	i := slices.Index(m.acting(pool, pg), osd)
	return Role(i), i >= 0
}

// PGsOf yields, in ascending PG order, each PG of pool whose acting set
// contains osd, with osd's role in it. MetaPG is not among them: every up
// and in OSD is in it (see RoleOf(pool, MetaPG, osd)).
func (m *Map) PGsOf(pool, osd uint32) iter.Seq2[uint32, Role] {
	return func(yield func(uint32, Role) bool) {
		ps := m.pool(pool)
		if ps == nil {
			return
		}
		m.buildTable(ps)
		if ps.stride == 0 && len(ps.temp) == 0 {
			return
		}
		for pg := range ps.pb.PgCount {
			// With no OSD in (every one out) straw2 places nothing, but
			// pg_temp entries keep out OSDs acting for want of others:
			// their primaries still report the PGs (else every PG read
			// "unknown", with no objects, in the status).
			set, ok := ps.temp[pg]
			if !ok && ps.stride != 0 {
				set = ps.row(pg)
			}
			if i := slices.Index(set, osd); i >= 0 && !yield(pg, Role(i)) {
				return
			}
		}
	}
}

// acting returns the read-only acting set of (pool, pg), or nil.
func (m *Map) acting(pool, pg uint32) []uint32 {
	if ps := m.pool(pool); ps != nil && pg != MetaPG {
		if t, ok := ps.temp[pg]; ok {
			return t[:len(t):len(t)]
		}
	}
	return m.up(pool, pg)
}

// actingRow is PG pg's acting set once the table is built: its pg_temp
// entry's up members, or its row.
func (ps *poolState) actingRow(pg uint32) []uint32 {
	if t, ok := ps.temp[pg]; ok {
		return t[:len(t):len(t)]
	}
	return ps.row(pg)
}

// up returns the read-only up set of (pool, pg), or nil.
func (m *Map) up(pool, pg uint32) []uint32 {
	ps := m.pool(pool)
	if ps == nil {
		return nil
	}
	if pg == MetaPG {
		ps.metaOnce.Do(func() { ps.meta = m.metaSet(ps.pb.Id) })
		return ps.meta[:len(ps.meta):len(ps.meta)]
	}
	if pg >= ps.pb.PgCount {
		return nil
	}
	m.buildTable(ps)
	return ps.row(pg)
}

// row is PG pg's acting set in the table: its up members, compacted to the
// front of its stride-long slot.
func (ps *poolState) row(pg uint32) []uint32 {
	if ps.stride == 0 {
		return nil
	}
	lo := int(pg) * ps.stride
	hi := lo + int(ps.size[pg])
	return ps.acting[lo:hi:hi]
}

// buildTable computes every acting set of the pool once. straw2 ranks the
// OSDs that are in, whether up or not, as Ceph's CRUSH does: a down OSD
// keeps its slots, so its PGs run undersized (degraded) rather than move,
// until it is marked out and straw2 picks its replacement. The acting set
// is then that ranking's up members.
func (m *Map) buildTable(ps *poolState) {
	ps.once.Do(func() {
		n := int(min(uint64(ps.pb.Size), uint64(len(m.candidates))))
		ps.stride = n
		if n == 0 {
			return
		}
		ps.acting = make([]uint32, int(ps.pb.PgCount)*n)
		ps.size = make([]int32, ps.pb.PgCount)
		top := make([]ranked, 0, n)
		for pg := range ps.pb.PgCount {
			top = m.straw2(top[:0], ps.pb.Id, pg, n)
			row := ps.acting[int(pg)*n : int(pg+1)*n]
			k := 0
			for _, r := range top {
				if !m.down[r.id] {
					row[k] = r.id
					k++
				}
			}
			ps.size[pg] = int32(k)
		}
	})
}

// ranked is one OSD's straw2 result for one PG: cost is -draw, scaled, so
// the lowest cost wins.
type ranked struct {
	cost float64
	id   uint32
}

// straw2 fills top with the n best candidates for (pool, pg), best first.
// Candidates come in ascending id order and a newcomer must beat a kept
// one strictly, so equal costs keep the lower id ahead.
func (m *Map) straw2(top []ranked, pool, pg uint32, n int) []ranked {
	for _, c := range m.candidates {
		// The one float step: an IEEE division, correctly rounded on every
		// platform. The cost is below 2^53, so the conversion is exact.
		r := ranked{cost: float64(drawCost(pool, pg, c.id)) / c.weight, id: c.id}
		if len(top) == n && r.cost >= top[n-1].cost {
			continue
		}
		if len(top) < n {
			top = append(top, r)
		} else {
			top[n-1] = r
		}
		// Insertion: n is the replica count, a handful.
		for i := len(top) - 1; i > 0 && r.cost < top[i-1].cost; i-- {
			top[i], top[i-1] = top[i-1], top[i]
		}
	}
	return top
}

// metaSet ranks every up and in OSD for MetaPG: candidates by straw2, then
// the weight-0 ones by id (their draw would be -Inf for all of them).
func (m *Map) metaSet(pool uint32) []uint32 {
	all := make([]ranked, 0, len(m.candidates))
	for _, c := range m.candidates {
		if m.down[c.id] {
			continue
		}
		all = append(all, ranked{cost: float64(drawCost(pool, MetaPG, c.id)) / c.weight, id: c.id})
	}
	slices.SortFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.cost, b.cost), cmp.Compare(a.id, b.id))
	})
	set := make([]uint32, 0, len(all)+len(m.zeroWeight))
	for _, r := range all {
		set = append(set, r.id)
	}
	return append(set, m.zeroWeight...)
}
