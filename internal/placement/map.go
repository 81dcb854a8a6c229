package placement

import (
	"cmp"
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// MaxPGCount bounds a pool's pg_count. PG numbers must stay below MetaPG,
// and a bound keeps a pool's placement table (pg_count x size OSD ids) small.
const MaxPGCount = 65536

// Map is an immutable, validated cluster map with the indexes placement
// needs. It is safe for concurrent use, and nothing it returns aliases its
// state. A change of the cluster (an OSD down, a new pool) is a new Map
// from With, with a higher epoch. Make one with FromProto, Unmarshal, Load
// or NewLocal; the zero Map is not usable.
type Map struct {
	pb    *osdpb.ClusterMap // private clone; never mutated after FromProto
	osds  []*osdpb.OSDInfo  // pb's OSDs, sorted by id
	pools []*poolState      // sorted by id
	// byName finds a pool by name. It is only ever looked up, never ranged
	// over, so its iteration order cannot leak into placement.
	byName map[string]*poolState

	// candidates are the OSDs that take data: in, weight > 0, by id, up or
	// not (a down one keeps its place in the ranking; see buildTable).
	candidates []candidate
	// down are the candidates that are not up.
	down map[uint32]bool
	// zeroWeight are up and in OSDs of weight 0, by id: they hold no PGs but
	// still hold bucket records (MetaPG), ranked after everyone else.
	zeroWeight []uint32
}

type candidate struct {
	id     uint32
	weight float64
}

// poolState is one pool and its placement table, built on first use: most
// processes (a client, one OSD) touch one or two pools of a map, and a
// table costs O(pg_count x candidates) draws.
type poolState struct {
	pb *osdpb.Pool // read-only

	once   sync.Once
	stride int      // every PG's slot length: min(size, len(candidates))
	acting []uint32 // pg_count slots of stride OSD ids, up ones first, primary first
	size   []int32  // how many of each slot's OSDs are up: the acting set's length

	metaOnce sync.Once
	meta     []uint32 // MetaPG's acting set

	// temp is the map's pg_temp entries of the pool, by PG, less their
	// members that are down; a PG whose entry has no member up has none.
	temp map[uint32][]uint32
}

// FromProto validates pb and returns a Map over a private copy of it, so
// later changes to pb do not affect the Map. Every rule it enforces is listed
// in the package comment; a violation is a *MapError. It never panics, on
// any input.
func FromProto(pb *osdpb.ClusterMap) (*Map, error) {
	if pb == nil {
		return nil, &MapError{Reason: "nil ClusterMap"}
	}
	return build(proto.CloneOf(pb))
}

// build validates pb and indexes it; the Map takes ownership of pb.
func build(pb *osdpb.ClusterMap) (*Map, error) {
	if pb.Epoch == 0 {
		return nil, &MapError{Field: "epoch", Reason: "must be at least 1"}
	}
	if r := checkText(pb.Fsid, 128); r != "" {
		return nil, &MapError{Field: "fsid", Reason: r}
	}
	m := &Map{pb: pb, byName: make(map[string]*poolState, len(pb.Pools))}
	if err := CheckRatios(pb); err != nil {
		return nil, err
	}

	m.osds = make([]*osdpb.OSDInfo, 0, len(pb.Osds))
	for i, o := range pb.Osds {
		f := fmt.Sprintf("osds[%d]", i)
		if o == nil {
			return nil, &MapError{Field: f, Reason: "null entry"}
		}
		if w := o.Weight; math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return nil, &MapError{Field: f + ".weight", Reason: fmt.Sprintf("%v: want a finite number >= 0", w)}
		}
		if r := checkAddr(o.PublicAddr); r != "" {
			return nil, &MapError{Field: f + ".public_addr", Reason: r}
		}
		if r := checkAddr(o.ClusterAddr); r != "" {
			return nil, &MapError{Field: f + ".cluster_addr", Reason: r}
		}
		m.osds = append(m.osds, o)
	}
	slices.SortStableFunc(m.osds, func(a, b *osdpb.OSDInfo) int { return cmp.Compare(a.Id, b.Id) })
	for i := 1; i < len(m.osds); i++ {
		if m.osds[i].Id == m.osds[i-1].Id {
			return nil, &MapError{Field: "osds", Reason: fmt.Sprintf("OSD id %d appears more than once", m.osds[i].Id)}
		}
	}
	for _, o := range m.osds {
		switch {
		case !o.In:
		case o.Weight > 0:
			m.candidates = append(m.candidates, candidate{id: o.Id, weight: o.Weight})
			if !o.Up {
				if m.down == nil {
					m.down = map[uint32]bool{}
				}
				m.down[o.Id] = true
			}
		case o.Up:
			m.zeroWeight = append(m.zeroWeight, o.Id)
		}
	}

	m.pools = make([]*poolState, 0, len(pb.Pools))
	for i, p := range pb.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		switch {
		case p == nil:
			return nil, &MapError{Field: f, Reason: "null entry"}
		case checkText(p.Name, 255) != "":
			return nil, &MapError{Field: f + ".name", Reason: checkText(p.Name, 255)}
		case p.Size == 0:
			return nil, &MapError{Field: f + ".size", Reason: "must be at least 1"}
		case p.PgCount == 0 || p.PgCount > MaxPGCount:
			return nil, &MapError{Field: f + ".pg_count", Reason: fmt.Sprintf("%d: want 1..%d", p.PgCount, MaxPGCount)}
		case p.Id > MaxPoolID:
			return nil, &MapError{Field: f + ".id", Reason: fmt.Sprintf("%d: want 0..%d", p.Id, MaxPoolID)}
		case p.MinSize > p.Size:
			return nil, &MapError{Field: f + ".min_size", Reason: fmt.Sprintf("%d exceeds size %d", p.MinSize, p.Size)}
		}
		if _, dup := m.byName[p.Name]; dup {
			return nil, &MapError{Field: f + ".name", Reason: fmt.Sprintf("pool name %q appears more than once", p.Name)}
		}
		ps := &poolState{pb: p}
		m.byName[p.Name] = ps
		m.pools = append(m.pools, ps)
	}
	slices.SortStableFunc(m.pools, func(a, b *poolState) int { return cmp.Compare(a.pb.Id, b.pb.Id) })
	for i := 1; i < len(m.pools); i++ {
		if m.pools[i].pb.Id == m.pools[i-1].pb.Id {
			return nil, &MapError{Field: "pools", Reason: fmt.Sprintf("pool id %d appears more than once", m.pools[i].pb.Id)}
		}
	}
	if err := m.indexPGTemp(); err != nil {
		return nil, err
	}
	return m, nil
}

