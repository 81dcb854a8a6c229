package placement

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// Statistical bounds. Placement is deterministic, so these tests cannot
// flake; the bounds say how far from ideal a good hash may land, so that a
// broken one (poor mixing, a biased draw) fails and a good one passes.
const (
	// chi2df9p999 is the 99.9% quantile of chi-square with 9 degrees of
	// freedom (10 OSDs).
	chi2df9p999 = 27.88
	// sigmas is how many standard deviations from the expectation a count
	// may be: 4 sigma is passed by a fair hash 99.99% of the time.
	sigmas = 4
)

// counts returns, per OSD id, the number of PG memberships and of
// primaries in pool.
func counts(m *Map, pool uint32) (member, primary map[uint32]int) {
	member, primary = map[uint32]int{}, map[uint32]int{}
	p, _ := m.Pool(pool)
	for pg := range p.PgCount {
		set := m.ActingSet(pool, pg)
		for _, id := range set {
			member[id]++
		}
		primary[set[0]]++
	}
	return member, primary
}

func chiSquare(obs map[uint32]int, n int, expected float64) float64 {
	chi := 0.0
	for id := range uint32(n) {
		d := float64(obs[id]) - expected
		chi += d * d / expected
	}
	return chi
}

// TestSpreadEven: 10 equal OSDs, 1024 PGs, 3 replicas. An OSD's
// memberships are about Binomial(1024, 0.3): mean 307.2, sd 14.7, so ±25%
// is ±5.2 sd. Its primaries are Binomial(1024, 0.1): mean 102.4, sd 9.6,
// where ±25% would be only 2.7 sd (a fair hash would miss it for some OSD
// in about half of all pools), so primaries get ±4 sd (±37%). Primaries
// are Multinomial(1024, 1/10) over the OSDs, so their chi-square follows
// chi2(9); memberships vary less than Poisson (sd^2 = 0.7 mean), which
// makes the same bound conservative for them. Several pools, so that one
// lucky pool id proves nothing.
func TestSpreadEven(t *testing.T) {
	const osds, pgs, size = 10, 1024, 3
	for pool := uint32(1); pool <= 4; pool++ {
		m := mustMap(t, testProto(equalWeights(osds), &osdpb.Pool{Id: pool, Name: "p", Size: size, PgCount: pgs}))
		member, primary := counts(m, pool)
		meanM, meanP := float64(pgs*size)/osds, float64(pgs)/osds
		chiM, chiP := chiSquare(member, osds, meanM), chiSquare(primary, osds, meanP)
		lo, hi := slices.Min(mapValues(member)), slices.Max(mapValues(member))
		plo, phi := slices.Min(mapValues(primary)), slices.Max(mapValues(primary))
		t.Logf("pool %d: memberships %d..%d (mean %.1f, chi2 %.1f), primaries %d..%d (mean %.1f, chi2 %.1f)",
			pool, lo, hi, meanM, chiM, plo, phi, meanP, chiP)
		for id := range uint32(osds) {
			if d := math.Abs(float64(member[id])-meanM) / meanM; d > 0.25 {
				t.Errorf("pool %d: OSD %d is in %d PGs, %.0f%% off the mean %.1f", pool, id, member[id], 100*d, meanM)
			}
			if sd := math.Sqrt(meanP * (1 - 1.0/osds)); math.Abs(float64(primary[id])-meanP) > sigmas*sd {
				t.Errorf("pool %d: OSD %d is primary of %d PGs, more than %d sd (%.1f) off the mean %.1f", pool, id, primary[id], sigmas, sd, meanP)
			}
		}
		if chiM > chi2df9p999 || chiP > chi2df9p999 {
			t.Errorf("pool %d: chi-square memberships %.1f, primaries %.1f; want <= %.2f", pool, chiM, chiP, chi2df9p999)
		}
	}
}

func mapValues(m map[uint32]int) []int {
	var v []int
	for _, n := range m {
		v = append(v, n)
	}
	return v
}

