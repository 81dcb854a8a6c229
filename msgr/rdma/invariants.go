//go:build rdma

package rdma

import (
	"fmt"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// recvLedger counts, in the invariants build, what a link's own receive
// queue took and gave, so that every grant it sends can be checked
// against the receives posted for it (checkGrant).
type recvLedger struct {
	posted    atomic.Int64 // receives ever posted: the first ones, then every repost
	handshake atomic.Int64 // handshake frames received: before the session's credits
	control   atomic.Int64 // link-only frames received: on the ctlRecv receives
}

// ledgerPost records a receive posted.
func (l *link) ledgerPost() {
	if invariants.Enabled {
		l.ledger.posted.Add(1)
	}
}

// ledgerRead records a frame read that no session credit paid for. A
// control frame is recorded once it was posted again (link.control), so
// the ledger never shows fewer receives than there are.
func (l *link) ledgerRead(t wire.Tag) {
	if !invariants.Enabled {
		return
	}
	switch {
	case t.Handshake():
		l.ledger.handshake.Add(1)
	case t.LinkOnly():
		l.ledger.control.Add(1)
	}
}

// checkGrant panics if the grant in p lets the peer send a frame for
// which no receive was posted: on verbs a receiver-not-ready error. The
// grant counts the session's frames on this link; the receives that can
// take them are those ever posted, but for the ctlRecv ones kept for
// control frames, and for those handshake frames used. A link on the
// shared pool (srx.go) has no receives of its own to count: the pool
// grows to cover every link's window instead.
func (l *link) checkGrant(p *wire.Preamble) {
	if !invariants.Enabled || l.srx || p.Tag.Handshake() || p.Tag.LinkOnly() {
		return
	}
	avail := l.ledger.posted.Load() - int64(l.ctlRecv) - l.ledger.handshake.Load() - l.ledger.control.Load()
	// Grants travel mod 2^32 (creditWindow.onGrant).
	if int32(uint32(avail)-p.GrantMsgs) < 0 {
		panic(fmt.Sprintf("rdma: invariant: granted the peer %d frames on link %d, but only %d receives were posted for them",
			p.GrantMsgs, l.id, avail))
	}
}
