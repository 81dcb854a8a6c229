package mon

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// pgTempMap is a map of n OSDs, up and in, and one pool of size 3 and
// 16 PGs, edited by edit.
func pgTempMap(t *testing.T, n int, edit func(pb *osdpb.ClusterMap)) *placement.Map {
	t.Helper()
	pb := &osdpb.ClusterMap{Epoch: 1, Fsid: "pgtemp", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 3, PgCount: 16}}}
	for i := range n {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: uint32(i), PublicAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 7000+i),
			ClusterAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 8000+i), Weight: 1, Up: true, In: true, Features: placement.Features})
	}
	if edit != nil {
		edit(pb)
	}
	m, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// step makes the next map from cur as the mon's store does: the edit,
// tidyPGTemp, then primePGTemp.
func step(t *testing.T, cur *placement.Map, edit func(pb *osdpb.ClusterMap)) *placement.Map {
	t.Helper()
	next, err := cur.With(func(pb *osdpb.ClusterMap) { edit(pb); tidyPGTemp(pb) })
	if err != nil {
		t.Fatal(err)
	}
	if next, err = primePGTemp(cur, next); err != nil {
		t.Fatal(err)
	}
	return next
}

func setOSD(id uint32, f func(o *osdpb.OSDInfo)) func(pb *osdpb.ClusterMap) {
	return func(pb *osdpb.ClusterMap) { f(osdByID(pb, id)) }
}