// topKProbability is the chance that an OSD of weight w ranks among the
// top k by straw2 against others OSDs of weight 1. straw2's cost -ln(u)/w
// is exponential with rate w, so this is an exponential race: the OSD
// finishing at t beats all but at most k-1 of the others, each of which has
// finished by t with probability 1-e^-t. Integrated numerically.
func topKProbability(w float64, others, k int) float64 {
	const steps, end = 200000, 60.0
	dt := end / w / steps
	sum := 0.0
	for i := range steps {
		t := (float64(i) + 0.5) * dt
		q := 1 - math.Exp(-t) // one other OSD finished by t
		atMost := 0.0         // P(Binomial(others, q) <= k-1)
		for j := 0; j < k && j <= others; j++ {
			atMost += binom(others, j) * math.Pow(q, float64(j)) * math.Pow(1-q, float64(others-j))
		}
		sum += w * math.Exp(-w*t) * atMost * dt
	}
	return sum
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// TestWeightsHonoured: one OSD of weight 2 among nine of weight 1. Its
// primaries are 2/11 of the PGs (twice a weight-1 OSD's 1/11: first place
// in an exponential race is proportional to rate); its memberships at 3
// replicas are less than twice, since a PG holds an OSD at most once; the
// exact share is topKProbability. Both within 4 sd of expectation.
func TestWeightsHonoured(t *testing.T) {
	const pgs, size = 4096, 3
	weights := equalWeights(10)
	weights[0] = 2
	m := mustMap(t, testProto(weights, &osdpb.Pool{Id: 1, Name: "p", Size: size, PgCount: pgs}))
	member, primary := counts(m, 1)

	check := func(what string, got int, p float64) {
		want := pgs * p
		sd := math.Sqrt(pgs * p * (1 - p))
		t.Logf("%s: %d, expected %.1f (sd %.1f)", what, got, want, sd)
		if math.Abs(float64(got)-want) > sigmas*sd {
			t.Errorf("%s: %d, want %.1f ± %.1f", what, got, want, sigmas*sd)
		}
	}
	check("weight-2 OSD primaries", primary[0], 2.0/11)
	pm := topKProbability(2, 9, size)
	check("weight-2 OSD memberships", member[0], pm)
	for id := uint32(1); id < 10; id++ {
		check(fmt.Sprintf("weight-1 OSD %d primaries", id), primary[id], 1.0/11)
		check(fmt.Sprintf("weight-1 OSD %d memberships", id), member[id], (size-pm)/9)
	}
	others := 0
	for id := uint32(1); id < 10; id++ {
		others += primary[id]
	}
	t.Logf("primary ratio weight 2 : weight 1 = %.2f", float64(primary[0])/(float64(others)/9))
}

// TestAddOSDMovesOnlyToIt: adding an OSD to N equal ones (N = 3..10) moves
// a 1/(N+1) share of the PG memberships, all of them to the new OSD
// (straw2's optimality: no PG moves between two old OSDs, and the old
// members keep their order). The number of PGs the new OSD joins is
// Binomial(pgs, 3/(N+1)); it must be within 4 sd of the mean.
func TestAddOSDMovesOnlyToIt(t *testing.T) {
	const pgs, size = 1024, 3
	for n := 3; n <= 10; n++ {
		pool := &osdpb.Pool{Id: 1, Name: "p", Size: size, PgCount: pgs}
		old := mustMap(t, testProto(equalWeights(n), pool))
		grown := mustMap(t, testProto(equalWeights(n+1), pool))
		newID := uint32(n)
		moved := 0
		for pg := range uint32(pgs) {
			before, after := old.ActingSet(1, pg), grown.ActingSet(1, pg)
			kept := slices.DeleteFunc(slices.Clone(after), func(id uint32) bool { return id == newID })
			if !isSubsequence(kept, before) {
				t.Fatalf("N=%d PG %d: %v -> %v moves data between old OSDs", n, pg, before, after)
			}
			moved += len(before) - len(kept)
		}
		p := float64(size) / float64(n+1)
		want, sd := pgs*p, math.Sqrt(pgs*p*(1-p))
		frac := float64(moved) / (pgs * size)
		t.Logf("N=%2d -> %2d: %4d of %d memberships moved = %.4f (ideal 1/(N+1) = %.4f, %+.1f sd)",
			n, n+1, moved, pgs*size, frac, 1/float64(n+1), (float64(moved)-want)/sd)
		if math.Abs(float64(moved)-want) > sigmas*sd {
			t.Errorf("N=%d: %d memberships moved, want %.1f ± %.1f", n, moved, want, sigmas*sd)
		}
	}
}

// isSubsequence reports whether a is b with some elements removed, order
// kept.
func isSubsequence(a, b []uint32) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}

