package osd

import (
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestRepTimeoutsWindow: the rep timeouts a beacon reports are those of
// the last minute, per replica; older ones drop out, and a replica with
// none left is forgotten.
func TestRepTimeoutsWindow(t *testing.T) {
	var r repTimeouts
	t0 := time.Unix(5000, 0)
	got := func(now time.Time) map[uint32]uint32 {
		out := map[uint32]uint32{}
		for _, e := range r.recent(now, 10*time.Second) {
			if e.TimeoutNanos != int64(10*time.Second) {
				t.Errorf("osd.%d: timeout %v", e.Osd, time.Duration(e.TimeoutNanos))
			}
			out[e.Osd] = e.Writes
		}
		return out
	}
	check := func(now time.Time, want map[uint32]uint32) {
		t.Helper()
		g := got(now)
		if len(g) != len(want) {
			t.Fatalf("at +%v: %v, want %v", now.Sub(t0), g, want)
		}
		for id, n := range want {
			if g[id] != n {
				t.Fatalf("at +%v: %v, want %v", now.Sub(t0), g, want)
			}
		}
	}
	r.add(t0, []uint32{2, 3})
	r.add(t0.Add(500*time.Millisecond), []uint32{2})
	r.add(t0.Add(30*time.Second), []uint32{2})
	check(t0.Add(30*time.Second), map[uint32]uint32{2: 3, 3: 1})
	check(t0.Add(59*time.Second), map[uint32]uint32{2: 3, 3: 1})
	check(t0.Add(61*time.Second), map[uint32]uint32{2: 1})
	if _, ok := r.peers[3]; ok {
		t.Error("osd.3 kept with nothing in the window")
	}
	// A minute on, the same second's bucket counts afresh.
	r.add(t0.Add(90*time.Second), []uint32{2})
	check(t0.Add(90*time.Second), map[uint32]uint32{2: 1})
	check(t0.Add(200*time.Second), map[uint32]uint32{})
}

// TestSlowOpsAge: only ops in flight longer than the complaint time are
// slow, an admin's PG repair never; the oldest one's age and type are
// reported.
func TestSlowOpsAge(t *testing.T) {
	var ot opTimer
	start := func(tid uint64, typ osdpb.MsgType) {
		m := msgr.NewMessage(uint16(typ), nil, nil)
		m.SetTid(tid)
		ot.start(m, typ)
	}
	start(1, osdpb.MsgType_MSG_PUT_OBJECT)
	start(2, osdpb.MsgType_MSG_GET_OBJECT)
	start(3, osdpb.MsgType_MSG_DELETE_OBJECT)
	start(4, osdpb.MsgType_MSG_PG_REPAIR) // an hour-long repair is no slow op
	now := time.Now()
	// Age them by hand: 40 s, 31 s and 5 s.
	for i := range ot.shards {
		s := &ot.shards[i]
		for k, st := range s.m {
			switch k.tid {
			case 1:
				st.at = now.Add(-31 * time.Second)
			case 2:
				st.at = now.Add(-40 * time.Second)
			case 3:
				st.at = now.Add(-5 * time.Second)
			case 4:
				st.at = now.Add(-time.Hour)
			}
			s.m[k] = st
		}
	}
	n, oldest, typ := ot.slow(now, 30*time.Second)
	if n != 2 || oldest != 40*time.Second || typ != osdpb.MsgType_MSG_GET_OBJECT {
		t.Fatalf("slow: %d ops, oldest %v (%v); want 2, 40s, get", n, oldest, typ)
	}
	if n, _, _ := ot.slow(now, time.Minute); n != 0 {
		t.Fatalf("%d slow ops with a minute's complaint time", n)
	}
}
