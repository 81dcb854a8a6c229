package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func ver(epoch, seq uint64) *osdpb.Version { return &osdpb.Version{Epoch: epoch, Seq: seq} }

// copied is a log entry a peer sent: a put of key at v by request tid.
func copied(v *osdpb.Version, tid uint64, key string) *osdpb.LogEntry {
	e := &osdpb.LogEntry{Version: v, Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: key}
	if tid != 0 {
		e.Req = &osdpb.ReqID{Client: 7, Tid: tid}
	}
	return putEntry(e, []byte(key))
}

// wantLog checks pg's whole log (LogAfter its tail), last and tail.
func (e *env) wantLog(pg uint32, last, tail *osdpb.Version, want ...*osdpb.LogEntry) {
	e.t.Helper()
	gotLast, gotTail, err := e.s.PGInfo(e.ctx, pg)
	must(e.t, err)
	if !proto.Equal(gotLast, last) || !proto.Equal(gotTail, tail) {
		e.t.Fatalf("pg %d: last %v tail %v, want %v %v", pg, gotLast, gotTail, last, tail)
	}
	got, tooOld, err := e.s.LogAfter(e.ctx, pg, tail, 0)
	must(e.t, err)
	if tooOld || !slices.EqualFunc(got, want, func(a, b *osdpb.LogEntry) bool { return proto.Equal(a, b) }) {
		e.t.Fatalf("pg %d log: too old %v, versions %v, want %v", pg, tooOld, versions(got), versions(want))
	}
	if err := e.s.CheckRequestIndexForTest(pg); err != nil {
		e.t.Fatal(err)
	}
}

func versions(entries []*osdpb.LogEntry) []string {
	var s []string
	for _, e := range entries {
		s = append(s, fmt.Sprintf("%d.%d", e.Version.GetEpoch(), e.Version.GetSeq()))
	}
	return s
}

// wantRequest checks that req is answered by want (nil: not found).
func (e *env) wantRequest(pg uint32, req *osdpb.ReqID, want *osdpb.LogEntry) {
	e.t.Helper()
	got, ok, err := e.s.FindRequest(e.ctx, pg, req)
	must(e.t, err)
	if ok != (want != nil) || (ok && !proto.Equal(got, want)) {
		e.t.Fatalf("request %d/%d: found %v (%v), want %v", req.Client, req.Tid, ok, got.GetVersion(), want.GetVersion())
	}
}

// TestCopyLogCatchUp: a catch-up's copied entries join the log after the
// PG's own, each with its request id, and the PG's version moves to the
// newest; it survives a restart, and the log goes on from there.
func TestCopyLogCatchUp(t *testing.T) {
	e := newEnv(t, store.Options{})
	const pg = 1
	e.createBucket(pg, "b")                 // 1.1
	own := e.put(pg, "b", "x", []byte("x")) // 1.2
	bucket, _, err := e.s.LogAfter(e.ctx, pg, nil, 1)
	must(t, err)
	in := []*osdpb.LogEntry{copied(ver(1, 3), 101, "y"), copied(ver(1, 4), 0, "y"), copied(ver(2, 5), 102, "z")}
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(1, 2), Entries: in}))
	whole := append(append(bucket, own), in...)
	e.wantLog(pg, ver(2, 5), &osdpb.Version{}, whole...)
	e.wantRequest(pg, in[0].Req, in[0])
	e.wantRequest(pg, in[2].Req, in[2])
	e.wantRequest(pg, own.Req, own)

	e.reopen()
	e.wantLog(pg, ver(2, 5), &osdpb.Version{}, whole...)
	e.wantRequest(pg, in[2].Req, in[2])
	stale := putEntry(&osdpb.LogEntry{Version: ver(2, 5), Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: "w"}, []byte("w"))
	wantErr(t, e.s.Apply(e.ctx, pg, stale, []byte("w")), store.ErrStaleVersion)
	e.mustApply(pg, putEntry(&osdpb.LogEntry{Version: ver(2, 6), Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: "w"}, []byte("w")), []byte("w"))
	// Nothing after the PG's version: the version stays.
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(2, 6)}))
	if last, _, _ := e.s.PGInfo(e.ctx, pg); !proto.Equal(last, ver(2, 6)) {
		t.Fatalf("last %v after an empty copy, want 2.6", last)
	}
}