// TestRemoveOSDMovesOnlyItsPGs: taking OSD k away (down, out, weight 0, or
// deleted from the map) changes only the PGs that held it. Down, it only
// drops out of them (they run undersized, Ceph's behaviour); otherwise
// each also appends one more OSD, the next in straw2's ranking.
func TestRemoveOSDMovesOnlyItsPGs(t *testing.T) {
	const n, pgs, size = 10, 1024, 3
	m := mustMap(t, testProto(equalWeights(n), &osdpb.Pool{Id: 1, Name: "p", Size: size, PgCount: pgs}))
	for _, k := range []uint32{0, 4, 9} {
		for name, edit := range map[string]func(o *osdpb.OSDInfo, pb *osdpb.ClusterMap){
			"down":     func(o *osdpb.OSDInfo, _ *osdpb.ClusterMap) { o.Up = false },
			"out":      func(o *osdpb.OSDInfo, _ *osdpb.ClusterMap) { o.In = false },
			"weight 0": func(o *osdpb.OSDInfo, _ *osdpb.ClusterMap) { o.Weight = 0 },
			"deleted": func(o *osdpb.OSDInfo, pb *osdpb.ClusterMap) {
				pb.Osds = slices.DeleteFunc(pb.Osds, func(x *osdpb.OSDInfo) bool { return x == o })
			},
		} {
			next, err := m.With(func(pb *osdpb.ClusterMap) { edit(pb.Osds[k], pb) })
			if err != nil {
				t.Fatal(err)
			}
			moved := 0
			for pg := range uint32(pgs) {
				before, after := m.ActingSet(1, pg), next.ActingSet(1, pg)
				i := slices.Index(before, k)
				if i < 0 {
					if !slices.Equal(before, after) {
						t.Fatalf("OSD %d %s: PG %d without it changed: %v -> %v", k, name, pg, before, after)
					}
					continue
				}
				moved++
				want := slices.Delete(slices.Clone(before), i, i+1)
				if name == "down" {
					if !slices.Equal(after, want) {
						t.Fatalf("OSD %d down: PG %d: %v -> %v; want %v (undersized, no replacement)", k, pg, before, after, want)
					}
					continue
				}
				if len(after) != size || !slices.Equal(after[:size-1], want) || slices.Contains(before, after[size-1]) {
					t.Fatalf("OSD %d %s: PG %d: %v -> %v; want %v and one new OSD", k, name, pg, before, after, want)
				}
			}
			if member, _ := counts(m, 1); moved != member[k] {
				t.Fatalf("OSD %d %s: %d PGs moved, it was in %d", k, name, moved, member[k])
			}
		}
	}
}

// TestReweightMovesOnlyToIt: raising one OSD's weight only moves PGs onto
// it.
func TestReweightMovesOnlyToIt(t *testing.T) {
	m := mustMap(t, testProto(equalWeights(8), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 512}))
	next, err := m.With(func(pb *osdpb.ClusterMap) { pb.Osds[5].Weight = 1.5 })
	if err != nil {
		t.Fatal(err)
	}
	gained := 0
	for pg := range uint32(512) {
		before, after := m.ActingSet(1, pg), next.ActingSet(1, pg)
		kept := slices.DeleteFunc(slices.Clone(after), func(id uint32) bool { return id == 5 })
		if !isSubsequence(kept, slices.DeleteFunc(slices.Clone(before), func(id uint32) bool { return id == 5 })) {
			t.Fatalf("PG %d: %v -> %v moves data between other OSDs", pg, before, after)
		}
		if !slices.Contains(before, 5) && slices.Contains(after, 5) {
			gained++
		}
	}
	if gained == 0 {
		t.Fatal("a heavier OSD gained no PGs")
	}
}

// TestActingSetGolden pins whole acting sets, weights and MetaPG included.
func TestActingSetGolden(t *testing.T) {
	m := mustMap(t, testProto([]float64{1, 2, 0.5, 1, 0, 3}, &osdpb.Pool{Id: 7, Name: "p", Size: 3, PgCount: 256}))
	for _, g := range []struct {
		pg   uint32
		want []uint32
	}{
		{0, []uint32{5, 0, 1}},
		{1, []uint32{1, 0, 5}},
		{2, []uint32{5, 1, 0}},
		{100, []uint32{5, 3, 0}},
		{255, []uint32{5, 3, 1}},
		{MetaPG, []uint32{1, 0, 5, 2, 3, 4}}, // OSD 4 has weight 0: last
	} {
		if got := m.ActingSet(7, g.pg); !slices.Equal(got, g.want) {
			t.Errorf("ActingSet(7, %d) = %v, want %v", g.pg, got, g.want)
		}
	}
}

