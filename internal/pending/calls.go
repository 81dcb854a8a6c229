package pending

import "github.com/ospreystore/osprey/msgr"

// Call is a request waiting on a session for its reply.
type Call struct {
	Conn  *msgr.Conn
	Reply chan *msgr.Message // gets the reply; closed when the call fails
}

// Calls is the table of a requester whose requests each wait on one
// session for one reply message. The zero value is ready.
type Calls struct{ t Table[*Call] }

// Start registers a call on conn under tid, which the caller makes
// unique; nil once the table is closed. The caller Ends it.
func (t *Calls) Start(tid uint64, conn *msgr.Conn) *Call {
	c := &Call{Conn: conn, Reply: make(chan *msgr.Message, 1)}
	if !t.t.Put(tid, c) {
		return nil
	}
	return c
}

// Add registers a call on conn under a tid of the table's own, which it
// returns, as Table.Add does. The caller Ends it.
func (t *Calls) Add(conn *msgr.Conn) (uint64, *Call) {
	c := &Call{Conn: conn, Reply: make(chan *msgr.Message, 1)}
	return t.t.Add(c), c
}

// End removes the call of tid, if still there: its reply, come late,
// finds nobody waiting.
func (t *Calls) End(tid uint64) { t.t.Take(tid) }

// Len is how many calls wait.
func (t *Calls) Len() int { return t.t.Len() }

// Deliver hands m to the call waiting for its tid (on m's session too,
// with sameConn), and false, releasing m, when none waits: a reply to an
// attempt that gave up, or from a confused or hostile peer. It never
// blocks: a call gets one reply, and Reply has room for it.
func (t *Calls) Deliver(m *msgr.Message, sameConn bool) bool {
	var match func(*Call) bool
	if sameConn {
		match = func(c *Call) bool { return c.Conn == m.Conn() }
	}
	c, ok := t.t.TakeIf(m.Tid(), match)
	if !ok {
		m.Release()
		return false
	}
	c.Reply <- m
	return true
}

// FailIf fails the calls that match accepts and returns how many.
func (t *Calls) FailIf(match func(*Call) bool) int { return t.t.FailIf(match, fail) }

// FailConn fails the calls waiting on conn.
func (t *Calls) FailConn(conn *msgr.Conn) int {
	return t.FailIf(func(c *Call) bool { return c.Conn == conn })
}

// HandleEvent fails the calls waiting on a session that reset, whose
// replies will never come.
func (t *Calls) HandleEvent(ev msgr.Event) {
	if ev.Kind == msgr.EventReset || ev.Kind == msgr.EventRemoteReset {
		t.FailConn(ev.Conn)
	}
}

// Close fails every call and refuses later ones; false if it was closed
// already.
func (t *Calls) Close() bool { return t.t.Close(fail) }

func fail(c *Call) { close(c.Reply) }
