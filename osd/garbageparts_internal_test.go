package osd

import (
	"slices"
	"testing"

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
