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
	first := v(3, 10)
	if got := bf.end(first); got != first {
		t.Fatalf("no RepOps: end %v, want %v", got, first)
	}
	for _, x := range []*osdpb.Version{v(3, 9), v(3, 11), v(4, 12), v(4, 14), v(4, 15)} {
		bf.noteMax(x)
	}
	if got := bf.end(first); got.GetSeq() != 12 || got.GetEpoch() != 4 {
		t.Fatalf("end %v, want 4'12 (13 is missing)", got)
	}
	bf.noteMax(v(4, 13))
	if got := bf.end(first); got.GetSeq() != 15 {
		t.Fatalf("hole filled: end %v, want 4'15", got)
	}
	if bf.max.GetSeq() != 15 {
		t.Fatalf("max %v", bf.max)
	}
}
