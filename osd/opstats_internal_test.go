package osd

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestOpBucket(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {1, 0}, {OpBucketBounds[0], 0}, {OpBucketBounds[0] + 1, 1},
		{OpBucketBounds[1], 1}, {time.Second, 14}, {OpBucketBounds[len(OpBucketBounds)-1], opBuckets - 2},
		{time.Hour, opBuckets - 1}, {-time.Second, 0},
	} {
		if got := opBucket(tc.d); got != tc.want {
			t.Errorf("opBucket(%v) = %d, want %d", tc.d, got, tc.want)
		}
		if tc.want < len(OpBucketBounds) && tc.d > OpBucketBounds[tc.want] {
			t.Errorf("%v is above its bucket's bound %v", tc.d, OpBucketBounds[tc.want])
		}
	}
}

// TestOpTimer: an op is timed from start to the reply of its type with
// its tid, once; other replies leave it in flight.
func TestOpTimer(t *testing.T) {
	var ot opTimer
	m := msgr.NewMessage(uint16(osdpb.MsgType_MSG_PUT_OBJECT), nil, nil)
	m.SetTid(7)
	ot.start(m, osdpb.MsgType_MSG_PUT_OBJECT)
	ot.start(m, osdpb.MsgType_MSG_REP_OP) // not a client op
	if n := ot.inFlight(); n != 1 {
		t.Fatalf("in flight %d, want 1", n)
	}
	put := &ot.hist[osdpb.MsgType_MSG_PUT_OBJECT/2]
	ot.done(dest{tid: 7}, osdpb.MsgType_MSG_GET_OBJECT_REPLY) // another op's reply type
	ot.done(dest{tid: 8}, osdpb.MsgType_MSG_PUT_OBJECT_REPLY) // another request
	ot.done(dest{tid: 7}, osdpb.MsgType_MSG_REP_OP_REPLY)
	if n, c := ot.inFlight(), put.count.Load(); n != 1 || c != 0 {
		t.Fatalf("after unrelated replies: in flight %d, puts timed %d; want 1 and 0", n, c)
	}
	ot.done(dest{tid: 7}, osdpb.MsgType_MSG_PUT_OBJECT_REPLY)
	ot.done(dest{tid: 7}, osdpb.MsgType_MSG_PUT_OBJECT_REPLY) // a second reply times nothing
	if n, c := ot.inFlight(), put.count.Load(); n != 0 || c != 1 {
		t.Fatalf("after the reply: in flight %d, puts timed %d; want 0 and 1", n, c)
	}
	var inBuckets uint64
	for i := range put.buckets {
		inBuckets += put.buckets[i].Load()
	}
	if inBuckets != 1 {
		t.Errorf("%d ops in the buckets, want 1", inBuckets)
	}
}

// BenchmarkOpTimer is what timing costs each client op: a start at
// dispatch and a done at its reply.
func BenchmarkOpTimer(b *testing.B) {
	var ot opTimer
	m := msgr.NewMessage(uint16(osdpb.MsgType_MSG_PUT_OBJECT), nil, nil)
	b.ReportAllocs()
	tid := uint64(0)
	for b.Loop() {
		tid++
		m.SetTid(tid)
		ot.start(m, osdpb.MsgType_MSG_PUT_OBJECT)
		ot.done(dest{tid: tid}, osdpb.MsgType_MSG_PUT_OBJECT_REPLY)
	}
}

// TestDroppedOpsLeaveNoneInFlight: ops that end without a reply (the OSD
// shutting down before they are queued, their session gone before they
// are answered) leave the in-flight table, which the ops-in-flight gauge
// reads.
func TestDroppedOpsLeaveNoneInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // shutting down: nothing more is queued
	o := &OSD{ctx: ctx, log: slog.New(slog.DiscardHandler), readers: make(chan func()), shards: []chan func(){make(chan func())}}
	for tid, queue := range []func(*msgr.Message){
		func(m *msgr.Message) { o.onReaders(m, func() { t.Error("a dropped op ran") }) },
		func(m *msgr.Message) { o.onShard(m, 0, func() { t.Error("a dropped op ran") }) },
	} {
		m := msgr.NewMessage(uint16(osdpb.MsgType_MSG_GET_OBJECT), nil, nil)
		m.SetTid(uint64(tid))
		o.opTimes.start(m, osdpb.MsgType_MSG_GET_OBJECT)
		queue(m)
	}
	if n := o.opTimes.inFlight(); n != 0 {
		t.Fatalf("%d ops in flight after the OSD dropped them unqueued, want 0", n)
	}

	// Requests of a session that ended, whose handlers never answer.
	for tid := range uint64(3) {
		m := msgr.NewMessage(uint16(osdpb.MsgType_MSG_PUT_OBJECT), nil, nil)
		m.SetTid(tid)
		o.opTimes.start(m, osdpb.MsgType_MSG_PUT_OBJECT)
	}
	if n := o.opTimes.inFlight(); n != 3 {
		t.Fatalf("%d ops in flight, want 3", n)
	}
	publicDispatcher{o}.HandleEvent(msgr.Event{Kind: msgr.EventRemoteReset})
	if n := o.opTimes.inFlight(); n != 3 {
		t.Fatalf("%d ops in flight after a remote reset (the session goes on), want 3", n)
	}
	publicDispatcher{o}.HandleEvent(msgr.Event{Kind: msgr.EventReset})
	if n := o.opTimes.inFlight(); n != 0 {
		t.Fatalf("%d ops in flight after their session ended, want 0", n)
	}
}
