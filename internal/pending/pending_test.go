package pending

import (
	"slices"
	"testing"

	"github.com/ospreystore/osprey/msgr"
)

// TestTableOnce: an entry leaves the table once, by whichever of Take,
// TakeIf, FailIf or Close comes first; what the others find is nothing.
func TestTableOnce(t *testing.T) {
	var tb Table[string]
	a := tb.Add("a")
	b := tb.Add("b")
	if a == b || a == 0 || b == 0 {
		t.Fatalf("Add gave tids %d and %d", a, b)
	}
	if !tb.Put(100, "c") || !tb.Put(101, "d") {
		t.Fatal("Put refused on an open table")
	}
	if v, ok := tb.Get(a); !ok || v != "a" || tb.Len() != 4 {
		t.Fatalf("Get(%d) = %q, %v with %d entries", a, v, ok, tb.Len())
	}
	if v, ok := tb.Take(a); !ok || v != "a" {
		t.Fatalf("Take(%d) = %q, %v", a, v, ok)
	}
	if _, ok := tb.Take(a); ok {
		t.Fatal("an entry was taken twice")
	}
	if _, ok := tb.TakeIf(b, func(v string) bool { return v == "x" }); ok {
		t.Fatal("TakeIf took an entry its match refused")
	}
	if v, ok := tb.TakeIf(b, func(v string) bool { return v == "b" }); !ok || v != "b" {
		t.Fatalf("TakeIf(%d) = %q, %v", b, v, ok)
	}
	var failed []string
	fail := func(v string) { failed = append(failed, v) }
	if n := tb.FailIf(func(v string) bool { return v == "c" }, fail); n != 1 || !slices.Equal(failed, []string{"c"}) {
		t.Fatalf("FailIf failed %d: %q", n, failed)
	}
	if !tb.Close(fail) || !slices.Equal(failed, []string{"c", "d"}) || tb.Len() != 0 {
		t.Fatalf("Close failed %q, %d left", failed, tb.Len())
	}
	if tb.Close(fail) || len(failed) != 2 {
		t.Fatal("a second Close failed entries again")
	}
	if tb.Put(102, "e") || tb.Len() != 0 {
		t.Fatal("Put registered an entry in a closed table")
	}
}

// TestCallsDeliver: a reply reaches the call of its tid once, on its
// session when that is asked for; a call whose session resets, or whose
// table closes, sees its Reply closed; a closed table starts no call.
func TestCallsDeliver(t *testing.T) {
	var cs Calls
	other := new(msgr.Conn) // identity only: a session the replies do not come on
	reply := func(tid uint64) *msgr.Message {
		m := msgr.NewMessage(1, nil, nil)
		m.SetTid(tid)
		return m
	}
	onNil, onOther := cs.Start(1, nil), cs.Start(2, other)
	if cs.Deliver(reply(2), true) || len(onOther.Reply) != 0 {
		t.Fatal("a reply on another session reached the call")
	}
	if !cs.Deliver(reply(2), false) || len(onOther.Reply) != 1 {
		t.Fatal("a reply did not reach its call")
	}
	if !cs.Deliver(reply(1), true) || cs.Deliver(reply(1), true) || len(onNil.Reply) != 1 {
		t.Fatal("a call got other than one reply")
	}
	(<-onNil.Reply).Release()
	(<-onOther.Reply).Release()

	tid, c := cs.Add(other)
	cs.HandleEvent(msgr.Event{Kind: msgr.EventConnect, Conn: other})
	if cs.Len() != 1 {
		t.Fatal("a connect failed a call")
	}
	cs.HandleEvent(msgr.Event{Kind: msgr.EventReset, Conn: other})
	if _, ok := <-c.Reply; ok || cs.Len() != 0 {
		t.Fatal("a reset left its call waiting")
	}
	cs.End(tid)
	last := cs.Start(3, nil)
	if !cs.Close() || cs.Start(4, nil) != nil {
		t.Fatal("a closed table started a call")
	}
	if _, ok := <-last.Reply; ok {
		t.Fatal("Close left a call waiting")
	}
}

// BenchmarkDeliver: handing a reply to its call allocates nothing; it
// runs on the SDK's link reader for every op.
func BenchmarkDeliver(b *testing.B) {
	var cs Calls
	m := msgr.NewMessage(1, nil, nil)
	m.SetTid(1)
	c := cs.Start(1, nil)
	b.ReportAllocs()
	for b.Loop() {
		cs.t.Put(1, c)
		cs.Deliver(m, false)
		<-c.Reply
	}
}
