package store_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

func seqs(entries []*osdpb.LogEntry) []uint64 {
	var s []uint64
	for _, e := range entries {
		s = append(s, e.Version.Seq)
	}
	return s
}

func TestPGLog(t *testing.T) {
	e := newEnv(t, store.Options{LogKeep: 3})
	const pg = 4
	last, tail, err := e.s.PGInfo(e.ctx, pg)
	must(t, err)
	if last.Epoch != 0 || last.Seq != 0 || tail.Seq != 0 {
		t.Fatalf("unknown pg: last %v tail %v", last, tail)
	}
	e.createBucket(pg, "b")
	var entries []*osdpb.LogEntry
	for i := range 9 {
		entries = append(entries, e.put(pg, "b", fmt.Sprintf("k%d", i), []byte{byte(i)}))
	}
	// seq 1 is the bucket, 2..10 the puts.

	// Stale versions: equal and lower; a newer epoch with a lower seq is newer.
	for _, v := range []*osdpb.Version{{Epoch: 1, Seq: 10}, {Epoch: 1, Seq: 3}, {Epoch: 0, Seq: 99}} {
		le := putEntry(&osdpb.LogEntry{Version: v, Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: "x"}, []byte("x"))
		wantErr(t, e.s.Apply(e.ctx, pg, le, []byte("x")), store.ErrStaleVersion)
	}
	le := putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: 2, Seq: 1}, Req: &osdpb.ReqID{Client: 9, Tid: 1},
		Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: "x"}, []byte("x"))
	e.mustApply(pg, le, []byte("x"))
	entries = append(entries, le)

	all, tooOld, err := e.s.LogAfter(e.ctx, pg, nil, 0)
	must(t, err)
	if tooOld || len(all) != 11 || !proto.Equal(all[10], le) || all[0].Kind != osdpb.OpKind_OP_CREATE_BUCKET {
		t.Fatalf("whole log: tooOld %v, %d entries", tooOld, len(all))
	}
	got, _, err := e.s.LogAfter(e.ctx, pg, &osdpb.Version{Epoch: 1, Seq: 3}, 2)
	must(t, err)
	if !slices.Equal(seqs(got), []uint64{4, 5}) {
		t.Fatalf("after 1.3 max 2: %v", seqs(got))
	}

	found, ok, err := e.s.FindRequest(e.ctx, pg, entries[2].Req)
	must(t, err)
	if !ok || !proto.Equal(found, entries[2]) {
		t.Fatalf("FindRequest: %v %v", ok, found)
	}
	_, ok, err = e.s.FindRequest(e.ctx, pg, &osdpb.ReqID{Client: 1, Tid: 1})
	must(t, err)
	if ok {
		t.Fatal("found an unknown request")
	}
	_, ok, err = e.s.FindRequest(e.ctx, pg+1, entries[2].Req)
	must(t, err)
	if ok {
		t.Fatal("found a request in the wrong pg")
	}

	// Trim to the newest 3: 1.9, 1.10, 2.1. The tail is the newest dropped.
	must(t, e.s.TrimLog(e.ctx, pg))
	must(t, e.s.CheckRequestIndexForTest(pg))
	last, tail, err = e.s.PGInfo(e.ctx, pg)
	must(t, err)
	if last.Epoch != 2 || last.Seq != 1 || tail.Epoch != 1 || tail.Seq != 8 {
		t.Fatalf("after trim: last %v tail %v", last, tail)
	}
	_, tooOld, err = e.s.LogAfter(e.ctx, pg, &osdpb.Version{Epoch: 1, Seq: 5}, 0)
	must(t, err)
	if !tooOld {
		t.Fatal("LogAfter before the tail is not tooOld")
	}
	_, tooOld, err = e.s.LogAfter(e.ctx, pg, nil, 0)
	must(t, err)
	if !tooOld {
		t.Fatal("LogAfter(zero) after a trim is not tooOld")
	}
	got, tooOld, err = e.s.LogAfter(e.ctx, pg, tail, 0)
	must(t, err)
	if tooOld || !slices.Equal(seqs(got), []uint64{9, 10, 1}) {
		t.Fatalf("after tail: tooOld %v %v", tooOld, seqs(got))
	}
	_, ok, err = e.s.FindRequest(e.ctx, pg, entries[2].Req)
	must(t, err)
	if ok {
		t.Fatal("a trimmed request is still found")
	}
	_, ok, err = e.s.FindRequest(e.ctx, pg, le.Req)
	must(t, err)
	if !ok {
		t.Fatal("a kept request is not found")
	}
	must(t, e.s.TrimLog(e.ctx, pg)) // nothing more to trim
	must(t, e.s.TrimLog(e.ctx, 77)) // unknown pg

	// The trim survives a restart, and the log continues after it.
	e.reopen()
	_, tail2, err := e.s.PGInfo(e.ctx, pg)
	must(t, err)
	if !proto.Equal(tail, tail2) {
		t.Fatalf("tail %v after reopen, want %v", tail2, tail)
	}
	e.mustApply(pg, putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: 2, Seq: 2}, Kind: osdpb.OpKind_OP_DELETE, Bucket: "b", Key: "k0", Status: osdpb.Status_OK}, nil), nil)
}

