package msgr

import "time"

// maxTombstones bounds the closed sessions a messenger remembers. An entry
// is a cookie, a name and a time in two maps and a queue: about 300 bytes
// with a name of the longest (128 bytes, kept alive once its Conn is
// gone), so the bound costs 1.2 MiB at most (BenchmarkTombstonesMemory).
// It is far above the lossless sessions a daemon closes deliberately
// within a StandbyTimeout (they are sessions with other daemons); past it
// the oldest go first, and their peers get what an unknown session gets
// (docs/protocol.md §11).
const maxTombstones = 4096

// tombstones remembers the lossless sessions this side closed with CLOSE
// (Conn.Close, a message the peer can never take), by this side's cookie,
// for as long as a session in standby waits for its peer (StandbyTimeout).
// A peer whose CLOSE never arrived (the link was down, or failed under it)
// dials back to resume; told "closed" instead of "no such session"
// (SESSION_RESET closed, §6.4 rule 4a), it ends its session as the CLOSE
// would have made it, instead of starting a new one here. A peer that
// comes back later than StandbyTimeout would have found no session had
// this side not closed it either: it gets what an unknown session gets.
//
// Only this side's own closes add entries, so a peer cannot grow it.
// Guarded by Messenger.mu.
type tombstones struct {
	ttl time.Duration // <0: entries expire only by count
	max int
	now func() time.Time

	byCookie map[uint64]tomb
	order    []uint64 // cookies, oldest close first: expiry and eviction take from the front
	// byPeer is the cookie of the last session closed with each peer, for
	// a new session with it (SessionRequest.closed_cookie).
	byPeer map[EntityName]uint64
}

type tomb struct {
	peer EntityName
	at   time.Time
}

func newTombstones(ttl time.Duration) *tombstones {
	return &tombstones{ttl: ttl, max: maxTombstones, now: time.Now, byCookie: map[uint64]tomb{}, byPeer: map[EntityName]uint64{}}
}

// add records that the session whose cookie (ours) is cookie, with peer,
// was closed now.
func (t *tombstones) add(cookie uint64, peer EntityName) {
	now := t.now()
	t.prune(now)
	if _, ok := t.byCookie[cookie]; ok {
		return // a cookie names one session: closed once
	}
	t.byCookie[cookie] = tomb{peer: peer, at: now}
	t.byPeer[peer] = cookie
	t.order = append(t.order, cookie)
	for len(t.order) > t.max {
		t.dropOldest()
	}
}

// closed reports whether cookie names a session this side closed with
// peer. The entry stays: an answer lost on the way brings the peer back
// with the same cookie, and it must hear the same.
func (t *tombstones) closed(cookie uint64, peer EntityName) bool {
	t.prune(t.now())
	e, ok := t.byCookie[cookie]
	return ok && e.peer == peer
}

// lastWith returns the cookie of the last session closed with peer, 0 if
// none is remembered.
func (t *tombstones) lastWith(peer EntityName) uint64 {
	t.prune(t.now())
	return t.byPeer[peer]
}

// len is the number of entries, expired ones included until the next
// add or closed.
func (t *tombstones) len() int { return len(t.byCookie) }

func (t *tombstones) prune(now time.Time) {
	if t.ttl < 0 {
		return
	}
	for len(t.order) > 0 && now.Sub(t.byCookie[t.order[0]].at) >= t.ttl {
		t.dropOldest()
	}
}

func (t *tombstones) dropOldest() {
	cookie := t.order[0]
	if peer := t.byCookie[cookie].peer; t.byPeer[peer] == cookie {
		delete(t.byPeer, peer)
	}
	delete(t.byCookie, cookie)
	t.order = t.order[1:]
}

// clear forgets every entry (the messenger is closing).
func (t *tombstones) clear() {
	clear(t.byCookie)
	clear(t.byPeer)
	t.order = nil
}
