package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

const (
	removedPG = 7
	keptPG    = 8
)

// fillTwoPGs puts objects of every kind (inline, chunked, data file) in
// removedPG and keptPG, and returns the keys of each.
func fillTwoPGs(t *testing.T, ctx context.Context, s *store.Store) (removed, kept []string) {
	t.Helper()
	must(t, s.Apply(ctx, 0, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1},
		Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "b"}, nil))
	seq := map[uint32]uint64{}
	for i := range 24 {
		pg, list := uint32(removedPG), &removed
		if i%3 == 0 {
			pg, list = keptPG, &kept
		}
		key := fmt.Sprintf("k%02d", i)
		body := crashBody(key, uint64(i))
		seq[pg]++
		must(t, s.Apply(ctx, pg, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: seq[pg]}, Kind: osdpb.OpKind_OP_PUT,
			Bucket: "b", Key: key, Req: &osdpb.ReqID{Client: 1, Tid: uint64(i + 1)},
			Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body)}}, body))
		*list = append(*list, key)
	}
	return removed, kept
}

// checkRemoved asserts that removedPG left nothing (objects, log, record,
// removal mark, data files) but a backfilling mark, which keeps peering
// from trusting the empty copy, and that keptPG is whole.
func checkRemoved(t *testing.T, ctx context.Context, s *store.Store, removed, kept []string) {
	t.Helper()
	for _, k := range removed {
		if _, err := s.Head(ctx, "b", k); !errors.Is(err, store.ErrNoSuchKey) {
			t.Errorf("object %s of the removed pg: %v, want NoSuchKey", k, err)
		}
	}
	for _, k := range kept {
		if _, _, err := s.ReadRange(ctx, "b", k, 0, -1, nil); err != nil {
			t.Errorf("object %s of the kept pg: %v", k, err)
		}
	}
	last, tail, err := s.PGInfo(ctx, removedPG)
	must(t, err)
	if last.GetSeq() != 0 || tail.GetSeq() != 0 {
		t.Errorf("removed pg info: last %v tail %v, want zero", last, tail)
	}
	if bf, err := s.PGBackfilling(ctx, removedPG); err != nil || !bf {
		t.Errorf("removed pg not marked backfilling (%v, %v): peering would take its empty copy as complete", bf, err)
	}
	pgs, err := s.HeldPGs(ctx)
	must(t, err)
	if slices.Contains(pgs, removedPG) || !slices.Contains(pgs, keptPG) {
		t.Errorf("held pgs %v: want %d and not %d", pgs, keptPG, removedPG)
	}
	if cut, err := s.RemovingPGs(ctx); err != nil || len(cut) != 0 {
		t.Errorf("removals left to finish: %v (%v)", cut, err)
	}
	if st, err := s.PGStats(ctx, removedPG); err != nil || st.Objects != 0 {
		t.Errorf("removed pg stats %+v (%v)", st, err)
	}
	if st := s.Stats(); st.Objects != int64(len(kept)) {
		t.Errorf("store counts %d objects, want the kept pg's %d", st.Objects, len(kept))
	}
	must(t, s.CheckIntegrityForTest())
}

func TestRemovePG(t *testing.T) {
	defer store.SetRemovePageForTest(3)()
	ctx := context.Background()
	e := newEnv(t, crashOptions(""))
	removed, kept := fillTwoPGs(t, ctx, e.s)
	files := e.s.Stats().DataFiles
	pages := 0
	n, err := e.s.RemovePG(ctx, removedPG, func(context.Context) error { pages++; return nil })
	must(t, err)
	if n != len(removed) || pages < (len(removed)+2)/3 {
		t.Errorf("removed %d objects in %d pages, want %d in pages of 3", n, pages, len(removed))
	}
	checkRemoved(t, ctx, e.s, removed, kept)
	// The space comes back: the PG's data files are unlinked.
	if st := e.s.Stats(); st.DataFiles >= files || st.PGsRemoved != 1 {
		t.Errorf("data files %d (before %d), pgs removed %d", st.DataFiles, files, st.PGsRemoved)
	}
	got, err := e.s.DataFileCountForTest()
	must(t, err)
	if want := int(e.s.Stats().DataFiles); got != want {
		t.Errorf("%d data files on disk, the kept objects name %d", got, want)
	}
	e.reopen()
	checkRemoved(t, ctx, e.s, removed, kept)
}

// A crash in the middle of a removal: the store that comes back lists the
// removal to finish (Open does not hold a start behind it), and shows the
// part left as no copy to trust: no log, no record, backfilling. A
// RemovePG finishes it.
func TestRemovePGCrash(t *testing.T) {
	defer store.SetRemovePageForTest(2)()
	ctx := context.Background()
	for _, at := range []int{0, 1, 7} {
		t.Run(fmt.Sprint("after page ", at), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			s, err := store.Open(ctx, store.WithFSForTest(crashOptions("/db"), fs))
			must(t, err)
			defer s.Close()
			removed, kept := fillTwoPGs(t, ctx, s)
			stop := errors.New("crash")
			var clone *vfs.MemFS
			pages := 0
			_, err = s.RemovePG(ctx, removedPG, func(context.Context) error {
				if pages == at {
					clone = fs.CrashClone(vfs.CrashCloneCfg{})
					return stop
				}
				pages++
				return nil
			})
			if !errors.Is(err, stop) {
				t.Fatalf("RemovePG: %v, want the crash", err)
			}
			c, err := store.Open(ctx, store.WithFSForTest(crashOptions("/db"), clone))
			must(t, err)
			defer c.Close()
			cut, err := c.RemovingPGs(ctx)
			must(t, err)
			if !slices.Equal(cut, []uint32{removedPG}) {
				t.Fatalf("removals to finish after the crash: %v, want [%d]", cut, removedPG)
			}
			last, tail, err := c.PGInfo(ctx, removedPG)
			must(t, err)
			if bf, err := c.PGBackfilling(ctx, removedPG); err != nil || !bf || last.GetSeq() != 0 || tail.GetSeq() != 0 {
				t.Fatalf("the part-removed pg: last %v tail %v backfilling %v (%v); want none and backfilling", last, tail, bf, err)
			}
			if _, err := c.RemovePG(ctx, removedPG, nil); err != nil {
				t.Fatal(err)
			}
			checkRemoved(t, ctx, c, removed, kept)
		})
	}
}

// BenchmarkRemovePG measures the removal of a PG of 1024 objects (4 KiB
// in Pebble, 256 KiB in data files), per object, with the default page.
func BenchmarkRemovePG(b *testing.B) {
	const objects = 1024
	for _, size := range []int{4 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			e := newEnv(b, store.Options{})
			e.createBucket(0, "b")
			body := crashBody("x", 0)[:0]
			body = append(body, make([]byte, size)...)
			b.ReportAllocs()
			var cpu time.Duration // the removals' alone, not the fills'
			for b.Loop() {
				b.StopTimer()
				for i := range objects {
					e.put(removedPG, "b", fmt.Sprintf("k%05d", i), body)
				}
				b.StartTimer()
				cpu0 := osdtest.ProcessCPU()
				if _, err := e.s.RemovePG(e.ctx, removedPG, nil); err != nil {
					b.Fatal(err)
				}
				cpu += osdtest.ProcessCPU() - cpu0
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*objects), "ns/object")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*objects), "cpu-ns/object")
		})
	}
}