// TestCopyLogRefuses: entries that do not follow After in order, or an
// After past the log's end (a hole), change nothing.
func TestCopyLogRefuses(t *testing.T) {
	e := newEnv(t, store.Options{})
	const pg = 1
	e.createBucket(pg, "b")
	own := e.put(pg, "b", "x", []byte("x")) // 1.2
	before, _, err := e.s.LogAfter(e.ctx, pg, nil, 0)
	must(t, err)
	for name, c := range map[string]store.LogCopy{
		"at After":         {After: ver(1, 2), Entries: []*osdpb.LogEntry{copied(ver(1, 2), 1, "y")}},
		"before After":     {After: ver(1, 2), Entries: []*osdpb.LogEntry{copied(ver(1, 1), 1, "y")}},
		"out of order":     {After: ver(1, 2), Entries: []*osdpb.LogEntry{copied(ver(1, 4), 1, "y"), copied(ver(1, 3), 2, "y")}},
		"repeated":         {After: ver(1, 2), Entries: []*osdpb.LogEntry{copied(ver(1, 3), 1, "y"), copied(ver(1, 3), 2, "y")}},
		"no version":       {After: ver(1, 2), Entries: []*osdpb.LogEntry{{Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: "y"}}},
		"nil entry":        {After: ver(1, 2), Entries: []*osdpb.LogEntry{nil}},
		"a hole after 1.2": {After: ver(1, 3), Entries: []*osdpb.LogEntry{copied(ver(1, 4), 1, "y")}},
	} {
		wantErr(t, e.s.CopyLog(e.ctx, pg, c), store.ErrInvalidArgument)
		e.wantLog(pg, ver(1, 2), &osdpb.Version{}, before...)
		e.wantRequest(pg, &osdpb.ReqID{Client: 7, Tid: 1}, nil)
		if t.Failed() {
			t.Fatal(name)
		}
	}
	e.wantRequest(pg, own.Req, own)
}

// TestCopyLogRollsBack: a catch-up from a floor below the PG's version
// (the source said our entries after it diverged) drops those entries and
// their request ids first; a copied entry that carries the request id of
// a dropped one (its op resent to the new primary, applied there anew)
// answers it. A floor below the tail moves the tail back to it.
func TestCopyLogRollsBack(t *testing.T) {
	e := newEnv(t, store.Options{})
	const pg = 1
	e.createBucket(pg, "b")                  // 1.1
	kept := e.put(pg, "b", "x", []byte("x")) // 1.2
	resent := e.put(pg, "b", "y", []byte("y"))
	gone := e.put(pg, "b", "z", []byte("z")) // 1.3, 1.4: divergent
	in := []*osdpb.LogEntry{copied(ver(2, 3), 0, "y"), copied(ver(2, 4), 9, "w")}
	in[0].Req = resent.Req
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(1, 2), Entries: in}))
	all, _, err := e.s.LogAfter(e.ctx, pg, nil, 0)
	must(t, err)
	if want := []string{"1.1", "1.2", "2.3", "2.4"}; !slices.Equal(versions(all), want) {
		t.Fatalf("log after the rollback: %q, want %q", versions(all), want)
	}
	must(t, e.s.CheckRequestIndexForTest(pg))
	e.wantRequest(pg, gone.Req, nil)
	e.wantRequest(pg, resent.Req, in[0])
	e.wantRequest(pg, kept.Req, kept)
	if last, _, _ := e.s.PGInfo(e.ctx, pg); !proto.Equal(last, ver(2, 4)) {
		t.Fatalf("last %v, want 2.4", last)
	}

	// The log starts at 2.4 (a backfill that found no log to copy); an
	// entry after it diverged, the source's floor is 2.3.
	must(t, e.s.SetPGLast(e.ctx, pg, ver(2, 4)))
	div := copied(ver(2, 5), 11, "v")
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(2, 4), Entries: []*osdpb.LogEntry{div}}))
	back := []*osdpb.LogEntry{copied(ver(3, 4), 12, "y"), copied(ver(3, 5), 13, "v")}
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(2, 3), Entries: back}))
	e.wantLog(pg, ver(3, 5), ver(2, 3), back...)
	e.wantRequest(pg, div.Req, nil)
}