// indexPGTemp checks the map's pg_temp entries (sorted and each PG once,
// at least one OSD, none twice) and indexes each by its pool, less the
// members that are down. An entry of a pool or PG the map no longer has,
// naming an OSD it no longer has, or longer than its pool's size is
// ignored, not refused: a mon of a build that predates pg_temp keeps the
// entries through changes it does not tidy them for (osd rm, a smaller
// size), and every OSD and client must still read its maps.
func (m *Map) indexPGTemp() error {
	for i, t := range m.pb.PgTemp {
		f := fmt.Sprintf("pg_temp[%d]", i)
		if t == nil {
			return &MapError{Field: f, Reason: "null entry"}
		}
		if len(t.Osds) == 0 {
			return &MapError{Field: f + ".osds", Reason: "no OSDs"}
		}
		if i > 0 {
			if p := m.pb.PgTemp[i-1]; p.GetPool() > t.Pool || p.GetPool() == t.Pool && p.GetPg() >= t.Pg {
				return &MapError{Field: f, Reason: fmt.Sprintf("pg %d.%x after %d.%x: want sorted, each PG once", t.Pool, t.Pg, p.GetPool(), p.GetPg())}
			}
		}
		for j, id := range t.Osds {
			if slices.Contains(t.Osds[:j], id) {
				return &MapError{Field: f + ".osds", Reason: fmt.Sprintf("osd.%d appears more than once", id)}
			}
		}
		ps := m.pool(t.Pool)
		if ps == nil || t.Pg >= ps.pb.PgCount || len(t.Osds) > int(ps.pb.Size) ||
			slices.ContainsFunc(t.Osds, func(id uint32) bool { return m.osd(id) == nil }) {
			continue // stale: see above
		}
		var up []uint32
		for _, id := range t.Osds {
			if m.osd(id).Up {
				up = append(up, id)
			}
		}
		if len(up) > 0 {
			if ps.temp == nil {
				ps.temp = map[uint32][]uint32{}
			}
			ps.temp[t.Pg] = up
		}
	}
	return nil
}

// Ceph's default full ratios, for a map that sets none.
const (
	DefaultNearfullRatio     = 0.85
	DefaultBackfillfullRatio = 0.90
	DefaultFullRatio         = 0.95
)

func ratioOr(r, def float64) float64 {
	if r == 0 {
		return def
	}
	return r
}

