package osd

import (
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestSettledIgnoresWritesInFlight: a replica counts as behind only when
// short of where the primary's log ended at least settleTime ago; writes
// sent since are in flight, not missing. An idle log settles at its end.
func TestSettledIgnoresWritesInFlight(t *testing.T) {
	var p pgState
	t0 := time.Unix(1000, 0)
	v := func(seq uint64) *osdpb.Version { return &osdpb.Version{Epoch: 3, Seq: seq} }
	for _, c := range []struct {
		after time.Duration
		last  uint64
		want  uint64
	}{
		{0, 10, 10},                       // a first look: the end itself
		{300 * time.Millisecond, 15, 10},  // 11-15 just sent
		{1100 * time.Millisecond, 40, 10}, // a second take, at 40: 11-40 may be in flight
		{1900 * time.Millisecond, 55, 10},
		{2200 * time.Millisecond, 60, 40}, // 40 was the end over a second ago
		{3300 * time.Millisecond, 60, 60}, // idle: settled at the end
		{3400 * time.Millisecond, 60, 60},
	} {
		if got := p.settled(v(c.last), t0.Add(c.after)); got.GetSeq() != c.want {
			t.Errorf("at +%v with the log at %d: settled %d, want %d", c.after, c.last, got.GetSeq(), c.want)
		}
	}
	// A log that went back (a rollback) settles at its new end.
	if got := p.settled(v(50), t0.Add(5*time.Second)); got.GetSeq() != 50 {
		t.Errorf("after a rollback to 50: settled %d", got.GetSeq())
	}
}