func TestBackfill(t *testing.T) {
	src := newEnv(t, store.Options{ChunkSize: 256})
	src.createBucket(0, "b")
	src.createBucket(0, "a")
	bodies := map[string][]byte{}
	for i := range 12 {
		b, k := []string{"a", "b"}[i%2], fmt.Sprintf("k%02d", i)
		body := []byte(fmt.Sprintf("%s/%s %0*d", b, k, i*100, i))
		pg := uint32(1 + i%3%2) // pgs 1 and 2
		src.put(pg, b, k, body)
		bodies[b+"/"+k] = body
	}
	lastSrc, _, err := src.s.PGInfo(src.ctx, 1)
	must(t, err)

	var objs []*osdpb.LogEntry
	var names []string
	for o, err := range src.s.PGObjects(src.ctx, 1, "", "") {
		must(t, err)
		objs = append(objs, o)
		names = append(names, o.Bucket+"/"+o.Key)
		if o.Kind != osdpb.OpKind_OP_PUT || o.Meta == nil || o.Version == nil || o.Version.Seq == 0 {
			t.Fatalf("backfill entry %v", o)
		}
	}
	if !slices.IsSorted(names) || len(names) != 8 {
		t.Fatalf("pg 1 objects %v", names)
	}
	var rest []string
	for o, err := range src.s.PGObjects(src.ctx, 1, objs[2].Bucket, objs[2].Key) {
		must(t, err)
		rest = append(rest, o.Bucket+"/"+o.Key)
	}
	if !slices.Equal(rest, names[3:]) {
		t.Fatalf("after %s: %v, want %v", names[2], rest, names[3:])
	}
	n := 0
	for range src.s.PGObjects(src.ctx, 1, "", "") {
		if n++; n == 2 {
			break // stopping early must be fine
		}
	}

	// Install on an empty replica: buckets first, then objects, then the version.
	dst := newEnv(t, store.Options{ChunkSize: 100}) // a different chunk size
	for b, err := range src.s.Buckets(src.ctx) {
		must(t, err)
		must(t, dst.s.InstallObject(dst.ctx, 1, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: b.Name,
			Meta: &osdpb.ObjectMeta{MtimeUnixNano: b.CreatedUnixNano}}, nil))
	}
	for _, o := range objs {
		_, body, err := src.s.ReadRange(src.ctx, o.Bucket, o.Key, 0, -1, nil)
		must(t, err)
		must(t, dst.s.InstallObject(dst.ctx, 1, o, body))
	}
	must(t, dst.s.SetPGLast(dst.ctx, 1, lastSrc))
	for _, o := range objs {
		dst.mustRead(o.Bucket, o.Key, bodies[o.Bucket+"/"+o.Key])
	}
	last, tail, err := dst.s.PGInfo(dst.ctx, 1)
	must(t, err)
	if !proto.Equal(last, lastSrc) || !proto.Equal(tail, lastSrc) {
		t.Fatalf("replica last %v tail %v, want both %v", last, tail, lastSrc)
	}
	_, tooOld, err := dst.s.LogAfter(dst.ctx, 1, &osdpb.Version{Epoch: 1, Seq: 1}, 0)
	must(t, err)
	if !tooOld {
		t.Fatal("LogAfter before the reset is not tooOld")
	}
	got, tooOld, err := dst.s.LogAfter(dst.ctx, 1, lastSrc, 0)
	must(t, err)
	if tooOld || len(got) != 0 {
		t.Fatalf("LogAfter(last): %v %v", tooOld, got)
	}
	info, err := dst.s.HeadBucket(dst.ctx, "a")
	must(t, err)
	if info.CreatedUnixNano != 1234 {
		t.Fatalf("installed bucket %v", info)
	}
	// The log continues from the installed version.
	next := putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: lastSrc.Epoch, Seq: lastSrc.Seq + 1},
		Kind: osdpb.OpKind_OP_PUT, Bucket: "a", Key: "new"}, []byte("new"))
	wantErr(t, dst.s.Apply(dst.ctx, 1, &osdpb.LogEntry{Version: lastSrc, Kind: osdpb.OpKind_OP_DELETE, Bucket: "a", Key: "new"}, nil), store.ErrStaleVersion)
	dst.mustApply(1, next, []byte("new"))

	// Removals: present, missing, and through InstallObject.
	must(t, dst.s.RemoveObject(dst.ctx, 1, objs[0].Bucket, objs[0].Key))
	must(t, dst.s.RemoveObject(dst.ctx, 1, "a", "never"))
	must(t, dst.s.InstallObject(dst.ctx, 1, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: objs[1].Bucket, Key: objs[1].Key}, nil))
	for _, o := range objs[:2] {
		_, err := dst.s.Head(dst.ctx, o.Bucket, o.Key)
		wantErr(t, err, store.ErrNoSuchKey)
	}
	// An install into a missing bucket is refused; a bad body too.
	o := proto.Clone(objs[2]).(*osdpb.LogEntry)
	o.Bucket = "missing"
	wantErr(t, dst.s.InstallObject(dst.ctx, 1, o, bodies[objs[2].Bucket+"/"+objs[2].Key]), store.ErrNoSuchBucket)
	wantErr(t, dst.s.InstallObject(dst.ctx, 1, objs[2], []byte("wrong")), store.ErrBadDigest)
	// Bucket removal through install purges, and tolerates a missing bucket.
	must(t, dst.s.InstallObject(dst.ctx, 1, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE_BUCKET, Bucket: "b"}, nil))
	must(t, dst.s.InstallObject(dst.ctx, 1, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE_BUCKET, Bucket: "b"}, nil))
	for o, err := range dst.s.PGObjects(dst.ctx, 1, "", "") {
		must(t, err)
		if o.Bucket == "b" {
			t.Fatalf("object %q of a removed bucket", o.Key)
		}
	}
	dst.checkIntegrity()
	src.checkIntegrity()
}

