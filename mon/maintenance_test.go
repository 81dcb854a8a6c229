package mon

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// primaryReports are beacons of every up OSD of mp reporting the PGs it
// is primary of in state, at mp's epoch, edited by each.
func primaryReports(mp *placement.Map, state string, each func(r *pgRecord)) map[uint32]*beaconRecord {
	out := map[uint32]*beaconRecord{}
	for o := range mp.OSDs() {
		if !o.Up {
			continue
		}
		var held uint32
		r := &beaconRecord{ID: o.Id, Epoch: mp.Epoch(), PGsHeld: &held}
		for pg, role := range mp.PGsOf(1, o.Id) {
			if role.IsPrimary() {
				p := pgRecord{Pool: 1, PG: pg, State: state, Epoch: mp.Epoch()}
				if each != nil {
					each(&p)
				}
				r.PGs = append(r.PGs, p)
			}
		}
		out[o.Id] = r
	}
	return out
}

// TestOKToStop: stopping OSDs is ok while every PG they serve keeps
// min_size members with a whole copy and is active now; a member being
// backfilled counts for nothing; the bucket records need one OSD left.
func TestOKToStop(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c") // size 3 (min_size 2), 8 PGs: every PG on all three
	in := statusInput{mp: mp, beacons: primaryReports(mp, "active+clean", nil), now: time.Unix(1000, 0), fresh: time.Minute}
	r, err := okToStop(in, []uint32{0})
	if err != nil || !r.OKToStop || r.NumOKPGs != 8 || r.NumNotOKPGs != 0 || len(r.OKBecomeDegraded) != 8 {
		t.Fatalf("one of three: %+v %v", r, err)
	}
	// Two of three at min_size 2: every PG, and the bucket records (on
	// every OSD up and in, with the lowest pool's min_size), go inactive.
	if r, _ := okToStop(in, []uint32{0, 1}); r.OKToStop || r.NumNotOKPGs != 9 || len(r.Detail) != 9 || !slices.Contains(r.BadBecomeInactive, "meta") {
		t.Fatalf("two of three (min_size 2): %+v", r)
	}
	// One of three, with another out (its PGs keep it acting): the
	// bucket records would have one OSD up and in of min_size 2.
	oneOut := step(t, pgTempMap(t, 3, nil), setOSD(2, func(o *osdpb.OSDInfo) { o.In = false }))
	r, _ = okToStop(statusInput{mp: oneOut, beacons: primaryReports(oneOut, "active+clean", nil), now: in.now, fresh: time.Minute}, []uint32{1})
	if r.OKToStop || !slices.Equal(r.BadBecomeInactive, []string{"meta"}) {
		t.Fatalf("osd.1 with osd.2 out: %+v", r)
	}

	// pg 1.0's third member is being backfilled: stopping either whole
	// one leaves a single whole copy.
	acting := mp.ActingSet(1, 0)
	filling := primaryReports(mp, "active+backfilling+degraded", func(p *pgRecord) {
		if p.PG == 0 {
			p.Filling = []uint32{acting[2]}
		}
	})
	r, _ = okToStop(statusInput{mp: mp, beacons: filling, now: in.now, fresh: time.Minute}, []uint32{acting[1]})
	if r.OKToStop || !slices.Equal(r.BadBecomeInactive, []string{"1.0"}) || r.NumOKPGs != 7 {
		t.Fatalf("a whole member of a PG whose third is being backfilled: %+v", r)
	}
	if r, _ := okToStop(statusInput{mp: mp, beacons: filling, now: in.now, fresh: time.Minute}, []uint32{acting[2]}); !r.OKToStop {
		t.Fatalf("the member being backfilled: %+v", r)
	}
	// A primary of an older build names no member being backfilled: its
	// backfilling PG cannot be judged.
	filling[acting[0]].PGsHeld = nil
	r, _ = okToStop(statusInput{mp: mp, beacons: filling, now: in.now, fresh: time.Minute}, []uint32{acting[2]})
	if r.OKToStop || !slices.Contains(r.BadBecomeInactive, "1.0") || !strings.Contains(strings.Join(r.Detail, "\n"), "older build") {
		t.Fatalf("a backfilling PG whose primary is of an older build: %+v", r)
	}

	// Not active now (peered), or not reported at this epoch: not ok.
	for _, beacons := range []map[uint32]*beaconRecord{
		primaryReports(mp, "undersized+degraded+peered", nil),
		primaryReports(mp, "active+clean", func(p *pgRecord) { p.Epoch-- }),
	} {
		if r, _ := okToStop(statusInput{mp: mp, beacons: beacons, now: in.now, fresh: time.Minute}, []uint32{2}); r.OKToStop || r.NumNotOKPGs != 8 {
			t.Fatalf("PGs not active now: %+v", r)
		}
	}
	var oe *ops.Error
	if _, err := okToStop(in, []uint32{7}); !errors.As(err, &oe) || oe.Status != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("an OSD the map lacks: %v", err)
	}
	if _, err := okToStop(in, nil); err == nil {
		t.Fatal("no OSD named: no error")
	}
}