func TestActingSetEdges(t *testing.T) {
	pb := testProto(equalWeights(5), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 8})
	pb.Osds[0].Up = false
	pb.Osds[1].In = false
	pb.Osds[2].Weight = 0
	m := mustMap(t, pb)
	// Fewer eligible OSDs (3, 4) than the size: all of them.
	for pg := range uint32(8) {
		if got := m.ActingSet(1, pg); len(got) != 2 || !slices.Contains(got, 3) || !slices.Contains(got, 4) {
			t.Fatalf("PG %d: %v, want OSDs 3 and 4", pg, got)
		}
	}
	// MetaPG: every up and in OSD, weight 0 last.
	if got := m.ActingSet(1, MetaPG); len(got) != 3 || got[2] != 2 || !slices.Contains(got, 3) || !slices.Contains(got, 4) {
		t.Fatalf("MetaPG: %v, want 3 and 4, then 2", got)
	}
	for _, c := range []struct{ pool, pg uint32 }{{2, 0}, {1, 8}, {1, MetaPG - 1}} {
		if got := m.ActingSet(c.pool, c.pg); got != nil {
			t.Errorf("ActingSet(%d, %d) = %v, want nil", c.pool, c.pg, got)
		}
		if _, ok := m.Primary(c.pool, c.pg); ok {
			t.Errorf("Primary(%d, %d) found", c.pool, c.pg)
		}
	}

	// No eligible OSD: empty acting sets, no primary, no PGs.
	down := mustMap(t, &osdpb.ClusterMap{Epoch: 1, Fsid: "f", Osds: []*osdpb.OSDInfo{{Id: 1, PublicAddr: "mem://a", ClusterAddr: "mem://a"}},
		Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 3, PgCount: 4}}})
	if got := down.ActingSet(1, 0); len(got) != 0 {
		t.Fatalf("all down: ActingSet = %v", got)
	}
	if _, ok := down.Primary(1, MetaPG); ok {
		t.Fatal("all down: MetaPG has a primary")
	}
	for pg := range down.PGsOf(1, 1) {
		t.Fatalf("all down: PGsOf yields PG %d", pg)
	}
}

// TestMetaPool: the meta PG goes by the pool with the lowest id, whatever
// order the map lists them in; a map of no pool has none.
func TestMetaPool(t *testing.T) {
	m := mustMap(t, &osdpb.ClusterMap{Epoch: 1, Fsid: "f", Osds: []*osdpb.OSDInfo{{Id: 1, PublicAddr: "mem://a", ClusterAddr: "mem://a"}},
		Pools: []*osdpb.Pool{{Id: 7, Name: "b", Size: 2, PgCount: 4}, {Id: 3, Name: "a", Size: 3, PgCount: 4}}})
	if p := m.MetaPool(); p == nil || p.Id != 3 || p.Name != "a" {
		t.Fatalf("MetaPool = %v, want pool 3", p)
	}
	none := mustMap(t, &osdpb.ClusterMap{Epoch: 1, Fsid: "f"})
	if p := none.MetaPool(); p != nil {
		t.Fatalf("no pools: MetaPool = %v", p)
	}
}

// TestTiesGoToLowerID: weights so small that every draw divides to +Inf
// make OSDs 0, 2 and 3 tie; the lower ids win, after OSD 1.
func TestTiesGoToLowerID(t *testing.T) {
	tiny := math.SmallestNonzeroFloat64
	m := mustMap(t, testProto([]float64{tiny, 1, tiny, tiny}, &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 32}))
	for pg := range uint32(32) {
		if got := m.ActingSet(1, pg); !slices.Equal(got, []uint32{1, 0, 2}) {
			t.Fatalf("PG %d: %v, want [1 0 2]", pg, got)
		}
	}
	if got := m.ActingSet(1, MetaPG); !slices.Equal(got, []uint32{1, 0, 2, 3}) {
		t.Fatalf("MetaPG: %v, want [1 0 2 3]", got)
	}
}

// TestMetaPGIsStraw2: MetaPG ranks by the same draws, and its acting set
// depends on the pool like any PG's.
func TestMetaPGIsStraw2(t *testing.T) {
	weights := []float64{1, 3, 2, 1, 1, 0.25, 1, 1}
	pb := testProto(weights, &osdpb.Pool{Id: 1, Name: "a", Size: 3, PgCount: 8})
	pb.Pools = append(pb.Pools, &osdpb.Pool{Id: 2, Name: "b", Size: 3, PgCount: 8})
	m := mustMap(t, pb)
	for _, pool := range []uint32{1, 2} {
		got := m.ActingSet(pool, MetaPG)
		if len(got) != len(weights) {
			t.Fatalf("pool %d MetaPG: %v, want all %d OSDs", pool, got, len(weights))
		}
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if float64(drawCost(pool, MetaPG, a))/weights[a] > float64(drawCost(pool, MetaPG, b))/weights[b] {
				t.Fatalf("pool %d MetaPG: %v: OSD %d ranked before a better draw %d", pool, got, a, b)
			}
		}
		if p, _ := m.Primary(pool, MetaPG); p != got[0] || !m.IsPrimary(pool, MetaPG, got[0]) {
			t.Fatalf("pool %d MetaPG: primary %d, set %v", pool, p, got)
		}
		for i, id := range got {
			if r, ok := m.RoleOf(pool, MetaPG, id); !ok || r != Role(i) {
				t.Fatalf("pool %d MetaPG: RoleOf(%d) = %v, %v; want %d", pool, id, r, ok, i)
			}
		}
	}
	// The pool id is part of every draw.
	if a, b := m.ActingSet(1, MetaPG), m.ActingSet(2, MetaPG); slices.Equal(a, b) {
		t.Fatalf("pools 1 and 2 rank MetaPG alike: %v", a)
	}
}

