package osd

import (
	"slices"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Read leases, as Ceph's since Octopus. A primary serves reads from its own
// copy, without its replicas; one cut off from them (and from the mon) while
// its clients still reach it would serve reads long after the mon marked it
// down and a new primary took writes: stale reads. So:
//
//   - A primary serves reads of a PG only while it holds a lease from every
//     other member of the PG's acting set. Each heartbeat reply renews the
//     replier's lease until the ping's send time plus the lease, on the
//     primary's own monotonic clock (no clocks are compared across hosts).
//     Past that the PG is "laggy" and its reads answer ServiceUnavailable,
//     which clients retry.
//   - An OSD grants leases (answers pings with no_lease unset) only to OSDs
//     up in its map whose map is as new as its own: the lease is per OSD,
//     not per PG, so one that has not seen a map that made another the
//     primary of some PG must not keep reading that PG on our word. It
//     records how long each grant runs (the ping says the lease's length).
//   - A new primary (a map made us the primary of a PG another led) serves
//     the PG's reads and writes only once its predecessor can serve no
//     more: the predecessor is dead in the map, or has shown us a map as
//     new (its pings, or its answer to our PG query), or the grants we
//     made it before we took the map ran out ("wait"). It waits out the
//     grants to every other OSD the map has down but not dead as well
//     (one of them may have led the PG an interval earlier).
//
// A restarted OSD's grants of before its restart are gone: it counts them
// as running until a lease after its start. The lease is 0.8 of the mon's
// heartbeat grace, so an old primary cut off from its peers stops reading
// before they could have it marked down; without a mon there are none
// unless Config.ReadLease asks for them.

// lease is the read lease's length now (0: none).
func (o *OSD) lease() time.Duration { return time.Duration(o.readLease.Load()) }

// setReadLease sets the lease from the mon's heartbeat grace (0: none
// said, or no mon): Config.ReadLease if set, else 0.8 of the grace, as
// Ceph's read lease ratio, else none (a static map changes only by hand).
func (o *OSD) setReadLease(monGrace time.Duration) {
	switch {
	case o.cfg.ReadLease > 0:
		o.readLease.Store(int64(o.cfg.ReadLease))
	case monGrace > 0:
		o.readLease.Store(int64(monGrace * 4 / 5))
	}
}

// mono is the OSD's monotonic clock: time since it started.
func (o *OSD) mono() time.Duration { return time.Since(o.started) }

// newPeerState is a peer first looked at now, last seen at seen. It has
// granted us no read lease yet: a primary serves reads once each of its
// PG's members answered a ping.
func (o *OSD) newPeerState(seen time.Time) *peerState {
	return &peerState{lastSeen: seen}
}

// pingStamp is what a heartbeat carries as its send time: the wall clock
// at start plus the monotonic time since, so that the echo maps back onto
// mono (noteLease) and a wall clock step changes no lease.
func (o *OSD) pingStamp() int64 { return o.started.UnixNano() + int64(o.mono()) }

// grantLease answers whether a ping from OSD id, sent at map epoch with a
// lease of leaseNanos, renews its read lease; it also notes the epoch it
// has seen. The map check and the record of the grant are one step under
// peerMu, against a map installed meanwhile (succeeded reads the record
// after the map is in place).
func (o *OSD) grantLease(id uint32, epoch uint64, leaseNanos int64) bool {
	now := o.mono()
	o.peerMu.Lock()
	defer o.peerMu.Unlock()
	ps := o.peers[id]
	if ps == nil {
		return false // sawPeer made it; only a closing OSD has none
	}
	ps.epoch = max(ps.epoch, epoch)
	mp := o.Map()
	if info, ok := mp.OSD(id); !ok || !info.Up || epoch < mp.Epoch() {
		return false
	}
	lease := time.Duration(leaseNanos)
	if lease <= 0 {
		lease = o.lease()
	}
	ps.grantedUntil = max(ps.grantedUntil, now+lease)
	return true
}

// noteLease takes a heartbeat reply from OSD id to our ping stamped stamp:
// granted, it renews id's lease until the ping's send time plus the
// lease. A stamp that is not one of ours (before our start, or in the
// future) is ignored.
func (o *OSD) noteLease(id uint32, stamp int64, granted bool) {
	sent := time.Duration(stamp - o.started.UnixNano())
	if !granted || sent < 0 || sent > o.mono() {
		return
	}
	o.peerMu.Lock()
	if ps := o.peers[id]; ps != nil {
		ps.leaseUntil = max(ps.leaseUntil, sent+o.lease())
	}
	o.peerMu.Unlock()
}

// sawEpoch notes that OSD id showed us a map of epoch e (it answered a PG
// query at e): it serves by that map or a newer one.
func (o *OSD) sawEpoch(id uint32, e uint64) {
	o.peerMu.Lock()
	if ps := o.peers[id]; ps != nil {
		ps.epoch = max(ps.epoch, e)
	}
	o.peerMu.Unlock()
}

// lapsedLease is the first member of acting (other than us) whose read
// lease ran out, and for how long; false when every one holds, or we hold
// no leases (none configured).
func (o *OSD) lapsedLease(acting []uint32) (uint32, time.Duration, bool) {
	if o.lease() <= 0 {
		return 0, 0, false
	}
	now := o.mono()
	o.peerMu.Lock()
	defer o.peerMu.Unlock()
	for _, id := range acting {
		if id == o.id {
			continue
		}
		var until time.Duration // not looked at yet: no lease
		if ps := o.peers[id]; ps != nil {
			until = ps.leaseUntil
		}
		if until <= now {
			return id, now - until, true
		}
	}
	return 0, 0, false
}

// actingOf is store PG sid's acting set in mp (the meta PG's: every OSD up
// and in), read-only (placement.Map.ActingView).
func actingOf(mp *placement.Map, sid uint32) []uint32 {
	id := placement.PGIDOf(sid)
	if sid == placement.MetaPG {
		return mp.ActingView(metaPool(mp), placement.MetaPG)
	}
	return mp.ActingView(id.Pool, id.Seed)
}

// readLeaseErr is non-nil while we may not serve reads of store PG sid as
// its primary in mp: a member's lease lapsed (laggy), or we succeeded a
// primary that may still serve (wait), or we are stopping.
func (o *OSD) readLeaseErr(p *pgState, sid uint32, mp *placement.Map) error {
	if o.noReads.Load() {
		return o.shuttingDown()
	}
	if err := o.leaseWaitErr(p); err != nil {
		return err
	}
	if id, late, ok := o.lapsedLease(actingOf(mp, sid)); ok {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s is laggy: no read lease from osd.%d (lapsed %v ago); this primary may be cut off", placement.PGIDOf(sid), id, late.Round(time.Millisecond))
	}
	return nil
}

// leaseWaitErr is non-nil while PG p's new primary (us) waits for its
// predecessors to stop serving (succeeded): reads and writes alike, since
// a write we acknowledged must not be followed by a read of the old state
// there.
func (o *OSD) leaseWaitErr(p *pgState) error {
	if p == nil {
		return nil
	}
	if wait := o.leaseWait(p); wait > 0 {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s is waiting %v for its previous primary's read lease to run out", placement.PGIDOf(p.sid), wait.Round(time.Millisecond))
	}
	return nil
}

// leaseWait is how much longer PG p waits (succeeded); 0 when it serves.
func (o *OSD) leaseWait(p *pgState) time.Duration {
	now := o.mono()
	wait := time.Duration(p.readableAt.Load()) - now
	if until := time.Duration(p.predUntil.Load()); until > now && until-now > wait {
		// The predecessor's part ends early once it showed us the map.
		o.peerMu.Lock()
		ps := o.peers[p.pred.Load()]
		shown := ps != nil && ps.epoch >= p.predEpoch.Load()
		o.peerMu.Unlock()
		if !shown {
			wait = until - now
		}
	}
	return max(wait, 0)
}

// leaseTokens are the read-lease words of PG p's state as its primary
// reports it (Ceph's): "wait" for a new primary waiting for its
// predecessor, "laggy" for a member's lease lapsed.
func (o *OSD) leaseTokens(p *pgState, mp *placement.Map) []string {
	var tokens []string
	if o.leaseWait(p) > 0 {
		tokens = append(tokens, "wait")
	}
	if _, _, ok := o.lapsedLease(actingOf(mp, p.sid)); ok {
		tokens = append(tokens, "laggy")
	}
	return tokens
}

// succeeded sets PG p's wait as its machine steps from map prev to m, if m
// made us the primary of a PG another led (see above). On p's shard.
func (o *OSD) succeeded(p *pgState, prev, m *placement.Map) {
	lease := o.lease()
	if prev == nil || lease <= 0 {
		return
	}
	cur, old := actingOf(m, p.sid), actingOf(prev, p.sid)
	if len(cur) == 0 || cur[0] != o.id || len(old) == 0 || old[0] == o.id {
		return
	}
	now := o.mono()
	// What we granted before our start is gone from memory: it ran for a
	// lease at most after our start.
	floor := lease
	q := old[0]
	o.peerMu.Lock()
	grantedTo := func(id uint32) time.Duration {
		if ps := o.peers[id]; ps != nil {
			return max(ps.grantedUntil, floor)
		}
		return floor
	}
	predUntil := time.Duration(0)
	if info, ok := m.OSD(q); !ok || !info.Dead {
		if slices.Contains(old, o.id) {
			predUntil = grantedTo(q)
		} else {
			// Its lease did not come from us: all we know is that it
			// runs a lease at most from now.
			predUntil = now + lease
		}
	}
	others := time.Duration(0)
	for info := range m.OSDs() {
		if !info.Up && !info.Dead && info.Id != q && info.Id != o.id {
			if ps := o.peers[info.Id]; ps != nil {
				others = max(others, ps.grantedUntil)
			}
		}
	}
	o.peerMu.Unlock()
	if predUntil > now {
		p.pred.Store(q)
		p.predEpoch.Store(m.Epoch())
		p.predUntil.Store(int64(predUntil))
	}
	if others > now && others > time.Duration(p.readableAt.Load()) {
		p.readableAt.Store(int64(others))
	}
	if wait := o.leaseWait(p); wait > 0 {
		o.log.Info("new primary waits for its predecessor to stop serving", "pg", placement.PGIDOf(p.sid),
			"previous", q, "epoch", m.Epoch(), "wait_at_most", wait.Round(time.Millisecond))
	}
}

// laggyPGs counts the PGs we lead in our map that hold back reads for a
// lease (Stats.LaggyPGs).
func (o *OSD) laggyPGs() int {
	mp := o.Map()
	n := 0
	count := func(sid uint32) {
		o.pgMu.Lock()
		p := o.pgs[sid]
		o.pgMu.Unlock()
		if p != nil && o.leaseWait(p) > 0 {
			n++
		} else if _, _, lapsed := o.lapsedLease(actingOf(mp, sid)); lapsed {
			n++
		}
	}
	if primary, ok := mp.Primary(metaPool(mp), placement.MetaPG); ok && primary == o.id {
		count(placement.MetaPG)
	}
	for pool := range mp.Pools() {
		for pg, role := range mp.PGsOf(pool.Id, o.id) {
			if role.IsPrimary() {
				count(storePG(pool.Id, pg))
			}
		}
	}
	return n
}