// TestPrimePGTemp: the mon keeps a PG's old acting set as its pg_temp
// entry when a map change puts it on an OSD it lacked while as many old
// members stay up (an OSD in, an OSD out while up), and not otherwise (a
// down OSD marked out, a pool grown); it drops entries whose up members
// are the up set again or have none up, tidies entries of removed OSDs
// and shrunk pools, and drops the entries a primary reported filled.
func TestPrimePGTemp(t *testing.T) {
	cur := pgTempMap(t, 4, func(pb *osdpb.ClusterMap) { osdByID(pb, 3).In = false })
	in := step(t, cur, setOSD(3, func(o *osdpb.OSDInfo) { o.In = true }))
	remapped := 0
	for pg := range uint32(16) {
		up := in.UpSet(1, pg)
		if slices.Contains(up, 3) {
			remapped++
			if got, want := in.ActingSet(1, pg), cur.ActingSet(1, pg); !slices.Equal(got, want) {
				t.Errorf("pg %x, moved onto osd.3: acting %v, want the old %v", pg, got, want)
			}
		} else if in.Remapped(1, pg) {
			t.Errorf("pg %x, not moved, is remapped: acting %v, up %v", pg, in.ActingSet(1, pg), up)
		}
	}
	if remapped == 0 {
		t.Fatal("osd.3 took no PG in this placement")
	}
	t.Logf("osd.3 in: %d PGs remapped", remapped)

	// Out again before any filled: every PG's up set is its old acting
	// set, and the entries go.
	out := step(t, in, setOSD(3, func(o *osdpb.OSDInfo) { o.In = false }))
	if n := len(out.Proto().PgTemp); n != 0 {
		t.Errorf("osd.3 out again: %d entries left", n)
	}

	// An OSD out while up: its PGs keep it acting.
	running := pgTempMap(t, 4, nil)
	drained := step(t, running, setOSD(1, func(o *osdpb.OSDInfo) { o.In = false }))
	kept := 0
	for pg := range uint32(16) {
		if slices.Contains(running.ActingSet(1, pg), 1) {
			if !slices.Contains(drained.ActingSet(1, pg), 1) {
				t.Errorf("pg %x: osd.1, out but up, left its acting set %v", pg, drained.ActingSet(1, pg))
			}
			kept++
		}
	}
	// All its entries' members down: the entries go.
	dead := step(t, drained, func(pb *osdpb.ClusterMap) {
		for _, tmp := range pb.PgTemp {
			for _, id := range tmp.Osds {
				osdByID(pb, id).Up = false
			}
		}
	})
	if n := len(dead.Proto().PgTemp); n != 0 {
		t.Errorf("entries whose members are all down: %d left", n)
	}

	// A down OSD marked out: the old acting set is smaller than the new
	// up set, no entry.
	down := step(t, running, setOSD(2, func(o *osdpb.OSDInfo) { o.Up = false }))
	downOut := step(t, down, setOSD(2, func(o *osdpb.OSDInfo) { o.In = false }))
	if n := len(downOut.Proto().PgTemp); n != 0 {
		t.Errorf("a down OSD marked out made %d entries", n)
	}
	// An up OSD whose build predates pg_temp would take the up set for
	// the acting set: no entry while one is up.
	older := pgTempMap(t, 4, func(pb *osdpb.ClusterMap) { osdByID(pb, 2).Features = 0 })
	if n := len(step(t, older, setOSD(1, func(o *osdpb.OSDInfo) { o.In = false })).Proto().PgTemp); n != 0 {
		t.Errorf("an OSD out with an older OSD up made %d entries", n)
	}
	// One that boots while entries exist has them all dropped.
	rolledBack := step(t, drained, setOSD(2, func(o *osdpb.OSDInfo) { o.Features = 0 }))
	if n := len(rolledBack.Proto().PgTemp); n != 0 {
		t.Errorf("an OSD without pg_temp up: %d entries kept", n)
	}
	// An entry with a member down, kept, while another change makes a
	// new entry in the same edit: the kept one is written as it was.
	five := pgTempMap(t, 5, func(pb *osdpb.ClusterMap) { osdByID(pb, 4).In = false })
	withFour := step(t, five, setOSD(4, func(o *osdpb.OSDInfo) { o.In = true }))
	var member uint32
	var entry *osdpb.PGTemp
	for _, tmp := range withFour.Proto().PgTemp {
		if len(tmp.Osds) == 3 {
			entry, member = tmp, tmp.Osds[1]
			break
		}
	}
	if entry == nil {
		t.Fatal("osd.4 in made no entry")
	}
	both := step(t, withFour, func(pb *osdpb.ClusterMap) {
		osdByID(pb, member).Up = false
		for _, o := range pb.Osds {
			if o.Id != member && o.Id != 4 && !slices.Contains(entry.Osds, o.Id) {
				o.In = false // moves other PGs: entries made in this edit
			}
		}
	})
	if got, ok := both.PGTemp(1, entry.Pg); ok && !slices.Equal(got, entry.Osds) {
		t.Errorf("pg %x's entry %v, with osd.%d down, was rewritten as %v", entry.Pg, entry.Osds, member, got)
	}
	// A pool grown from 2 to 3: neither.
	small := pgTempMap(t, 4, func(pb *osdpb.ClusterMap) { pb.Pools[0].Size = 2 })
	grown := step(t, small, func(pb *osdpb.ClusterMap) { pb.Pools[0].Size = 3 })
	if n := len(grown.Proto().PgTemp); n != 0 {
		t.Errorf("a pool grown made %d entries", n)
	}

	// Tidy: an OSD removed leaves the entries it was in; a pool shrunk
	// below an entry's length shortens it, to members that hold the PG,
	// up and in first: its new up set may hold a member being filled.
	rm := step(t, drained, func(pb *osdpb.ClusterMap) {
		pb.Osds = slices.DeleteFunc(pb.Osds, func(o *osdpb.OSDInfo) bool { return o.Id == 1 })
	})
	for _, tmp := range rm.Proto().PgTemp {
		if slices.Contains(tmp.Osds, 1) {
			t.Errorf("pg %x's entry %v keeps osd.1, removed", tmp.Pg, tmp.Osds)
		}
	}
	shrunk := step(t, drained, func(pb *osdpb.ClusterMap) { pb.Pools[0].Size = 2 })
	checkShrunk(t, drained, shrunk, 1)
	// The probe's case: a new OSD in (osd.3, filling), then the size cut:
	// a PG whose new up set holds osd.3 keeps two old members acting.
	checkShrunk(t, in, step(t, in, func(pb *osdpb.ClusterMap) { pb.Pools[0].Size = 2 }), 3)

	// Filled: only the acting primary's report at the map's epoch drops
	// an entry.
	tmp := drained.Proto().PgTemp
	if len(tmp) < 2 || kept == 0 {
		t.Fatalf("osd.1 out made %d entries", len(tmp))
	}
	first, second := tmp[0], tmp[1]
	primary, _ := drained.Primary(1, first.Pg)
	other, _ := drained.Primary(1, second.Pg)
	var nonPrimary uint32
	for _, id := range drained.ActingSet(1, second.Pg)[1:] {
		nonPrimary = id
	}
	past := func(e uint64) *placement.Map {
		return map[uint64]*placement.Map{running.Epoch(): running, drained.Epoch(): drained}[e]
	}
	pb := drained.Proto()
	dropped := dropFilledPGTemp(pb, drained, primary, []*osdpb.PGStat{
		{Pool: 1, Pg: first.Pg, UpFilled: true, Epoch: drained.Epoch()},
		{Pool: 1, Pg: second.Pg, UpFilled: true, Epoch: running.Epoch()},     // before its entry
		{Pool: 1, Pg: second.Pg, UpFilled: true, Epoch: drained.Epoch() + 1}, // a map the mon has not written
	}, past)
	dropped = append(dropped, dropFilledPGTemp(pb, drained, nonPrimary, []*osdpb.PGStat{
		{Pool: 1, Pg: second.Pg, UpFilled: true, Epoch: drained.Epoch()},
	}, past)...)
	if want := []placement.PGID{{Pool: 1, Seed: first.Pg}}; !slices.Equal(dropped, want) || len(pb.PgTemp) != len(tmp)-1 {
		t.Fatalf("dropped %v (%d entries left of %d), want only %v: a report from an epoch before the entry or after the map, or from osd.%d, not pg %x's primary osd.%d, drops nothing",
			dropped, len(pb.PgTemp), len(tmp), want, nonPrimary, second.Pg, other)
	}
	// A report from an older epoch whose map gave the PG the same entry,
	// up set and primary counts: the maps between changed other PGs.
	later := step(t, drained, setOSD(3, func(o *osdpb.OSDInfo) { o.Weight = 1 })) // an epoch that changes nothing here
	laterPast := func(e uint64) *placement.Map {
		if e == drained.Epoch() {
			return drained
		}
		return nil
	}
	secondPrimary, _ := later.Primary(1, second.Pg)
	if got := dropFilledPGTemp(later.Proto(), later, secondPrimary, []*osdpb.PGStat{{Pool: 1, Pg: second.Pg, UpFilled: true, Epoch: drained.Epoch()}}, laterPast); len(got) != 1 {
		t.Fatalf("a report one epoch old, the PG unchanged since: dropped %v", got)
	}
	if got := dropFilledPGTemp(later.Proto(), later, secondPrimary, []*osdpb.PGStat{{Pool: 1, Pg: second.Pg, UpFilled: true, Epoch: drained.Epoch()}},
		func(uint64) *placement.Map { return nil }); len(got) != 0 {
		t.Fatalf("a report from a map no longer kept: dropped %v", got)
	}
}