// TestCopyLogReset: a backfill's copy replaces the whole log and request
// index with the source's, starting at its tail, page by page; the last
// page ends the backfill. A trim afterwards drops copied entries with
// their request ids.
func TestCopyLogReset(t *testing.T) {
	e := newEnv(t, store.Options{LogKeep: 2})
	const pg = 1
	e.createBucket(pg, "b")
	old := e.put(pg, "b", "x", []byte("x"))
	must(t, e.s.SetPGBackfilling(e.ctx, pg))
	page1 := []*osdpb.LogEntry{copied(ver(2, 6), 21, "x"), copied(ver(2, 7), 22, "y")}
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(2, 5), Entries: page1, Reset: true}))
	e.wantLog(pg, ver(2, 7), ver(2, 5), page1...)
	e.wantRequest(pg, old.Req, nil)
	e.wantRequest(pg, page1[0].Req, page1[0])
	if b, err := e.s.PGBackfilling(e.ctx, pg); err != nil || !b {
		t.Fatalf("backfilling %v (%v) after a page that does not end it", b, err)
	}
	if _, tooOld, _ := e.s.LogAfter(e.ctx, pg, ver(1, 2), 0); !tooOld {
		t.Fatal("the old log is still served")
	}
	page2 := []*osdpb.LogEntry{copied(ver(3, 8), 23, "z")}
	must(t, e.s.CopyLog(e.ctx, pg, store.LogCopy{After: ver(2, 7), Entries: page2, Backfilled: true}))
	e.wantLog(pg, ver(3, 8), ver(2, 5), append(page1, page2...)...)
	if b, err := e.s.PGBackfilling(e.ctx, pg); err != nil || b {
		t.Fatalf("backfilling %v (%v) after the last page", b, err)
	}

	must(t, e.s.TrimLog(e.ctx, pg))
	e.wantLog(pg, ver(3, 8), ver(2, 6), page1[1], page2[0])
	e.wantRequest(pg, page1[0].Req, nil)
	e.wantRequest(pg, page1[1].Req, page1[1])
	e.reopen()
	e.wantRequest(pg, page2[0].Req, page2[0])
}

// FuzzCopyLog: the entries of a peer's log pull reply, whatever they
// hold, are recorded whole or refused with ErrInvalidArgument; once
// recorded, the log is exactly them, the request index agrees with it and
// the PG's version is the newest entry's.
func FuzzCopyLog(f *testing.F) {
	good, err := proto.Marshal(&osdpb.PGLogPullReply{Entries: []*osdpb.LogEntry{copied(ver(1, 2), 1, "a"), copied(ver(2, 1), 1, "b"), copied(ver(2, 2), 0, "c")}})
	must(f, err)
	f.Add(good, uint64(1), uint64(1), false)
	f.Add(good, uint64(2), uint64(1), true)
	f.Add([]byte{}, uint64(0), uint64(0), true)
	e := newEnv(f, store.Options{})
	pg := uint32(0)
	f.Fuzz(func(t *testing.T, front []byte, epoch, seq uint64, reset bool) {
		var rep osdpb.PGLogPullReply
		if proto.Unmarshal(front, &rep) != nil {
			return
		}
		pg++
		after := ver(epoch, seq)
		if !reset {
			must(t, e.s.SetPGLast(e.ctx, pg, after)) // the log reaches After
		}
		err := e.s.CopyLog(e.ctx, pg, store.LogCopy{After: after, Entries: rep.Entries, Reset: reset})
		if errors.Is(err, store.ErrInvalidArgument) {
			return
		}
		must(t, err)
		last, tail, err := e.s.PGInfo(e.ctx, pg)
		must(t, err)
		want := after
		if n := len(rep.Entries); n > 0 {
			want = rep.Entries[n-1].Version
		}
		if !proto.Equal(last, want) || !proto.Equal(tail, after) {
			t.Fatalf("last %v tail %v, want %v %v", last, tail, want, after)
		}
		got, _, err := e.s.LogAfter(e.ctx, pg, tail, 0)
		must(t, err)
		if !slices.EqualFunc(got, rep.Entries, func(a, b *osdpb.LogEntry) bool { return proto.Equal(a, b) }) {
			t.Fatalf("log %v, want %v", versions(got), versions(rep.Entries))
		}
		must(t, e.s.CheckRequestIndexForTest(pg))
	})
}