// TestPGsOfAgreesWithActingSet: PGsOf, RoleOf, Primary and IsPrimary are
// views of one table.
func TestPGsOfAgreesWithActingSet(t *testing.T) {
	const n, pgs, size = 7, 200, 3
	m := mustMap(t, testProto(equalWeights(n), &osdpb.Pool{Id: 3, Name: "p", Size: size, PgCount: pgs}))
	total := 0
	for osd := range uint32(n) {
		last := -1
		for pg, role := range m.PGsOf(3, osd) {
			if int(pg) <= last {
				t.Fatalf("OSD %d: PG %d after %d", osd, pg, last)
			}
			last = int(pg)
			set := m.ActingSet(3, pg)
			if int(role) >= len(set) || set[role] != osd {
				t.Fatalf("OSD %d PG %d: role %v, acting set %v", osd, pg, role, set)
			}
			if r, ok := m.RoleOf(3, pg, osd); !ok || r != role {
				t.Fatalf("OSD %d PG %d: RoleOf = %v, %v; PGsOf said %v", osd, pg, r, ok, role)
			}
			if m.IsPrimary(3, pg, osd) != role.IsPrimary() {
				t.Fatalf("OSD %d PG %d: IsPrimary disagrees with role %v", osd, pg, role)
			}
			total++
		}
	}
	if total != pgs*size {
		t.Fatalf("PGsOf yielded %d memberships, want %d", total, pgs*size)
	}
	for range m.PGsOf(4, 0) {
		t.Fatal("PGsOf of an unknown pool yielded a PG")
	}
	for range m.PGsOf(3, 99) {
		t.Fatal("PGsOf of an unknown OSD yielded a PG")
	}
	seen := 0
	for range m.PGsOf(3, 0) {
		seen++
		break
	}
	if seen != 1 {
		t.Fatal("PGsOf ignored an early stop")
	}
	if _, ok := m.RoleOf(3, 0, 99); ok {
		t.Fatal("RoleOf found an unknown OSD")
	}
	if RolePrimary.String() != "primary" || Role(2).String() != "replica 2" {
		t.Fatalf("Role strings: %v, %v", RolePrimary, Role(2))
	}
}

// TestConcurrentFirstUse: many goroutines building the same tables at once
// (run with -race) get what a single goroutine gets.
func TestConcurrentFirstUse(t *testing.T) {
	pb := testProto(equalWeights(12), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 512})
	want := mustMap(t, pb)
	m := mustMap(t, pb)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for pg := uint32(g); pg < 512; pg += 3 {
				if got := m.ActingSet(1, pg); !slices.Equal(got, want.ActingSet(1, pg)) {
					t.Errorf("PG %d: %v, want %v", pg, got, want.ActingSet(1, pg))
				}
			}
			if got := m.ActingSet(1, MetaPG); !slices.Equal(got, want.ActingSet(1, MetaPG)) {
				t.Errorf("MetaPG: %v", got)
			}
			for range m.PGsOf(1, uint32(g)) {
			}
		})
	}
	wg.Wait()
}

// TestPlacementAllocations: the per-op calls allocate nothing once a
// pool's table is built.
func TestPlacementAllocations(t *testing.T) {
	m := mustMap(t, testProto(equalWeights(10), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 128}))
	pool, _ := m.Pool(1)
	m.ActingSet(1, 0)
	m.ActingSet(1, MetaPG)
	dst := make([]uint32, 0, 16)
	for name, f := range map[string]func(){
		"PGOf":            func() { PGOf(pool, "bucket", "some/object/key") },
		"Primary":         func() { m.Primary(1, 77) },
		"IsPrimary":       func() { m.IsPrimary(1, MetaPG, 3) },
		"RoleOf":          func() { m.RoleOf(1, 5, 3) },
		"AppendActingSet": func() { dst = m.AppendActingSet(dst[:0], 1, 9) },
		"PublicAddr":      func() { m.PublicAddr(4) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, a)
		}
	}
}
