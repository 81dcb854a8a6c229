package osd

import (
	"slices"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestCompareObject drives compareObject, the rule that names an object
// inconsistent and its authoritative copy, case by case.
func TestCompareObject(t *testing.T) {
	v := func(e, s uint64) *osdpb.Version { return &osdpb.Version{Epoch: e, Seq: s} }
	obj := func(ver *osdpb.Version, size uint64, crc uint32, damaged bool) *osdpb.ScrubObject {
		return &osdpb.ScrubObject{Bucket: "b", Key: "k", Version: ver, Size: size, Crc32C: crc, Damaged: damaged}
	}
	acting := []uint32{4, 1, 7}
	for _, tc := range []struct {
		name   string
		agree  bool
		copies [3]*osdpb.ScrubObject // by acting position; nil: missing
		auth   int                   // acting position; -1: none
		errs   [3][]string
		del    *osdpb.Version // the newest logged delete; nil: none
	}{
		{name: "agree", agree: true, copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, false), obj(v(2, 5), 10, 9, false), obj(v(2, 5), 10, 9, false)}},
		{name: "tie goes to the primary", copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, false), obj(v(2, 5), 10, 8, false), obj(v(2, 5), 10, 9, false)},
			auth: 0, errs: [3][]string{nil, {errDigestMismatch}, nil}},
		{name: "newest wins", copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, false), obj(v(3, 1), 12, 8, false), obj(v(3, 1), 12, 8, false)},
			auth: 1, errs: [3][]string{{errStaleVersion, errSizeMismatch}, nil, nil}},
		{name: "a damaged copy is never authoritative", copies: [3]*osdpb.ScrubObject{obj(v(3, 1), 10, 9, true), obj(v(2, 5), 10, 8, false), obj(v(2, 5), 10, 8, false)},
			auth: 1, errs: [3][]string{{errReadError, errDigestMismatch}, nil, nil}},
		{name: "unknown version compares bytes only", copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, false), obj(v(0, 0), 10, 9, false), obj(v(0, 0), 11, 9, false)},
			auth: 0, errs: [3][]string{nil, nil, {errSizeMismatch}}},
		{name: "missing", copies: [3]*osdpb.ScrubObject{nil, obj(v(2, 5), 10, 9, false), obj(v(2, 5), 10, 9, false)},
			auth: 1, errs: [3][]string{{errMissing}, nil, nil}},
		{name: "every copy damaged", copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, true), obj(v(2, 5), 10, 9, true), nil},
			auth: -1, errs: [3][]string{{errReadError}, {errReadError}, {errMissing}}},
		{name: "a delete newer than every copy is authoritative", copies: [3]*osdpb.ScrubObject{nil, nil, obj(v(2, 5), 10, 9, false)},
			del: v(2, 6), auth: 0, errs: [3][]string{nil, nil, {errStaleVersion}}},
		{name: "the primary's copy a delete missed", copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, true), nil, obj(v(2, 4), 10, 8, false)},
			del: v(3, 1), auth: 1, errs: [3][]string{{errReadError, errStaleVersion}, nil, {errStaleVersion}}},
		{name: "a put after the delete wins", copies: [3]*osdpb.ScrubObject{nil, obj(v(2, 7), 10, 9, false), obj(v(2, 7), 10, 9, false)},
			del: v(2, 6), auth: 1, errs: [3][]string{{errMissing}, nil, nil}},
		{name: "a copy of unknown version may be a put after the delete", copies: [3]*osdpb.ScrubObject{nil, obj(v(0, 0), 10, 9, false), obj(v(0, 0), 10, 9, false)},
			del: v(2, 6), auth: 1, errs: [3][]string{{errMissing}, nil, nil}},
		{name: "a delete with every copy present is no lost delete", copies: [3]*osdpb.ScrubObject{obj(v(2, 5), 10, 9, false), obj(v(2, 5), 10, 8, false), obj(v(2, 5), 10, 9, false)},
			del: v(2, 6), auth: 0, errs: [3][]string{nil, {errDigestMismatch}, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sm := shardMaps{}
			for i, id := range acting {
				var objs []*osdpb.ScrubObject
				if tc.copies[i] != nil {
					objs = append(objs, tc.copies[i])
				}
				sm.add(id, objs)
			}
			var dels map[objName]*osdpb.Version
			if tc.del != nil {
				dels = map[objName]*osdpb.Version{{"b", "k"}: tc.del}
			}
			got := compareMaps(acting, sm, dels)
			if tc.agree {
				if len(got) != 0 {
					t.Fatalf("copies that agree: %v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d inconsistent objects, want 1", len(got))
			}
			for i, sh := range got[0].Shards {
				if sh.Osd != acting[i] || sh.Authoritative != (i == tc.auth) || !slices.Equal(sh.Errors, tc.errs[i]) {
					t.Errorf("shard %d: osd.%d authoritative %v errors %v; want osd.%d %v %v", i, sh.Osd, sh.Authoritative, sh.Errors, acting[i], i == tc.auth, tc.errs[i])
				}
				// The delete stands in for the authoritative copy it removed.
				if deleted := tc.del != nil && tc.copies[i] == nil && i == tc.auth; deleted && !(sh.Missing && sh.Version == tc.del) {
					t.Errorf("shard %d, authoritative: missing %v at %v; want missing at the delete's %v", i, sh.Missing, sh.Version, tc.del)
				}
			}
		})
	}
}