func TestPGObjectsPages(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	var want []string
	for i := range 150 {
		k := fmt.Sprintf("k%03d", i)
		le := putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: uint64(i + 1)}, Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: k}, []byte(k))
		must(t, e.s.InstallObject(e.ctx, uint32(i%2), le, []byte(k)))
		if i%2 == 0 {
			want = append(want, k)
		}
	}
	var got []string
	for o, err := range e.s.PGObjects(e.ctx, 0, "", "") {
		must(t, err)
		got = append(got, o.Key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pg 0 objects: %d, want %d", len(got), len(want))
	}
	// Installs do not touch the log.
	last, _, err := e.s.PGInfo(e.ctx, 0)
	must(t, err)
	if last.Seq != 1 {
		t.Fatalf("installs moved pg 0 to %v", last)
	}
}

// TestDiverged: a peer's last version that lies past our tail but is not
// one of our entries is divergent, with our newest entry below it as the
// floor; a version we hold, the tail, or nothing is not.
func TestDiverged(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(1, "b")          // 1.1
	e.put(1, "b", "x", []byte("x")) // 1.2
	e.put(1, "b", "y", []byte("y")) // 1.3
	later := putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: 3, Seq: 4}, Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: "z"}, []byte("z"))
	e.mustApply(1, later, []byte("z"))
	for _, c := range []struct {
		at        *osdpb.Version
		diverged  bool
		floorSeq  uint64
		floorEpoc uint64
	}{
		{nil, false, 0, 0},
		{&osdpb.Version{Epoch: 1, Seq: 3}, false, 0, 0},
		{&osdpb.Version{Epoch: 3, Seq: 4}, false, 0, 0},
		{&osdpb.Version{Epoch: 1, Seq: 4}, true, 3, 1}, // an old primary's, never acked
		{&osdpb.Version{Epoch: 2, Seq: 9}, true, 3, 1},
		{&osdpb.Version{Epoch: 4, Seq: 1}, true, 4, 3}, // ahead of us
	} {
		floor, div, err := e.s.Diverged(e.ctx, 1, c.at)
		if err != nil {
			t.Fatal(err)
		}
		if div != c.diverged || (div && (floor.GetEpoch() != c.floorEpoc || floor.GetSeq() != c.floorSeq)) {
			t.Errorf("at %v: diverged %v floor %v; want %v %d.%d", c.at, div, floor, c.diverged, c.floorEpoc, c.floorSeq)
		}
	}
	// After a reset (a catch-up's SetPGLast) the tail is the floor.
	if err := e.s.SetPGLast(e.ctx, 1, &osdpb.Version{Epoch: 3, Seq: 4}); err != nil {
		t.Fatal(err)
	}
	floor, div, err := e.s.Diverged(e.ctx, 1, &osdpb.Version{Epoch: 3, Seq: 5})
	if err != nil || !div || floor.GetEpoch() != 3 || floor.GetSeq() != 4 {
		t.Fatalf("after a reset: diverged %v floor %v err %v; want the tail 3.4", div, floor, err)
	}
	if _, div, _ := e.s.Diverged(e.ctx, 1, &osdpb.Version{Epoch: 3, Seq: 4}); div {
		t.Fatal("the tail itself diverged")
	}
}