// CheckRatios accepts full ratios in (0, 1] (0: the default) that do not
// decrease from nearfull to full.
func CheckRatios(pb *osdpb.ClusterMap) error {
	for _, f := range []struct {
		name string
		r    float64
	}{{"nearfull_ratio", pb.NearfullRatio}, {"backfillfull_ratio", pb.BackfillfullRatio}, {"full_ratio", pb.FullRatio}} {
		if math.IsNaN(f.r) || f.r < 0 || f.r > 1 {
			return &MapError{Field: f.name, Reason: fmt.Sprintf("%v: want a fraction in (0, 1]", f.r)}
		}
	}
	near := ratioOr(pb.NearfullRatio, DefaultNearfullRatio)
	back := ratioOr(pb.BackfillfullRatio, DefaultBackfillfullRatio)
	full := ratioOr(pb.FullRatio, DefaultFullRatio)
	if near > back || back > full {
		return &MapError{Field: "full ratios", Reason: fmt.Sprintf("nearfull %v, backfillfull %v, full %v: want nearfull <= backfillfull <= full", near, back, full)}
	}
	return nil
}

// The osdmap flags an operator sets (ClusterMap.flags), Ceph's.
const (
	FlagNoOut = "noout" // the mon marks no down OSD out
	FlagNoIn  = "noin"  // a booting OSD that is out stays out; a new one enters out
)

// Flags are the osdmap flags this build knows, sorted.
var Flags = []string{FlagNoIn, FlagNoOut}

// HasFlag reports whether the map has flag set.
func (m *Map) HasFlag(flag string) bool { return slices.Contains(m.pb.Flags, flag) }

// SetFlags are the map's flags, sorted.
func (m *Map) SetFlags() []string { return slices.Clone(m.pb.Flags) }

// FullRatios returns the map's nearfull, backfillfull and full ratios,
// Ceph's defaults for those it does not set (all of them on a nil map).
func (m *Map) FullRatios() (nearfull, backfillfull, full float64) {
	if m == nil {
		return DefaultNearfullRatio, DefaultBackfillfullRatio, DefaultFullRatio
	}
	return ratioOr(m.pb.NearfullRatio, DefaultNearfullRatio),
		ratioOr(m.pb.BackfillfullRatio, DefaultBackfillfullRatio),
		ratioOr(m.pb.FullRatio, DefaultFullRatio)
}

// Fullness is the state of an OSD whose data filesystem is this fraction
// used, against the map's ratios (FULLNESS_FAILSAFE is the OSD's own
// judgement, never the map's).
func (m *Map) Fullness(used float64) osdpb.Fullness {
	near, back, full := m.FullRatios()
	switch {
	case used >= full:
		return osdpb.Fullness_FULLNESS_FULL
	case used >= back:
		return osdpb.Fullness_FULLNESS_BACKFILLFULL
	case used >= near:
		return osdpb.Fullness_FULLNESS_NEARFULL
	}
	return osdpb.Fullness_FULLNESS_NONE
}

// checkText accepts a non-empty, printable UTF-8 string of at most max
// bytes (fsids and pool names end up in logs, paths and JSON).
func checkText(s string, max int) string {
	switch {
	case s == "":
		return "missing"
	case len(s) > max:
		return fmt.Sprintf("%d bytes long; at most %d", len(s), max)
	case !utf8.ValidString(s):
		return fmt.Sprintf("%q is not valid UTF-8", s)
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Sprintf("%q has a non-printable character", s)
	}
	return ""
}

// With returns a copy of the map changed by edit, at the next epoch, e.g.
// to mark an OSD down:
//
//	next, err := m.With(func(pb *osdpb.ClusterMap) {
//		for _, o := range pb.Osds {
//			if o.Id == 3 {
//				o.Up = false
//			}
//		}
//	})
//
// edit gets a private copy of the map's proto; the epoch it leaves is
// ignored (the result's epoch is always m.Epoch()+1, so the new map
// supersedes m everywhere), and it must not change the fsid, which would
// make the result another cluster's map. The result is validated like
// FromProto's. A nil edit only advances the epoch.
func (m *Map) With(edit func(pb *osdpb.ClusterMap)) (*Map, error) {
	if m.pb.Epoch == math.MaxUint64 {
		return nil, &MapError{Field: "epoch", Reason: "at its maximum; cannot advance"}
	}
	pb := m.Proto()
	if edit != nil {
		edit(pb)
	}
	if pb.GetFsid() != m.pb.Fsid {
		return nil, &MapError{Field: "fsid", Reason: fmt.Sprintf("With changed it from %q to %q; a new fsid is a new cluster", m.pb.Fsid, pb.GetFsid())}
	}
	pb.Epoch = m.pb.Epoch + 1
	// Clone again: edit may have kept pb and could change it later.
	return FromProto(pb)
}

