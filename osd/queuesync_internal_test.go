package osd

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestQueueSyncKeepsTidSyncs: while a PG recovers, plain syncs from one
// primary fold into one queued sync, but a sync with a tid (a resent
// write's, whose client waits for the answer) is queued to be answered,
// never dropped or replaced unanswered.
func TestQueueSyncKeepsTidSyncs(t *testing.T) {
	var p pgState
	sync := func(tid uint64, activated bool) *osdpb.RepOp {
		return &osdpb.RepOp{Tid: tid, Activated: activated, Entry: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_NONE}}
	}
	offer := func(r *osdpb.RepOp) bool {
		m := msgr.NewMessage(uint16(osdpb.MsgType_MSG_REP_OP), nil, nil)
		if p.queueSync(m, r, 1) {
			return true
		}
		p.queued = append(p.queued, queuedRepOp{m, r, 1}) // as repOp does
		return false
	}
	if offer(sync(9, false)) {
		t.Fatal("a sync with a tid folded into nothing")
	}
	if offer(sync(0, false)) {
		t.Fatal("a plain sync folded into one with a tid")
	}
	if !offer(sync(0, false)) {
		t.Fatal("a second plain sync did not fold")
	}
	if offer(sync(10, false)) {
		t.Fatal("a sync with a tid folded: its answer would never come")
	}
	if !offer(sync(0, true)) {
		t.Fatal("an activated plain sync did not fold")
	}
	var tids []uint64
	activated := 0
	for _, q := range p.queued {
		tids = append(tids, q.op.Tid)
		if q.op.Activated {
			activated++
		}
	}
	if len(p.queued) != 3 || tids[0] != 9 || tids[1] != 10 || tids[2] != 0 || activated != 1 {
		t.Fatalf("queued tids %v (%d activated); want the syncs with tids 9 and 10, then the activated plain one", tids, activated)
	}
}
