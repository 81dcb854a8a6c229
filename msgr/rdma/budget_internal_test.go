//go:build rdma

package rdma

import (
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestGrantedInlineWaitIsLetGo: an inline frame waits for the receive
// budget behind a transfer; the budget grants it, and the transfer's end
// (startWaiting) makes it done before ReadFrame has seen the grant. The
// link must let go of the wait then: left set, it pointed into the
// frame's recycled pendingRead, and a drop at the link's end cancelled
// the granted wait, giving the frame's bytes back a second time when the
// delivered message was released (a panic, or a budget that undercounts;
// found by a reviewer).
func TestGrantedInlineWaitIsLetGo(t *testing.T) {
	l, a := pieceLink(t, 1<<20, 0)
	l.budget = wire.NewBudget(100)
	l.pend = append(l.pend, a)
	var other wire.Charge
	if !l.budget.TryGrow(&other, 90) {
		t.Fatal("the budget refused its first charge")
	}
	q := l.newPending()
	q.f = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage}, Front: make([]byte, 20)}
	q.inline, q.waiting = true, true
	l.pend = append(l.pend, q)
	if l.chargeInline(q, false) || l.budgetWait == nil {
		t.Fatal("the inline frame did not wait for the budget")
	}
	other.Release() // grants q; ReadFrame has not seen it
	for i := range a.pieces {
		l.pieceDone(readDoneEv{slot: pieceSlot(3, i)})
	}
	if !q.done || l.budgetWait != nil || l.budgetReady != nil {
		t.Fatalf("after the transfer's end: inline frame done %v, the link still waits %v", q.done, l.budgetWait != nil)
	}
	// Delivered as ReadFrame does, then the link ends.
	l.pend = l.pend[2:]
	l.putPending(a)
	var f wire.Frame
	if err := l.finish(q, &f); err != nil {
		t.Fatal(err)
	}
	l.dropPending()
	f.Release()
	if st := l.budget.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after the message's release: %+v, want nothing held", st)
	}
}
