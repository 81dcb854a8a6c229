package osd

import (
	"slices"
	"testing"

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
