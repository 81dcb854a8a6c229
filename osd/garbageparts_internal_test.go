package osd

import (
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestGarbageParts(t *testing.T) {
	refs := func(keys ...string) []*osdpb.PartRef {
		var rs []*osdpb.PartRef
		for _, k := range keys {
			rs = append(rs, &osdpb.PartRef{Key: k})
		}
		return rs
	}
	keys := func(rs []*osdpb.PartRef) []string {
		var ks []string
		for _, r := range rs {
			ks = append(ks, r.Key)
		}
		return ks
	}
	for _, c := range []struct {
		name      string
		old, kept []*osdpb.PartRef
		want      []string
	}{
		{"replaced by a plain object", refs("u1/00001", "u1/00002"), nil, []string{"u1/00001", "u1/00002"}},
		{"replaced by another upload", refs("u1/00001", "u1/00002"), refs("u2/00001"), []string{"u1/00001", "u1/00002"}},
		// A repeated CompleteMultipartUpload writes the same parts again.
		{"completed again", refs("u1/00001", "u1/00002"), refs("u1/00001", "u1/00002"), nil},
		{"not multipart", nil, refs("u1/00001"), nil},
	} {
		if got := keys(garbageParts(c.old, c.kept)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestGarbageKeys: of the keys an entry dropped, a resend (or the first
// attempt, late) deletes only parts and pieces, and none that the object
// now at the entry's key names.
func TestGarbageKeys(t *testing.T) {
	u1, u2 := ops.NewUploadID(), ops.NewUploadID()
	p1, p2, q1 := ops.PartKey(u1, 1), ops.PartKey(u1, 2), ops.PartKey(u2, 1)
	piece := ops.PieceKey(u1, 3, ops.NewPieceSet(), 1)
	manifest := func(keys ...string) *osdpb.ObjectMeta {
		m := &osdpb.ObjectMeta{}
		for _, k := range keys {
			m.Parts = append(m.Parts, &osdpb.PartRef{Key: k})
		}
		return m
	}
	for _, c := range []struct {
		name    string
		dropped []string
		cur     *osdpb.ObjectMeta
		want    []string
	}{
		{"no object now", []string{p1, p2, piece}, nil, []string{p1, p2, piece}},
		{"a plain object now", []string{p1, p2}, &osdpb.ObjectMeta{Size: 3}, []string{p1, p2}},
		{"another upload now", []string{p1, p2}, manifest(q1), []string{p1, p2}},
		// The same upload completed again after the entry.
		{"live again", []string{p1, p2, piece}, manifest(p2, piece), []string{p1}},
		{"not parts", []string{p1, ops.UploadKey("b", "k", u2), "k", u2 + "/x"}, nil, []string{p1}},
	} {
		dropped := slices.Clone(c.dropped)
		if got := garbageKeys(dropped, c.cur); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if !slices.Equal(dropped, c.dropped) {
			t.Errorf("%s: the entry's keys changed to %q", c.name, dropped)
		}
	}
}

// TestRedropTodo: a primary going active deletes again the parts of the
// entries logged within the window of the log's newest, past those this
// process did already, never those of an entry without a time or parts.
func TestRedropTodo(t *testing.T) {
	const minute = int64(time.Minute)
	at := func(seq uint64, nanos int64, parts ...string) *osdpb.LogEntry {
		return &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 3, Seq: seq}, LoggedUnixNanos: nanos, DroppedParts: parts}
	}
	log := []*osdpb.LogEntry{
		at(1, 1*minute, "old"),     // outside the window
		at(2, 0, "untimed"),        // an older build's
		at(3, 8*minute, "a"),       // within
		at(4, 9*minute),            // dropped nothing
		at(5, 10*minute, "b", "c"), // the newest
	}
	seqs := func(es []*osdpb.LogEntry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.Version.Seq)
		}
		return out
	}
	if got := seqs(redropTodo(log, 3*time.Minute, 0)); !slices.Equal(got, []uint64{3, 5}) {
		t.Fatalf("redrop %v; want [3 5]", got)
	}
	if got := seqs(redropTodo(log, 3*time.Minute, 3)); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("past seq 3: redrop %v; want [5]", got)
	}
	if got := redropTodo(log, 3*time.Minute, 5); len(got) != 0 {
		t.Fatalf("everything done already: redrop %v", seqs(got))
	}
	p := &pgState{}
	p.noteDrops(log[4])
	p.noteDrops(log[2]) // an older one: the mark stays
	if got := p.dropsThrough.Load(); got != 5 {
		t.Fatalf("dropsThrough %d; want 5", got)
	}
}
