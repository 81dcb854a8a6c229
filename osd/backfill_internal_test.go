package osd

import (
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestBackfillEndStopsAtAHole: the version a walk brings the copy to runs
// from the primary's version at its start through the RepOps taken during
// it, and stops before a missing sequence number (a RepOp refused
// meanwhile, whose write the walk may not have): claiming past it would let
// a resend of that write be acked from a copy that lacks it.
func TestBackfillEndStopsAtAHole(t *testing.T) {
	v := func(e, s uint64) *osdpb.Version { return &osdpb.Version{Epoch: e, Seq: s} }
	bf := newBackfillState()
	bf.noteSeen(v(3, 11)) // before the first fetch (waiting for room): older than first
	if len(bf.seen) != 0 {
		t.Fatalf("a RepOp before the walk's first fetch kept: %v", bf.seen)
	}
	bf.walking = true
	first := v(3, 10)
	if got := bf.end(first); got != first {
		t.Fatalf("no RepOps: end %v, want %v", got, first)
	}
	for _, x := range []*osdpb.Version{v(3, 9), v(3, 11), v(4, 12), v(4, 14), v(4, 15)} {
		bf.noteSeen(x)
	}
	if got := bf.end(first); got.GetSeq() != 12 || got.GetEpoch() != 4 {
		t.Fatalf("end %v, want 4'12 (13 is missing)", got)
	}
	bf.noteSeen(v(4, 13))
	if got := bf.end(first); got.GetSeq() != 15 {
		t.Fatalf("hole filled: end %v, want 4'15", got)
	}
}
