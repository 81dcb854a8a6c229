package pg

import (
	"fmt"
	"slices"
)

// interval is a run of map epochs with one acting set, primary first,
// and one up set.
type interval struct {
	first, last   Epoch // last is set when the interval closes
	acting        []OSDID
	size, minSize int
	// up is the up set when it differs from acting (a pg_temp entry:
	// remapped), else nil; fill are its members outside acting, which
	// are filled and take writes without being members.
	up, fill []OSDID
}

// member reports whether id takes the interval's writes: an acting member
// or one being filled.
func (iv *interval) member(id OSDID) bool { return iv.has(id) || slices.Contains(iv.fill, id) }

// holders are the OSDs that may hold what the interval acknowledged: its
// acting set and its members being filled. A write is acknowledged only
// once every one of them took it, and one being filled applies it once
// its walk is done (until then it answers Incomplete and witnesses
// nothing), so a filled one witnesses the interval as an acting member
// does, and peering waits for it as for one.
func (iv *interval) holders() []OSDID { return append(slices.Clip(iv.acting), iv.fill...) }

// replicas are the OSDs the primary pushes to and replicates to: the
// acting set after the primary, then the members being filled.
func (iv *interval) replicas() []OSDID {
	if len(iv.acting) == 0 {
		return nil
	}
	return append(slices.Clip(iv.acting[1:]), iv.fill...)
}

func (iv *interval) primary() (OSDID, bool) {
	if len(iv.acting) == 0 {
		return 0, false
	}
	return iv.acting[0], true
}

func (iv *interval) has(id OSDID) bool { return slices.Contains(iv.acting, id) }

// maybeRW reports whether the interval could have taken writes: only a PG
// with MinSize members serves. Intervals that could not need no witness.
func (iv *interval) maybeRW() bool { return len(iv.acting) > 0 && len(iv.acting) >= iv.minSize }

// phase is where the primary is in peering.
type phase uint8

const (
	phaseNone       phase = iota // not the primary, or no map yet
	phaseGetInfo                 // waiting for answers to the queries
	phaseDown                    // an interval has no reachable witness
	phaseIncomplete              // maps we need are missing
	phaseRecover                 // pulling the authoritative log
	phaseActive                  // peered; serving if MinSize members
)

type probe uint8

const (
	probeSent probe = iota
	probeAnswered
	probeUnreachable
)

type pushState uint8

const (
	pushNone     pushState = iota // not behind, or not a replica
	pushInFlight                  // handed out, no outcome yet
	pushFailed                    // to hand out again at the next epoch
)

// peer is what the primary knows of one other OSD in this interval.
type peer struct {
	probe probe
	info  PeerInfo // valid once answered
	push  pushState
	want  Version // what the push brings it to
	// backfill: the member holds no whole copy until a push completes
	// (it answered mid-backfill, with nothing, behind our log's tail, or
	// not at all). It takes the interval's writes, but acks those to
	// objects its walk has not reached unapplied, so it does not count
	// toward min_size (Ceph keeps backfill targets out of the acting set).
	backfill bool
}