// Epoch is the map's version; a higher epoch supersedes a lower one.
func (m *Map) Epoch() uint64 { return m.pb.Epoch }

// FSID names the cluster; an OSD refuses ops from another cluster's map.
func (m *Map) FSID() string { return m.pb.Fsid }

// Proto returns a copy of the map as a proto, e.g. to send in a GetMapReply.
// The copy is the caller's to change.
func (m *Map) Proto() *osdpb.ClusterMap { return proto.CloneOf(m.pb) }

// PendingAddr is the addresses of an OSD that was created ("osd create")
// and never booted: one the map accepts and nobody can dial.
const PendingAddr = "mem://osd-not-booted"

// NeverBooted reports whether o was created and no daemon has booted as
// it since: its addresses are PendingAddr.
func NeverBooted(o *osdpb.OSDInfo) bool { return o.GetPublicAddr() == PendingAddr }

// OSD returns a copy of the OSD with the given id.
func (m *Map) OSD(id uint32) (*osdpb.OSDInfo, bool) {
	o := m.osd(id)
	if o == nil {
		return nil, false
	}
	return proto.CloneOf(o), true
}

// PublicAddr returns where clients reach OSD id, without copying the OSD.
func (m *Map) PublicAddr(id uint32) (string, bool) {
	o := m.osd(id)
	return o.GetPublicAddr(), o != nil
}

// ClusterAddr returns where other OSDs reach OSD id, without copying the OSD.
func (m *Map) ClusterAddr(id uint32) (string, bool) {
	o := m.osd(id)
	return o.GetClusterAddr(), o != nil
}

func (m *Map) osd(id uint32) *osdpb.OSDInfo {
	i, ok := slices.BinarySearchFunc(m.osds, id, func(o *osdpb.OSDInfo, id uint32) int { return cmp.Compare(o.Id, id) })
	if !ok {
		return nil
	}
	return m.osds[i]
}

// OSDs yields a copy of every OSD, in ascending id order.
func (m *Map) OSDs() iter.Seq[*osdpb.OSDInfo] {
	return func(yield func(*osdpb.OSDInfo) bool) {
		for _, o := range m.osds {
			if !yield(proto.CloneOf(o)) {
				return
			}
		}
	}
}

// GivenUp reports whether what OSD id held of a past interval that began
// at epoch first is gone (pg.AdvanceMap.GivenUp): the map no longer has it
// (osd rm), it is down and an operator declared it lost (osd lost) after
// first, or its store was born after first (a replaced disk under the old
// id). It copies nothing: peering asks for every PG at every epoch.
func (m *Map) GivenUp(id uint32, first uint64) bool {
	o := m.osd(id)
	return o == nil || !o.Up && o.LostAt > first || o.Born > first
}

// Pool returns a copy of the pool with the given id.
func (m *Map) Pool(id uint32) (*osdpb.Pool, bool) {
	ps := m.pool(id)
	if ps == nil {
		return nil, false
	}
	return proto.CloneOf(ps.pb), true
}

// PoolByName returns a copy of the pool with the given name.
func (m *Map) PoolByName(name string) (*osdpb.Pool, bool) {
	ps, ok := m.byName[name]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(ps.pb), true
}

// Pools yields a copy of every pool, in ascending id order.
func (m *Map) Pools() iter.Seq[*osdpb.Pool] {
	return func(yield func(*osdpb.Pool) bool) {
		for _, ps := range m.pools {
			if !yield(proto.CloneOf(ps.pb)) {
				return
			}
		}
	}
}

// MetaPool is a copy of the pool whose placement places MetaPG (the
// bucket records) and whose size and min_size their writes go by: the one
// with the lowest id. Nil when the map has no pool.
func (m *Map) MetaPool() *osdpb.Pool {
	if len(m.pools) == 0 {
		return nil
	}
	return proto.CloneOf(m.pools[0].pb)
}

func (m *Map) pool(id uint32) *poolState {
	i, ok := slices.BinarySearchFunc(m.pools, id, func(ps *poolState, id uint32) int { return cmp.Compare(ps.pb.Id, id) })
	if !ok {
		return nil
	}
	return m.pools[i]
}