// TestDroppedPGTempStaysDropped: the map that drops a filled entry does
// not make it again (its up set did not change): the mon would otherwise
// write one map after another.
func TestDroppedPGTempStaysDropped(t *testing.T) {
	running := pgTempMap(t, 4, nil)
	drained := step(t, running, setOSD(1, func(o *osdpb.OSDInfo) { o.In = false }))
	n := len(drained.Proto().PgTemp)
	if n == 0 {
		t.Fatal("osd.1 out made no entries")
	}
	tmp := drained.Proto().PgTemp[0]
	primary, _ := drained.Primary(1, tmp.Pg)
	next := step(t, drained, func(pb *osdpb.ClusterMap) {
		dropFilledPGTemp(pb, drained, primary, []*osdpb.PGStat{{Pool: 1, Pg: tmp.Pg, UpFilled: true, Epoch: drained.Epoch()}}, func(uint64) *placement.Map { return nil })
	})
	if got := len(next.Proto().PgTemp); got != n-1 {
		t.Fatalf("after dropping pg %x's entry: %d entries, want %d", tmp.Pg, got, n-1)
	}
	if _, ok := next.PGTemp(1, tmp.Pg); ok || next.Remapped(1, tmp.Pg) {
		t.Fatalf("pg %x's entry came back", tmp.Pg)
	}
}