func (p *PG) advanceMap(m AdvanceMap) error {
	if m.Epoch <= p.epoch {
		return nil
	}
	if m.Size < 1 || m.MinSize < 1 || m.MinSize > m.Size || len(m.Acting) > m.Size {
		return fmt.Errorf("pg %s: %w: epoch %d has size %d, min_size %d, acting %v", p.id, ErrInvalidEvent, m.Epoch, m.Size, m.MinSize, m.Acting)
	}
	for _, set := range [][]OSDID{m.Acting, m.Up} {
		for i, id := range set {
			if slices.Contains(set[:i], id) {
				return fmt.Errorf("pg %s: %w: epoch %d lists osd.%d twice in %v", p.id, ErrInvalidEvent, m.Epoch, id, set)
			}
		}
	}
	if len(m.Up) > m.Size {
		return fmt.Errorf("pg %s: %w: epoch %d has size %d, up %v", p.id, ErrInvalidEvent, m.Epoch, m.Size, m.Up)
	}
	var up, fill []OSDID
	if m.Up != nil && !slices.Equal(m.Up, m.Acting) {
		up = slices.Clone(m.Up)
		for _, id := range m.Up {
			if !slices.Contains(m.Acting, id) {
				fill = append(fill, id)
			}
		}
	}
	if p.epoch != 0 && m.Epoch != p.epoch+1 {
		return fmt.Errorf("pg %s: %w: epoch %d after %d", p.id, ErrMapGap, m.Epoch, p.epoch)
	}
	prev := p.epoch
	p.epoch = m.Epoch
	p.givenUp = m.GivenUp
	// A member given up for the interval (its store made new since it
	// began: a disk replaced and the OSD back before the mon marked it
	// down) ends it, as Ceph's mon marks such an OSD down before it may
	// boot: what it held of the interval so far needs a witness.
	renewed := m.GivenUp != nil && slices.ContainsFunc(m.Acting, func(id OSDID) bool { return m.GivenUp(id, p.cur.first) })
	if prev != 0 && slices.Equal(m.Acting, p.cur.acting) && slices.Equal(up, p.cur.up) && m.Size == p.cur.size && m.MinSize == p.cur.minSize && !renewed {
		p.retry()
		return nil
	}
	if prev == 0 {
		p.firstEpoch = m.Epoch
	} else {
		p.cur.last = prev
		p.past = append(p.past, p.cur)
		p.trimPast()
	}
	p.cur = interval{first: m.Epoch, acting: slices.Clone(m.Acting), size: m.Size, minSize: m.MinSize, up: up, fill: fill}
	p.phase, p.peers, p.recovering, p.authLast, p.blocked = phaseNone, nil, nil, Version{}, nil
	// Work for the old interval is no longer wanted.
	p.out.queries, p.out.recover, p.out.push = nil, nil, nil
	if p.isPrimary() {
		p.startPeering()
	}
	return nil
}

// trimPast forgets intervals that ended before the local LastEpochStarted:
// the local log holds every write they acknowledged.
func (p *PG) trimPast() {
	p.past = slices.DeleteFunc(p.past, func(iv interval) bool { return iv.last < p.local.LastEpochStarted })
}

// startPeering queries the current acting set and the prior set: the
// members of every interval since the local LastEpochStarted that may have
// gone rw.
func (p *PG) startPeering() {
	p.phase = phaseGetInfo
	p.peers = map[OSDID]*peer{}
	for _, id := range p.probeTargets(p.local.LastEpochStarted) {
		p.query(id)
	}
	p.tryPeer()
}

func (p *PG) query(id OSDID) {
	pr := p.peerOf(id)
	pr.probe = probeSent
	p.out.queries = append(p.out.queries, Query{To: id, Epoch: p.epoch})
}

func (p *PG) peerOf(id OSDID) *peer {
	pr := p.peers[id]
	if pr == nil {
		pr = &peer{probe: probeUnreachable}
		p.peers[id] = pr
	}
	return pr
}

