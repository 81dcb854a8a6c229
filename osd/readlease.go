package osd

import (
	"log/slog"
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
	ps.leaseLen = lease
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
	if time.Duration(p.waitUntil.Load()) <= now {
		return 0 // the common case: no lock
	}
	ws := p.waits.Load()
	if ws == nil {
		return 0
	}
	var wait time.Duration
	o.peerMu.Lock()
	defer o.peerMu.Unlock()
	for _, w := range *ws {
		if w.until <= now {
			continue
		}
		if ps := o.peers[w.id]; ps != nil && ps.epoch >= w.epoch {
			continue // it showed us the map: it serves by it
		}
		wait = max(wait, w.until-now)
	}
	return wait
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

// leaseWaitFor is one OSD a new primary waits for (succeeded): until it
// shows us a map of epoch or newer, or until (mono), whichever is first.
type leaseWaitFor struct {
	id    uint32
	epoch uint64
	until time.Duration
}

// succeeded sets PG p's wait as its machine steps from map prev to m, if m
// made us the primary of a PG another led (see above): for every OSD not
// dead in m that may still read by an older map, as long as what we
// granted it runs (the predecessor's own lease from now, when we were not
// a member and its lease was not ours to give), unless it shows us m. The
// waits only grow: an earlier succession's stay. On p's shard.
func (o *OSD) succeeded(p *pgState, prev, m *placement.Map) {
	if prev == nil || o.lease() <= 0 {
		return
	}
	cur, old := actingOf(m, p.sid), actingOf(prev, p.sid)
	if len(cur) == 0 || cur[0] != o.id || len(old) == 0 || old[0] == o.id {
		return
	}
	now := o.mono()
	q := old[0]
	member := slices.Contains(old, o.id)
	var next []leaseWaitFor
	if ws := p.waits.Load(); ws != nil {
		for _, w := range *ws {
			if w.until > now {
				next = append(next, w)
			}
		}
	}
	add := func(id uint32, until time.Duration) {
		if until <= now {
			return
		}
		for i := range next {
			if next[i].id == id {
				next[i].epoch, next[i].until = max(next[i].epoch, m.Epoch()), max(next[i].until, until)
				return
			}
		}
		next = append(next, leaseWaitFor{id: id, epoch: m.Epoch(), until: until})
	}
	o.peerMu.Lock()
	for info := range m.OSDs() {
		ps := o.peers[info.Id]
		if info.Id == o.id || info.Dead || ps == nil && info.Id != q {
			continue
		}
		var granted, length time.Duration
		if ps != nil {
			granted, length = ps.grantedUntil, ps.leaseLen
		}
		length = max(length, o.lease())
		// What we granted before our start is gone from memory: it ran
		// a lease at most past our start.
		until := max(granted, length)
		if info.Id == q && !member {
			until = max(until, now+length)
		}
		add(info.Id, until)
	}
	o.peerMu.Unlock()
	var top time.Duration
	for _, w := range next {
		top = max(top, w.until)
	}
	p.waits.Store(&next)
	p.waitUntil.Store(int64(top))
	if wait := o.leaseWait(p); wait > 0 {
		// One line per 10 s with its count: a restart makes an OSD the
		// new primary of a PG in each of dozens.
		o.ratelog.Log(o.log, slog.LevelInfo, "lease wait", "new primary waits for its predecessors to stop serving", "pg", placement.PGIDOf(p.sid),
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