// TestLogNewest: the newest entries, in log order, back to the first the
// caller does not want; none of a PG with no log.
func TestLogNewest(t *testing.T) {
	e := newEnv(t, store.Options{})
	const pg = 5
	e.createBucket(pg, "b")
	for i := range 6 {
		e.put(pg, "b", fmt.Sprintf("k%d", i), []byte{byte(i)})
	}
	// seq 1 is the bucket, 2..7 the puts.
	var asked []uint64
	got, err := e.s.LogNewest(e.ctx, pg, func(le *osdpb.LogEntry) bool {
		asked = append(asked, le.Version.Seq)
		return le.Version.Seq > 4
	})
	must(t, err)
	if !slices.Equal(seqs(got), []uint64{5, 6, 7}) || !slices.Equal(asked, []uint64{7, 6, 5, 4}) {
		t.Fatalf("back to seq 5: got %v, asked about %v", seqs(got), asked)
	}
	all, err := e.s.LogNewest(e.ctx, pg, func(*osdpb.LogEntry) bool { return true })
	must(t, err)
	if !slices.Equal(seqs(all), []uint64{1, 2, 3, 4, 5, 6, 7}) || all[0].Kind != osdpb.OpKind_OP_CREATE_BUCKET {
		t.Fatalf("the whole log: %v", seqs(all))
	}
	none, err := e.s.LogNewest(e.ctx, pg+1, func(*osdpb.LogEntry) bool { return true })
	must(t, err)
	if len(none) != 0 {
		t.Fatalf("a PG with no log: %v", seqs(none))
	}
}
