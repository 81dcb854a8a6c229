package placement

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestPGTemp: a pg_temp entry overrides a PG's acting set (its primary,
// roles, the PGs an OSD serves) while its up set stays placement's; its
// members that are down are left out, and an entry with none up is
// ignored.
func TestPGTemp(t *testing.T) {
	pb := testProto(equalWeights(6), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 16})
	base := mustMap(t, pb)
	const pg = 5
	up := base.UpSet(1, pg)
	// The entry: two OSDs outside the up set, then one of it.
	var others []uint32
	for id := range uint32(6) {
		if !slices.Contains(up, id) {
			others = append(others, id)
		}
	}
	temp := []uint32{others[0], others[1], up[2]}
	m, err := base.With(func(pb *osdpb.ClusterMap) {
		pb.PgTemp = []*osdpb.PGTemp{{Pool: 1, Pg: pg, Osds: temp}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ActingSet(1, pg); !slices.Equal(got, temp) {
		t.Fatalf("acting %v, want the entry %v", got, temp)
	}
	if got := m.UpSet(1, pg); !slices.Equal(got, up) || !m.Remapped(1, pg) || m.Remapped(1, pg+1) {
		t.Fatalf("up %v (want %v), remapped %v, pg %d remapped %v", got, up, m.Remapped(1, pg), pg+1, m.Remapped(1, pg+1))
	}
	if p, _ := m.Primary(1, pg); p != others[0] {
		t.Fatalf("primary osd.%d, want the entry's first, osd.%d", p, others[0])
	}
	if r, ok := m.RoleOf(1, pg, others[1]); !ok || r != 1 {
		t.Fatalf("osd.%d's role %v %v, want replica 1", others[1], r, ok)
	}
	if _, ok := m.RoleOf(1, pg, up[0]); ok {
		t.Fatalf("osd.%d, in the up set only, has a role in the acting set", up[0])
	}
	serves := func(m *Map, id uint32) bool {
		for p := range m.PGsOf(1, id) {
			if p == pg {
				return true
			}
		}
		return false
	}
	if !serves(m, others[0]) || serves(m, up[0]) {
		t.Fatalf("PGsOf: osd.%d serves pg %d: %v; osd.%d: %v", others[0], pg, serves(m, others[0]), up[0], serves(m, up[0]))
	}
	if got, ok := m.PGTemp(1, pg); !ok || !slices.Equal(got, temp) {
		t.Fatalf("PGTemp %v %v", got, ok)
	}
	// Every OSD out: straw2 places nothing, and the entry's members still
	// serve the PG (osd out of every OSD, the mon keeping them acting).
	allOut, err := m.With(func(pb *osdpb.ClusterMap) {
		for _, o := range pb.Osds {
			o.In = false
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := allOut.ActingSet(1, pg); !slices.Equal(got, temp) || len(allOut.UpSet(1, pg)) != 0 {
		t.Fatalf("every OSD out: acting %v (want %v), up %v", got, temp, allOut.UpSet(1, pg))
	}
	if !serves(allOut, others[0]) || serves(allOut, up[0]) {
		t.Fatalf("every OSD out, PGsOf: osd.%d serves pg %d: %v; osd.%d: %v", others[0], pg, serves(allOut, others[0]), up[0], serves(allOut, up[0]))
	}

	// A member down is left out; with none up the entry is ignored.
	mark := func(m *Map, ids ...uint32) *Map {
		next, err := m.With(func(pb *osdpb.ClusterMap) {
			for _, o := range pb.Osds {
				if slices.Contains(ids, o.Id) {
					o.Up = false
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	oneDown := mark(m, others[0])
	if got := oneDown.ActingSet(1, pg); !slices.Equal(got, temp[1:]) {
		t.Fatalf("acting with osd.%d down: %v, want %v", others[0], got, temp[1:])
	}
	allDown := mark(m, temp...)
	if got, want := allDown.ActingSet(1, pg), allDown.UpSet(1, pg); !slices.Equal(got, want) || allDown.Remapped(1, pg) {
		t.Fatalf("acting with the entry's members all down: %v, want the up set %v", got, want)
	}
	if _, ok := allDown.PGTemp(1, pg); !ok {
		t.Fatal("the entry is gone from the map: the mon removes it, not the map")
	}

	// Entries a mon of an older build kept through changes it does not
	// tidy them for are ignored, not refused: the map is still read.
	for _, c := range []struct {
		name string
		temp *osdpb.PGTemp
	}{
		{"unknown pool", &osdpb.PGTemp{Pool: 2, Pg: 0, Osds: []uint32{0}}},
		{"pg out of range", &osdpb.PGTemp{Pool: 1, Pg: 16, Osds: []uint32{0}}},
		{"more than size", &osdpb.PGTemp{Pool: 1, Pg: 0, Osds: []uint32{0, 1, 2, 3}}},
		{"a removed OSD", &osdpb.PGTemp{Pool: 1, Pg: 0, Osds: []uint32{up[0], 9}}},
	} {
		m, err := base.With(func(pb *osdpb.ClusterMap) { pb.PgTemp = []*osdpb.PGTemp{c.temp} })
		if err != nil {
			t.Errorf("%s: %v, want the entry ignored", c.name, err)
			continue
		}
		if pg := min(c.temp.Pg, 15); m.Remapped(1, pg) {
			t.Errorf("%s: pg %d remapped by an entry to ignore", c.name, pg)
		}
	}
	for _, c := range []struct {
		name  string
		temps []*osdpb.PGTemp
		field string
	}{
		{"no OSDs", []*osdpb.PGTemp{{Pool: 1, Pg: 0}}, "pg_temp[0].osds"},
		{"an OSD twice", []*osdpb.PGTemp{{Pool: 1, Pg: 0, Osds: []uint32{1, 1}}}, "pg_temp[0].osds"},
		{"unsorted", []*osdpb.PGTemp{{Pool: 1, Pg: 3, Osds: []uint32{0}}, {Pool: 1, Pg: 2, Osds: []uint32{1}}}, "pg_temp[1]"},
		{"a PG twice", []*osdpb.PGTemp{{Pool: 1, Pg: 3, Osds: []uint32{0}}, {Pool: 1, Pg: 3, Osds: []uint32{1}}}, "pg_temp[1]"},
	} {
		_, err := base.With(func(pb *osdpb.ClusterMap) { pb.PgTemp = c.temps })
		var me *MapError
		if !errors.As(err, &me) || me.Field != c.field {
			t.Errorf("%s: %v, want a MapError on %s", c.name, err, c.field)
		} else if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v does not name %s", c.name, err, c.field)
		}
	}
}

// TestPGTempMembers: the OSDs that take a remapped PG's writes are its
// acting set then its up set's others, and those others find the PG among
// the ones they are being filled with.
func TestPGTempMembers(t *testing.T) {
	base := mustMap(t, testProto(equalWeights(6), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 16}))
	const pg = 7
	up := base.UpSet(1, pg)
	var out uint32
	for id := range uint32(6) {
		if !slices.Contains(up, id) {
			out = id
			break
		}
	}
	temp := []uint32{out, up[1], up[2]}
	m, err := base.With(func(pb *osdpb.ClusterMap) { pb.PgTemp = []*osdpb.PGTemp{{Pool: 1, Pg: pg, Osds: temp}} })
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Members(1, pg), append(slices.Clone(temp), up[0]); !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	if got := slices.Collect(m.FillingPGsOf(1, up[0])); !slices.Equal(got, []uint32{pg}) {
		t.Fatalf("osd.%d fills %v, want [%d]", up[0], got, pg)
	}
	for _, id := range []uint32{out, up[1]} {
		if got := slices.Collect(m.FillingPGsOf(1, id)); len(got) != 0 {
			t.Fatalf("osd.%d, acting, fills %v", id, got)
		}
	}
	if !m.IsMember(1, pg, up[0]) || !m.IsMember(1, pg, out) || base.IsMember(1, pg, out) {
		t.Fatal("IsMember disagrees with Members")
	}
	if got := base.Members(1, pg); !slices.Equal(got, up) {
		t.Fatalf("members without an entry %v, want the up set %v", got, up)
	}
}