// TestPGTempNoReplacement: an OSD out while it runs, where placement has
// no other OSD to take its place (3 OSDs, size 3), stays acting through a
// pg_temp entry, as Ceph keeps it: the PG keeps three copies, remapped.
// The entries go when it comes back in; while it is down they wait for it
// to boot; when an OSD comes in instead, they stay until the primary
// reports the new member filled.
func TestPGTempNoReplacement(t *testing.T) {
	three := pgTempMap(t, 3, nil)
	out := step(t, three, setOSD(2, func(o *osdpb.OSDInfo) { o.In = false }))
	for pg := range uint32(16) {
		if got, want := out.ActingSet(1, pg), three.ActingSet(1, pg); !slices.Equal(got, want) || !out.Remapped(1, pg) || len(out.UpSet(1, pg)) != 2 {
			t.Fatalf("pg %x, osd.2 out while up, no replacement: acting %v up %v, want the old %v, remapped", pg, got, out.UpSet(1, pg), want)
		}
	}
	if n := len(step(t, out, setOSD(2, func(o *osdpb.OSDInfo) { o.In = true })).Proto().PgTemp); n != 0 {
		t.Errorf("osd.2 in again: %d entries left", n)
	}
	// osd.2 down (a reboot): the PGs run on the other two, and their
	// entries wait for it; up again, still out, it is a member again.
	down := step(t, out, setOSD(2, func(o *osdpb.OSDInfo) { o.Up = false }))
	for pg := range uint32(16) {
		if acting := down.ActingSet(1, pg); len(acting) != 2 || slices.Contains(acting, 2) || down.Remapped(1, pg) {
			t.Fatalf("pg %x with osd.2 down: acting %v, remapped %v", pg, acting, down.Remapped(1, pg))
		}
	}
	back := step(t, down, setOSD(2, func(o *osdpb.OSDInfo) { o.Up = true }))
	for pg := range uint32(16) {
		if got, want := back.ActingSet(1, pg), three.ActingSet(1, pg); !slices.Equal(got, want) {
			t.Fatalf("pg %x, osd.2 up again while out: acting %v, want %v", pg, got, want)
		}
	}
	// Every up member down: the entries go.
	if n := len(step(t, down, func(pb *osdpb.ClusterMap) { osdByID(pb, 0).Up, osdByID(pb, 1).Up = false, false }).Proto().PgTemp); n != 0 {
		t.Errorf("every OSD down: %d entries left", n)
	}
	// A member that is in and down is no out one waited for: a PG that
	// lost it runs undersized without an entry.
	if n := len(step(t, three, setOSD(2, func(o *osdpb.OSDInfo) { o.Up = false })).Proto().PgTemp); n != 0 {
		t.Errorf("osd.2 down, still in: %d entries", n)
	}
	// A fourth OSD in: every PG's up set takes it, and keeps its entry
	// (the old members serve while osd.3 is filled).
	four, err := out.With(func(pb *osdpb.ClusterMap) {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: 3, PublicAddr: "tcp://127.0.0.1:7003", ClusterAddr: "tcp://127.0.0.1:8003",
			Weight: 1, Up: true, In: false, Features: placement.Features})
	})
	if err != nil {
		t.Fatal(err)
	}
	added := step(t, four, setOSD(3, func(o *osdpb.OSDInfo) { o.In = true }))
	for pg := range uint32(16) {
		up, acting := added.UpSet(1, pg), added.ActingSet(1, pg)
		if len(up) != 3 {
			t.Fatalf("pg %x with osd.3 in: up %v", pg, up)
		}
		if _, ok := added.PGTemp(1, pg); !ok || !slices.Equal(acting, three.ActingSet(1, pg)) {
			t.Errorf("pg %x, osd.3 in, up %v: acting %v, want the old %v kept until osd.3 is filled", pg, up, acting, three.ActingSet(1, pg))
		}
	}
	// The size cut to 2: two OSDs in are enough, no entry is needed.
	if n := len(step(t, out, func(pb *osdpb.ClusterMap) { pb.Pools[0].Size = 2 }).Proto().PgTemp); n != 0 {
		t.Errorf("size 2 with two OSDs in: %d entries", n)
	}
}

// checkShrunk: every pg_temp entry of before, with the pool's size cut
// to 2 in after, is two of its members up and in (never osd.filling, out
// or being filled), or gone where the new up set is its acting set; and
// where the new up set holds filling, an entry stays.
func checkShrunk(t *testing.T, before, after *placement.Map, filling uint32) {
	t.Helper()
	for _, was := range before.Proto().PgTemp {
		now, ok := after.PGTemp(was.Pool, was.Pg)
		up := after.UpSet(was.Pool, was.Pg)
		switch {
		case !ok && (slices.Contains(up, filling) || len(up) != 2):
			t.Errorf("pg %x's entry %v dropped with the size cut to 2, up %v", was.Pg, was.Osds, up)
		case ok && (len(now) != 2 || slices.Contains(now, filling) || slices.ContainsFunc(now, func(id uint32) bool { return !slices.Contains(was.Osds, id) })):
			t.Errorf("pg %x's entry %v, size cut to 2: %v, want two of its members up and in", was.Pg, was.Osds, now)
		}
	}
}
