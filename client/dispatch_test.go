package client

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
)

// TestDispatchByTid: the dispatcher hands a reply to the call waiting for
// the tid of its envelope; a reply with a tid nobody waits for (an
// attempt that gave up, a confused or hostile OSD) is released and
// changes nothing.
func TestDispatchByTid(t *testing.T) {
	c := &Client{}
	p := c.pending.Start(5, nil)
	reply := func(tid uint64) *msgr.Message {
		m := msgr.NewMessage(1, []byte("reply"), nil)
		m.SetTid(tid)
		return m
	}

	for _, tid := range []uint64{0, 4, 6, 5 | 1<<63} {
		dispatcher{c}.Dispatch(reply(tid))
		if len(p.Reply) != 0 || c.pending.Len() != 1 {
			t.Fatalf("a reply with tid %#x reached the call of tid 5 (%d pending)", tid, c.pending.Len())
		}
	}
	dispatcher{c}.Dispatch(reply(5))
	if len(p.Reply) != 1 || c.pending.Len() != 0 {
		t.Fatalf("the reply with tid 5: %d delivered, %d calls pending", len(p.Reply), c.pending.Len())
	}
	if m := <-p.Reply; m.Tid() != 5 {
		t.Fatalf("delivered the reply of tid %d", m.Tid())
	} else {
		m.Release()
	}
}

// TestDispatchOnReader: replies are handed over on the link's reader
// (msgr.FastDispatcher), not through a goroutine the Conn's queue starts
// per burst; every message type the client gets is a reply.
func TestDispatchOnReader(t *testing.T) {
	var d msgr.Dispatcher = dispatcher{}
	fd, ok := d.(msgr.FastDispatcher)
	if !ok {
		t.Fatal("the client's dispatcher is not a msgr.FastDispatcher: each reply starts a goroutine")
	}
	for _, typ := range []uint16{0, 1, 2, 100, 0xffff} {
		if !fd.CanFastDispatch(typ) {
			t.Errorf("message type %d goes through the Conn's queue", typ)
		}
	}
}
