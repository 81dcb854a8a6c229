package msgr

// EventKind says what happened to a connection.
type EventKind uint8

const (
	// EventConnect: a session we dialed is up (again, after a reconnect).
	EventConnect EventKind = iota + 1
	// EventAccept: a peer's session is up on a link it dialed.
	EventAccept
	// EventReset: the session ended on our side: a lossy session faulted,
	// or the peer closed it (Err says which). The Conn is closed.
	EventReset
	// EventRemoteReset: the peer lost the session (it restarted); messages
	// queued for the old incarnation were dropped, and the Conn goes on
	// with a fresh session.
	EventRemoteReset
)

func (k EventKind) String() string {
	switch k {
	case EventConnect:
		return "connect"
	case EventAccept:
		return "accept"
	case EventReset:
		return "reset"
	case EventRemoteReset:
		return "remote-reset"
	}
	return "unknown"
}

// Event is a connection event.
type Event struct {
	Kind EventKind
	Conn *Conn
	Err  error
	// Dropped counts messages a reset discarded from the send queue:
	// unacknowledged. A peer's CLOSE acks every message it received, so
	// after one they were not delivered; after a fault some may have been.
	Dropped int
}

// Dispatcher receives what arrives. Calls for one Conn are never
// concurrent and come in order, so a Dispatcher sees each session's
// messages in sequence; different Conns dispatch in parallel. (They need
// not come from the same goroutine: an idle Conn keeps none.)
type Dispatcher interface {
	// Dispatch hands over a received message. The dispatcher owns it and
	// must call m.Release when done (see Message).
	Dispatch(m *Message)
	// HandleEvent reports connection events.
	HandleEvent(ev Event)
}

// FastDispatcher is a Dispatcher whose cheap, non-blocking handlers may
// run inline on the receive path, as Ceph's fast dispatch: no queue hop,
// lower latency. A fast handler must not block (no Send that could wait
// for credit on the same Conn), or it stalls the link's reader.
type FastDispatcher interface {
	Dispatcher
	CanFastDispatch(typ uint16) bool
}

// DispatchFunc adapts a function to a Dispatcher that ignores events.
type DispatchFunc func(m *Message)

func (f DispatchFunc) Dispatch(m *Message) { f(m) }
func (DispatchFunc) HandleEvent(Event)     {}

type dispatchItem struct {
	m  *Message
	ev *Event
}