// probeTargets lists, sorted, the OSDs peering waits for: the current
// acting set and the members being filled, and every member of the
// intervals that may have gone rw and did not end before start.
func (p *PG) probeTargets(start Epoch) []OSDID {
	var ids []OSDID
	add := func(acting []OSDID) {
		for _, id := range acting {
			if id != p.self && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	add(p.cur.holders())
	for _, iv := range p.past {
		if iv.maybeRW() && iv.last >= start {
			add(iv.holders())
		}
	}
	slices.Sort(ids)
	return ids
}

// historyStart is the epoch from which intervals must be accounted for:
// the newest LastEpochStarted among ourselves and the peers that answered.
// A copy with LastEpochStarted e holds every write acknowledged before e,
// and it is one of the candidates for the authoritative log, so earlier
// intervals need no witness (Ceph's history.last_epoch_started).
func (p *PG) historyStart() Epoch {
	var start Epoch
	if !p.local.Incomplete {
		start = p.local.LastEpochStarted
	}
	for id := range p.peers {
		if p.answered(id) {
			start = max(start, p.peers[id].info.LastEpochStarted)
		}
	}
	return start
}

// tryPeer moves the primary's peering as far as what it knows allows:
// wait for answers, then either down, incomplete, a pull, or active.
func (p *PG) tryPeer() {
	if p.phase == phaseNone || p.phase == phaseActive {
		return
	}
	start := p.historyStart()
	for _, id := range p.probeTargets(start) {
		if p.peers[id] == nil {
			p.query(id)
		}
		if p.peers[id].probe == probeSent {
			p.phase = phaseGetInfo
			return
		}
	}
	if start > 0 && start < p.firstEpoch {
		p.phase = phaseIncomplete
		return
	}
	if p.blocked = p.unwitnessed(start); len(p.blocked) > 0 {
		p.phase = phaseDown
		p.recovering = nil
		return
	}
	from, auth := p.authoritative()
	p.authLast = auth.Last
	// A copy mid-backfill pulls from a complete one even at the same Last:
	// it lacks objects its Last does not show.
	if p.local.Last.Less(auth.Last) || (p.local.Incomplete && from != p.self) {
		p.phase = phaseRecover
		if r := p.recovering; r == nil || r.From != from || r.Want != auth.Last {
			p.recovering = &Recover{From: from, Epoch: p.epoch, Have: p.local.Last, Want: auth.Last}
			p.out.recover = p.recovering
		}
		return
	}
	p.activate()
}

// unwitnessed returns, sorted, the members that peering waits for: of
// each interval since start that may have gone rw and of which no member
// answered with a complete copy (we ourselves count: our log is on hand),
// those silent and not given up. Empty means every such interval has a
// witness, or nobody left to wait for. A member the map gave up for an
// interval witnesses nothing of it even when it answers: an OSD whose
// store was made new since (a replaced disk under its old id) answers
// with a whole copy of nothing, and the interval's writes are on the
// others, if anywhere.
func (p *PG) unwitnessed(start Epoch) []OSDID {
	var blocked []OSDID
	for _, iv := range p.past {
		holders := iv.holders()
		if !iv.maybeRW() || iv.last < start || slices.ContainsFunc(holders, func(id OSDID) bool { return p.witnesses(id, iv) }) {
			continue
		}
		// No complete copy answered for it. Those that answered
		// incomplete (mid-backfill, or emptied as strays once the PG was
		// clean elsewhere) are up: waiting for them changes nothing, and
		// where the interval's writes went since, a later interval says.
		// It waits only for members that stayed silent and that the map
		// did not give up, as Ceph's PG goes down only for members down
		// and not lost.
		for _, id := range holders {
			if id != p.self && !p.heard(id) && !p.gaveUp(id, iv) && !slices.Contains(blocked, id) {
				blocked = append(blocked, id)
			}
		}
	}
	slices.Sort(blocked)
	return blocked
}

// witnesses reports whether id's copy (ours when id is self) holds
// whatever interval iv acknowledged: a whole copy, on the store that was
// there when iv began, of an OSD the map did not give up for it.
func (p *PG) witnesses(id OSDID, iv interval) bool {
	info := p.local
	if id != p.self {
		if !p.answered(id) {
			return false
		}
		info = p.peers[id].info
	}
	return !info.Incomplete && info.Born <= iv.first && !p.gaveUp(id, iv)
}

// heard reports whether id answered our query this interval, with a
// complete copy or not.
func (p *PG) heard(id OSDID) bool {
	pr := p.peers[id]
	return pr != nil && pr.probe == probeAnswered
}

// gaveUp reports whether the newest map gave up what id alone may hold of
// interval iv (AdvanceMap.GivenUp), so peering no longer waits for id
// about it.
func (p *PG) gaveUp(id OSDID, iv interval) bool {
	return p.givenUp != nil && p.givenUp(id, iv.first)
}

// answered reports whether id answered with a complete copy: one that
// can witness its intervals and be the authoritative log.
func (p *PG) answered(id OSDID) bool {
	pr := p.peers[id]
	return pr != nil && pr.probe == probeAnswered && !pr.info.Incomplete
}

// authoritative picks the copy with the highest Last; on a tie ourselves
// (nothing to pull), then the longest log (the fewest backfills), then the
// lowest id.
func (p *PG) authoritative() (OSDID, PeerInfo) {
	from, best := p.self, p.local
	ids := make([]OSDID, 0, len(p.peers))
	for id := range p.peers {
		if p.answered(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		info := p.peers[id].info
		// Our own copy, mid-backfill, is no candidate while a complete
		// one answered.
		if (i == 0 && p.local.Incomplete) || best.Last.Less(info.Last) ||
			(best.Last == info.Last && from != p.self && info.LogTail.Less(best.LogTail)) {
			from, best = id, info
		}
	}
	return from, best
}

// activate makes the primary active: it records LastEpochStarted (when the
// interval can take writes), pushes to every acting member not known to
// be at our Last, and tells the others the interval went active with it
// (Notify), as Ceph's activation does: each member then witnesses the
// interval, though it held nothing new (a pool back from size 1, whose
// one member may go next).
func (p *PG) activate() {
	p.phase, p.recovering, p.blocked = phaseActive, nil, nil
	if p.cur.maybeRW() && p.local.LastEpochStarted < p.cur.first {
		p.setLastEpochStarted(p.cur.first)
	}
	for _, id := range p.cur.replicas() {
		pr := p.peerOf(id)
		// A copy mid-backfill at our Last (an emptied stray's, back
		// beside an empty primary) is pushed too: it witnesses nothing
		// until a backfill, of nothing perhaps, completes it.
		if pr.probe == probeAnswered && pr.info.Last == p.local.Last && !pr.info.Incomplete {
			p.out.notify = append(p.out.notify, PushTarget{To: id, Epoch: p.epoch, Have: pr.info.Last, Want: p.local.Last})
			continue
		}
		p.push(id, pr, pr.vouched())
	}
}

// complete counts the acting members that hold a whole copy: ourselves,
// and each replica not being backfilled. Only these count toward min_size:
// a write acknowledged while the PG serves is on min_size whole copies, as
// Ceph's min_size promises, not on one copy and a member still filling.
func (p *PG) complete() int {
	return len(p.cur.acting) - len(p.filling())
}

// filling lists the acting members marked backfilling, in acting order.
func (p *PG) filling() []OSDID {
	var ids []OSDID
	for _, id := range p.cur.acting {
		if pr := p.peers[id]; id != p.self && pr != nil && pr.backfill {
			ids = append(ids, id)
		}
	}
	return ids
}

// Backfilling lists, sorted, the acting members the primary is filling
// from nothing (or from behind its log's tail): they do not count toward
// min_size until their push completes. Empty off the primary and before
// it went active.
func (p *PG) Backfilling() []OSDID {
	if p.phase != phaseActive {
		return nil
	}
	ids := p.filling()
	slices.Sort(ids)
	return ids
}

// vouched is where the peer's log ends as far as it vouches for it: zero
// when it did not answer, or answered mid-backfill (it may lack objects
// its Last shows).
func (pr *peer) vouched() Version {
	if pr.probe != probeAnswered || pr.info.Incomplete {
		return Version{}
	}
	return pr.info.Last
}

// push hands out a push to id from have. From nothing, or from before our
// log's tail, the member is backfilled: it counts toward nothing until a
// push ends (PeerRecovered).
func (p *PG) push(id OSDID, pr *peer, have Version) {
	pr.backfill = pr.backfill || have == (Version{}) || have.Less(p.local.LogTail)
	pr.push, pr.want = pushInFlight, p.local.Last
	p.out.push = append(p.out.push, PushTarget{To: id, Epoch: p.epoch, Have: have, Want: pr.want})
}

func (p *PG) setLastEpochStarted(e Epoch) {
	p.local.LastEpochStarted = e
	p.out.les = true
	p.trimPast()
}

// retry re-sends, at a map that keeps the interval, what failed and that
// the new map may have made possible.
func (p *PG) retry() {
	switch p.phase {
	case phaseDown:
		for _, id := range p.blocked {
			p.query(id)
		}
		p.tryPeer()
	case phaseActive:
		p.repush()
	}
}

// repush pushes again to the members whose last push failed.
func (p *PG) repush() {
	for _, id := range p.cur.replicas() {
		if pr := p.peers[id]; pr != nil && pr.push == pushFailed {
			p.push(id, pr, pr.vouched())
		}
	}
}

func (p *PG) onInfo(ev Info) {
	if !p.isPrimary() || ev.From == p.self || ev.Epoch < p.cur.first || ev.Epoch > p.epoch {
		return
	}
	pr := p.peerOf(ev.From)
	pr.probe, pr.info = probeAnswered, ev.Info
	if p.phase == phaseActive {
		if pr.push != pushNone && pr.want.LE(ev.Info.Last) {
			pr.push = pushNone
		}
		return
	}
	p.tryPeer()
}

func (p *PG) onUnreachable(ev Unreachable) {
	if !p.isPrimary() || ev.From == p.self || ev.Epoch < p.cur.first || ev.Epoch > p.epoch {
		return
	}
	if p.phase == phaseActive {
		// A replica that missed a push or a RepOp is behind by an unknown
		// amount: push to it at the next map.
		if p.cur.member(ev.From) {
			pr := p.peerOf(ev.From)
			pr.push, pr.want = pushFailed, p.local.Last
		}
		return
	}
	// A peer we cannot reach, even one that answered, cannot witness its
	// intervals: we could not get its log.
	p.peerOf(ev.From).probe = probeUnreachable
	if p.recovering != nil && p.recovering.From == ev.From {
		p.recovering = nil
	}
	p.tryPeer()
}

func (p *PG) onRecovered(ev Recovered) {
	if p.phase != phaseRecover || p.recovering == nil || p.recovering.From != ev.From {
		return
	}
	r := p.recovering
	p.recovering = nil
	if ev.Last == r.Have && ev.Last.Less(r.Want) {
		// The source had nothing past our log, short of what it said it
		// held: its store changed since it answered (a replaced disk).
		// Ask it again rather than pull from it again and again.
		p.query(ev.From)
	}
	p.setLast(ev.Last)
	p.tryPeer()
}

func (p *PG) onPeerRecovered(ev PeerRecovered) {
	if !p.isPrimary() || p.phase != phaseActive || !p.cur.member(ev.OSD) || ev.OSD == p.self {
		return
	}
	pr := p.peerOf(ev.OSD)
	pr.info.Last = ev.Last
	// A replica answers a push only once its recovery, a backfill
	// included, ended: it holds a whole copy now (a push of the rest
	// below marks it again if its log ends before our tail).
	pr.backfill = false
	switch {
	case pr.push == pushNone:
	case pr.want.LE(ev.Last):
		pr.push = pushNone
	default:
		p.push(ev.OSD, pr, ev.Last)
	}
}

func (p *PG) onApplied(ev Applied) { p.setLast(ev.Version) }

func (p *PG) onActivated(ev Activated) {
	if p.epoch == 0 || ev.Epoch < p.cur.first || ev.Epoch > p.epoch || !p.cur.has(p.self) || p.isPrimary() {
		return // a push of another interval, or not to a replica
	}
	p.activation.first, p.activation.want = p.cur.first, ev.Version
	p.checkActivation()
}

// checkActivation raises the local LastEpochStarted to the current
// interval's first epoch once a complete local log ends exactly where the
// interval's active primary pushed it to (Activated): it then holds the
// log the interval went active with. Exactly: a log that ends elsewhere
// may hold entries the primary's does not (never acknowledged), and one
// that ends later by a write of the interval raised it already (setLast).
func (p *PG) checkActivation() {
	a := p.activation
	if a.first == 0 || a.first != p.cur.first || p.local.Incomplete || p.local.Last != a.want {
		return
	}
	if p.cur.maybeRW() && p.local.LastEpochStarted < p.cur.first {
		p.setLastEpochStarted(p.cur.first)
	}
}

// setLast records the local log's new end. A copy that holds a write of
// the current interval holds the log the interval's primary went active
// with (writes apply in order, and a gap is filled from the primary first),
// so it can raise its LastEpochStarted like the primary did.
func (p *PG) setLast(v Version) {
	p.local.Last = v
	p.local.Incomplete = false // a pull or apply leaves a whole copy
	if p.epoch != 0 && v.Epoch >= p.cur.first && p.cur.has(p.self) && p.cur.maybeRW() &&
		p.local.LastEpochStarted < p.cur.first {
		p.setLastEpochStarted(p.cur.first)
	}
	p.checkActivation()
}