// TestSafeToDestroy: an OSD is safe to destroy once no PG maps to it and
// its store holds no PG copy, or, stopped, once every PG is active+clean.
func TestSafeToDestroy(t *testing.T) {
	mp := trackerMap(t, "a", "b", "c", "d") // 4 OSDs, size 3
	now := time.Unix(1000, 0)
	in := statusInput{mp: mp, beacons: primaryReports(mp, "active+clean", nil), now: now, fresh: time.Minute}
	r, err := safeToDestroy(in, []uint32{3})
	if err != nil || r.Safe() || !slices.Equal(r.Mapped, []uint32{3}) || len(r.Detail) != 1 {
		t.Fatalf("osd.3 in, PGs on it: %+v %v", r, err)
	}
	// Out while it runs: its PGs keep it acting while they move to others
	// (pg_temp), or for good where no OSD can take its place.
	for _, c := range []struct {
		osds int
		want string
	}{{4, "while they move to others"}, {3, "no other OSD can take them"}} {
		drained := step(t, pgTempMap(t, c.osds, nil), setOSD(2, func(o *osdpb.OSDInfo) { o.In = false }))
		r, err := safeToDestroy(statusInput{mp: drained, beacons: primaryReports(drained, "active+clean+remapped", nil), now: now, fresh: time.Minute}, []uint32{2})
		if err != nil || r.Safe() || len(r.Detail) != 1 || !strings.Contains(r.Detail[0], c.want) {
			t.Fatalf("osd.2 out of %d, kept acting: %+v %v; want %q", c.osds, r, err, c.want)
		}
	}
	// Gone already: nothing of it is left to lose.
	if r, err := safeToDestroy(in, []uint32{9}); err != nil || !r.Safe() || !strings.Contains(r.Detail[0], "does not exist") {
		t.Fatalf("an OSD the map lacks: %+v %v", r, err)
	}

	out, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[3].In = false })
	if err != nil {
		t.Fatal(err)
	}
	held := func(n uint32) map[uint32]*beaconRecord {
		b := primaryReports(out, "active+clean", nil)
		b[3] = &beaconRecord{ID: 3, Epoch: out.Epoch(), PGsHeld: &n}
		return b
	}
	if r, _ := safeToDestroy(statusInput{mp: out, beacons: held(5), now: now, fresh: time.Minute}, []uint32{3}); r.Safe() || !slices.Equal(r.StoredPGs, []uint32{3}) {
		t.Fatalf("osd.3 out, running, 5 stray copies left: %+v", r)
	}
	if r, _ := safeToDestroy(statusInput{mp: out, beacons: held(0), now: now, fresh: time.Minute}, []uint32{3}); !r.Safe() || !slices.Equal(r.SafeToDestroy, []uint32{3}) {
		t.Fatalf("osd.3 out, running, its strays removed: %+v", r)
	}

	// Stopped and out: safe once every PG is active+clean, else unknown.
	gone, err := out.With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[3].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := safeToDestroy(statusInput{mp: gone, beacons: primaryReports(gone, "active+clean", nil), now: now, fresh: time.Minute}, []uint32{3}); !r.Safe() {
		t.Fatalf("osd.3 down and out, every PG clean: %+v", r)
	}
	if r, _ := safeToDestroy(statusInput{mp: gone, beacons: primaryReports(gone, "active+backfilling+degraded", nil), now: now, fresh: time.Minute}, []uint32{3}); r.Safe() || !slices.Equal(r.MissingStats, []uint32{3}) {
		t.Fatalf("osd.3 down and out, PGs still backfilling: %+v", r)
	}
}
