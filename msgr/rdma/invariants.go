//go:build rdma

package rdma

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// recvLedger counts, in the invariants build, what a link's receives
// (its own, or its share of the shared pool) took and gave, so that every
// grant it sends can be checked against the receives posted for it
// (checkGrant).
type recvLedger struct {
	// free is the receives ever posted (the first ones, or the share
	// reserved in the pool, then every repost) less the frames read that
	// no session credit paid for: handshake frames, link-only frames on
	// the ctlRecv receives, and under CONTROL_SLOTS the session's control
	// frames. One counter, not one per kind, so that checkGrant reads it
	// in one load: summing separate counters while frames arrive could see
	// a control frame's count without the repost that came before it, and
	// report a receive missing that was there.
	free  atomic.Int64
	slots slotLedger // the link's own receives posted (not on the shared pool)
}

// ledgerPost records a receive posted.
func (l *link) ledgerPost() {
	if invariants.Enabled {
		l.ledger.free.Add(1)
	}
}

// ledgerRead records a frame read that no session credit paid for. A
// control frame is recorded once it was posted again (link.control), so
// the ledger never shows fewer receives than there are; a handshake frame
// when it is read, before its repost, since until then it holds a receive.
func (l *link) ledgerRead(t wire.Tag) {
	if invariants.Enabled && (t.Handshake() || t.LinkOnly()) {
		l.ledger.free.Add(-1)
	}
}

// ledgerSlotted records a session control frame read on a link that
// agreed CONTROL_SLOTS, which took one of the sessCtlRecvs receives and
// no credit. Called once its receive was posted again, as for control.
// A sealed one reads as SEALED here: the link that opens it says what it
// was (OpenedControl).
func (l *link) ledgerSlotted(t wire.Tag) {
	if invariants.Enabled && l.features&wire.FeatureControlSlots != 0 &&
		(t == wire.TagKeepalive || t == wire.TagKeepaliveAck || t == wire.TagClose) {
		l.ledger.free.Add(-1)
	}
}

// checkGrant panics if the grant in p lets the peer send a frame for
// which no receive was posted: on verbs a receiver-not-ready error. The
// grant counts the session's frames on this link; the receives that can
// take them are those posted (recvLedger.free), but for the controlRecvs ones
// kept for control frames. A link on the shared pool (srx.go) is counted
// as if the pool's receives were split among its links, each owning the
// recvs() it reserved: the pool holds at least their sum, and a buffer
// one link's frame took is that link's again once it is given back
// (srxPool.returned). So a grant within every link's share never
// promises more receives than the pool has posted.
func (l *link) checkGrant(p *wire.Preamble) {
	if !invariants.Enabled || p.Tag.Handshake() || p.Tag.LinkOnly() {
		return
	}
	avail := l.ledger.free.Load() - int64(l.controlRecvs())
	// Grants travel mod 2^32 (creditWindow.onGrant).
	if int32(uint32(avail)-p.GrantMsgs) < 0 {
		panic(fmt.Sprintf("rdma: invariant: granted the peer %d frames on link %d, but only %d receives were posted for them",
			p.GrantMsgs, l.id, avail))
	}
}

// ledgerShared records the share of the shared pool a link reserved, as
// the receives it would have posted of its own.
func (l *link) ledgerShared() {
	if invariants.Enabled {
		l.ledger.free.Add(int64(l.recvs()))
	}
}

// routed records that the pool's buffer in slot holds a frame for l.
func (s *srxPool) routed(slot uint32, l *link) {
	if invariants.Enabled {
		s.owner[slot].Store(l)
	}
}

// returned credits the link a pool buffer was routed to with a receive
// posted again, as link.repost does for a link's own.
func (s *srxPool) returned(slot uint32) {
	if invariants.Enabled {
		if l := s.owner[slot].Swap(nil); l != nil {
			l.ledgerPost()
		}
	}
}

// SealedGrant checks the grant of a frame a secure session seals for the
// link (wire.SealedLedger), which the SEALED frame that carries it does
// not show.
func (l *link) SealedGrant(p wire.Preamble) { l.checkGrant(&p) }

// OpenedControl records a frame without segments opened from a SEALED
// frame this link read (wire.SealedLedger), as frameFrom records one in
// clear: the SEALED frame's receive, posted again when its buffer was let
// go, was one of the sessCtlRecvs if the frame is a control frame under
// CONTROL_SLOTS.
func (l *link) OpenedControl(t wire.Tag) { l.ledgerSlotted(t) }

// poolCanary is written, in the invariants build, at the start of every
// page of a rendezvous region put back in the large pool, and checked
// when the region is handed out again: a write into a region while it
// sits in the pool (a transfer still in flight into a buffer already
// given back, a holder writing after its Release) shows as a changed
// canary. One word a page is cheap and still catches a transfer, which
// fills whole pages.
const poolCanary = 0x6361_6e61_7279_6f73 // any pattern a payload is unlikely to hold

// checkPool reports, for the caller to panic with once it let go of
// d.mu, that r is already in the pool (putLarge twice: a stale Release of
// its reused wrapper r.wb, or a source released twice); else it marks r
// pooled and writes the canaries.
//
// REQUIRES: r.d.mu held.
func (r *region) checkPool() (broken string) {
	if !invariants.Enabled {
		return ""
	}
	if r.pooled {
		return fmt.Sprintf("rdma: invariant: rendezvous region %p (%d bytes) put back in the pool twice", &r.mem[0], len(r.mem))
	}
	r.pooled = true
	for off := 0; off+8 <= len(r.mem); off += os.Getpagesize() {
		binary.LittleEndian.PutUint64(r.mem[off:], poolCanary)
	}
	return ""
}

// checkUnpool reports, as checkPool does, that r was written to while in
// the pool; else it marks r taken.
//
// REQUIRES: r.d.mu held.
func (r *region) checkUnpool() (broken string) {
	if !invariants.Enabled {
		return ""
	}
	if !r.pooled {
		return fmt.Sprintf("rdma: invariant: rendezvous region %p (%d bytes) taken from the pool but not marked pooled", &r.mem[0], len(r.mem))
	}
	r.pooled = false
	for off := 0; off+8 <= len(r.mem); off += os.Getpagesize() {
		if binary.LittleEndian.Uint64(r.mem[off:]) != poolCanary {
			return fmt.Sprintf("rdma: invariant: rendezvous region %p (%d bytes) written at offset %d while in the pool",
				&r.mem[0], len(r.mem), off)
		}
	}
	return ""
}

// slotLedger marks, in the invariants build, which receive buffers of a
// link or of the shared pool are posted to the provider (nil otherwise).
// A buffer is posted again from its Release, after Reset gave its wrapper
// one reference back, so a stale second Release of a frame whose buffer
// was already reposted would post it twice: two frames would land in one
// buffer, and the reader would see a frame with another's length, a
// descriptor with another's CRC, or a handshake frame twice.
type slotLedger []atomic.Bool

func newSlotLedger(n int) slotLedger {
	if !invariants.Enabled {
		return nil
	}
	return make(slotLedger, n)
}

// posting panics if slot is posted already.
func (s slotLedger) posting(owner string, slot uint32) {
	if s != nil && s[slot].Swap(true) {
		panic(fmt.Sprintf("rdma: invariant: receive buffer %d of %s posted while already posted (a frame released twice?)", slot, owner))
	}
}

// completed panics if a completion names a slot that is not posted.
func (s slotLedger) completed(owner string, slot uint32) {
	if s != nil && !s[slot].Swap(false) {
		panic(fmt.Sprintf("rdma: invariant: a receive completed in buffer %d of %s, which was not posted", slot, owner))
	}
}
