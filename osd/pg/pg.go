// Package pg is the peering and state machine of one placement group on one
// OSD: it decides whom to ask before a PG may serve, whose log is
// authoritative, when the PG is down, and which replicas need recovery. It
// does not move a byte itself.
//
// The machine is pure, in the style of etcd-io/raft's RawNode. Everything
// it learns comes in through [PG.Step] as an [Event] (a new map epoch, a
// peer's answer, a failed request, a finished recovery, a local write);
// everything it wants done comes out of [PG.Ready] (queries to send, a log
// to pull, replicas to push to, the state to report). It must never do I/O,
// start a goroutine, set a timer or read the clock: time reaches it only as
// events (a timed-out request is an [Unreachable]; a new map is an
// [AdvanceMap]), so a test drives it step by step and a simulation can
// replay any history from a seed.
//
// # What it guarantees, and why
//
// No acknowledged write is lost, and no two OSDs serve one PG as primary in
// one epoch. A write is acknowledged only when every member of the acting
// set has applied it, so each write lives on all members of the interval
// (run of epochs with one acting set) it was written in. Before a new
// primary serves it hears from at least one member of every earlier
// interval that may have taken writes ("maybe went rw": it had MinSize
// members), back to the last epoch the PG was known active with a complete
// log. A member answers a query only once it has the querying map
// ([PG.AnswerQuery] refuses a future epoch), and from then on it refuses
// RepOps from the old interval ([PG.AcceptRepOp]), so what it answers
// already holds every write its interval will ever acknowledge. The answer
// with the highest Last therefore holds every acknowledged write; the
// primary pulls it ([Recover]) before it serves. When every member of such
// an interval is unreachable, the PG is down: it waits rather than serve a
// log that may be missing acknowledged writes.
//
// A PG whose map keeps an old acting set while its up set fills (a
// pg_temp entry: AdvanceMap.Up) has members being filled beside the acting
// set. They take every write, so an acknowledged write is on them too once
// their walk is done: from then on they witness the interval as acting
// members do (mid-walk they answer Incomplete and witness nothing), and
// peering waits for them as for those. They do not count toward MinSize,
// nor do acting members being backfilled (Backfilling): the PG serves
// only while MinSize members hold a whole copy.
//
// The machine serves only in the interval of its current map where it is
// the primary, and stops at the first map where it is not; every OSD
// derives the same intervals from the same maps, so one epoch has one
// primary.
//
// What it cannot do without a clock: an old primary cut off from the new
// map still reports Serving for its own, older epoch. It cannot get a write
// acknowledged (its replicas have moved on and refuse its RepOps), but its
// reads go stale. Bounding that window is the daemon's: stop serving reads
// when the replicas stop answering heartbeats, and report a previous
// primary Unreachable only after that grace (Ceph's read lease).
//
// # Driving it
//
// The daemon owns one *PG per placement group it holds, on the goroutine
// (shard) that runs the PG's ops:
//
//  1. New with the persisted PeerInfo, then Step(AdvanceMap) for every map
//     epoch from Local.LastEpochStarted (or from the pool's creation epoch
//     when it is zero: a new OSD must learn who held the PG before it) to
//     the newest, in order; then each new epoch as it comes.
//  2. After each Step (or a batch of them), Ready: send the queries, start
//     the pull and the pushes, persist LastEpochStarted when set, publish
//     State and Serving. Ready drains what it returns.
//  3. Feed back the outcome of each request: Info or Unreachable for a
//     query (at once for an OSD the map marks down), Recovered or
//     Unreachable for the pull, PeerRecovered or Unreachable for a push,
//     Unreachable for a RepOp that failed; Applied for every change of the
//     local log, on the primary and on replicas alike.
//  4. On the cluster messenger, answer peers' queries with AnswerQuery and
//     gate RepOps and pushes with AcceptRepOp, on the PG's shard, so that a
//     RepOp accepted before an answer is applied before it. A replica acks
//     a RepOp only if its log then holds it (one that pulled a newer log
//     past it must not). Before a client op, check CanServe; stamp writes
//     with NextVersion.
package pg

import (
	"fmt"
	"slices"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
)

// OSDID names an OSD in the cluster map.
type OSDID uint32

// Epoch is a cluster map epoch.
type Epoch uint64

// Version orders a PG's writes: the map epoch the primary wrote it in, then
// a sequence number that never goes back. One epoch has one primary, so a
// version names one write cluster-wide.
type Version struct {
	Epoch Epoch
	Seq   uint64
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	if v.Epoch != w.Epoch {
		return v.Epoch < w.Epoch
	}
	return v.Seq < w.Seq
}

// LE reports whether v is not newer than w.
func (v Version) LE(w Version) bool { return !w.Less(v) }

// String formats v as Ceph prints an eversion: epoch'seq.
func (v Version) String() string { return fmt.Sprintf("%d'%d", v.Epoch, v.Seq) }

// ID names a placement group: its pool and its seed (the PG number within
// the pool).
type ID struct{ Pool, Seed uint32 }

// String formats id as Ceph does, pool.seedhex ("1.1f"), as placement
// names every PG: "meta" for the PG of bucket records.
func (id ID) String() string { return placement.PGID{Pool: id.Pool, Seed: id.Seed}.String() }

// PeerInfo is what one OSD knows of its copy of a PG: what the daemon
// persists with the PG and what a peer answers a query with.
type PeerInfo struct {
	// Last is the newest version in the local log.
	Last Version
	// LogTail is the oldest version the log still holds; a peer behind it
	// cannot be caught up from the log and needs a backfill.
	LogTail Version
	// LastEpochStarted is the first epoch of the newest interval in which
	// this copy is known to hold the whole log the PG went active with.
	// Intervals before it need not be asked about again.
	LastEpochStarted Epoch
	// Incomplete: a backfill of this copy is under way. A replica being
	// backfilled acknowledges writes to objects its walk has not reached
	// (it copies them later), so it holds neither its interval's writes
	// nor a log to trust: it witnesses no interval and is never the
	// authoritative copy (Ceph's last_backfill short of the end).
	Incomplete bool
	// Born is the epoch the OSD's store was made (a new OSD, or a replaced
	// disk under its old id; 0: unknown, taken as always there). The copy
	// witnesses no interval that began before it, whatever the map its
	// reader holds says (AdvanceMap.GivenUp says the same, once the map
	// reaches the epoch).
	Born Epoch
}

// Config is the starting point of a PG's machine.
type Config struct {
	// Self is the OSD this machine runs on.
	Self OSDID
	// ID is the placement group.
	ID ID
	// Local is the persisted info of the local copy: zero for a PG this
	// OSD never held.
	Local PeerInfo
}

// Query asks OSD To for its PeerInfo (AnswerQuery on its side). The
// outcome goes back to Step as Info or Unreachable with the same Epoch.
type Query struct {
	To    OSDID
	Epoch Epoch
}

// Recover asks the daemon to pull, from OSD From, the entries (or, when
// the peer's log no longer reaches back to Have, all objects) it lacks to
// bring the local log from Have to Want; local entries the peer's log does
// not have were never acknowledged and are dropped. Report the end with
// Recovered, a failure with Unreachable{From, Epoch}.
type Recover struct {
	From       OSDID
	Epoch      Epoch
	Have, Want Version
}

// PushTarget asks the daemon to bring replica To from Have up to Want: send
// it a sync RepOp stamped with Epoch (it checks AcceptRepOp) and let it
// pull what it lacks. Have is the version the replica answered with; zero
// when it did not answer or answered mid-backfill (its Last then vouches
// for nothing), and the replica may hold entries after the point
// where it diverged from our log (writes never acknowledged), which it
// must drop. Report the end with PeerRecovered, a failure with
// Unreachable{To, Epoch}: the push is tried again at the next map epoch.
type PushTarget struct {
	To         OSDID
	Epoch      Epoch
	Have, Want Version
}

// Ready is what the machine wants done since the previous call to
// [PG.Ready].
type Ready struct {
	// Queries to send, one per peer.
	Queries []Query
	// Recover, when not nil, is a pull to start; at most one is
	// outstanding, and a new one replaces the previous one.
	Recover *Recover
	// Push lists replicas to bring up to date.
	Push []PushTarget
	// Notify lists the replicas that were caught up when the PG went
	// active (Have == Want): send each a sync RepOp marked activated, so
	// that it witnesses the interval (pg.Activated raises its
	// LastEpochStarted). Nothing is reported back: one lost costs only
	// that the replica witnesses the interval after its next write.
	Notify []PushTarget
	// LastEpochStarted is non-zero when it rose since the previous Ready:
	// persist it with the PG info. Losing it in a crash is safe (peering
	// then asks about more intervals than it needs to).
	LastEpochStarted Epoch
	// State and Serving are the machine's state now.
	State   State
	Serving bool
}

// PG is the machine of one placement group on one OSD. It is not safe for
// concurrent use: the daemon drives it from the PG's shard.
type PG struct {
	self  OSDID
	id    ID
	local PeerInfo

	epoch      Epoch // newest map seen; 0 before the first AdvanceMap
	firstEpoch Epoch // the first map this machine was given
	cur        interval
	past       []interval // closed intervals, oldest first

	// The primary's peering state, reset on every interval change.
	phase      phase
	peers      map[OSDID]*peer
	recovering *Recover // the outstanding pull, in phaseRecover
	authLast   Version  // the authoritative Last, once chosen
	blocked    []OSDID  // in phaseDown: whose answer would unblock us

	// givenUp is the newest map's AdvanceMap.GivenUp.
	givenUp func(id OSDID, first Epoch) bool

	// activation is, at a replica, the log end the current interval's
	// active primary pushed (Activated): reaching it raises the local
	// LastEpochStarted. Zero first: none.
	activation struct {
		first Epoch // the interval it was pushed in
		want  Version
	}

	out outbox
}

// outbox collects the Ready fields between two calls to Ready.
type outbox struct {
	queries  []Query
	recover  *Recover
	push     []PushTarget
	notify   []PushTarget
	les      bool  // LastEpochStarted rose
	state    State // as the previous Ready reported it
	serving  bool
	reported bool // a Ready was taken at all
}

// New returns the machine of PG cfg.ID on OSD cfg.Self. It knows no map
// yet: it neither serves nor answers queries until the first AdvanceMap.
func New(cfg Config) *PG {
	return &PG{self: cfg.Self, id: cfg.ID, local: cfg.Local}
}

// Step feeds the machine one event. It returns an error only when the
// event breaks the driving contract (a map epoch skipped, an invalid map);
// the event is then ignored. Stale events (an old epoch, an answer to a
// request that is no longer outstanding) are ignored without an error:
// they are normal on a network.
func (p *PG) Step(ev Event) error {
	switch ev := ev.(type) {
	case AdvanceMap:
		return p.advanceMap(ev)
	case Info:
		p.onInfo(ev)
	case Unreachable:
		p.onUnreachable(ev)
	case Recovered:
		p.onRecovered(ev)
	case PeerRecovered:
		p.onPeerRecovered(ev)
	case Applied:
		p.onApplied(ev)
	case Activated:
		p.onActivated(ev)
	case BackfillStarted:
		p.local.Incomplete = true
	case RetryPushes:
		if p.isPrimary() && p.phase == phaseActive {
			p.repush()
		}
	case LogTrimmed:
		if p.local.LogTail.Less(ev.Tail) {
			p.local.LogTail = ev.Tail
		}
	default:
		return fmt.Errorf("pg %s: %w: %T", p.id, ErrInvalidEvent, ev)
	}
	return nil
}

// HasReady reports whether Ready has something new: work to hand out, or a
// state or serving change since the previous Ready.
func (p *PG) HasReady() bool {
	o := &p.out
	return len(o.queries) > 0 || o.recover != nil || len(o.push) > 0 || len(o.notify) > 0 || o.les ||
		!o.reported || o.state != p.State() || o.serving != p.Serving()
}

// Ready returns what the machine wants done and forgets it: each query,
// pull and push is handed out once. A request that fails comes back as
// Unreachable, and the machine decides whether to ask again.
func (p *PG) Ready() Ready {
	rd := Ready{
		Queries: p.out.queries,
		Push:    p.out.push,
		Notify:  p.out.notify,
		State:   p.State(),
		Serving: p.Serving(),
	}
	if r := p.out.recover; r != nil {
		rd.Recover = new(*r)
	}
	if p.out.les {
		rd.LastEpochStarted = p.local.LastEpochStarted
	}
	p.out = outbox{state: rd.State, serving: rd.Serving, reported: true}
	return rd
}

// ID returns the placement group the machine runs.
func (p *PG) ID() ID { return p.id }

// Epoch returns the newest map epoch the machine was given (0: none).
func (p *PG) Epoch() Epoch { return p.epoch }

// IntervalStart returns the first epoch of the current interval.
func (p *PG) IntervalStart() Epoch { return p.cur.first }

// Acting returns the acting set of the current map, primary first.
func (p *PG) Acting() []OSDID { return slices.Clone(p.cur.acting) }

// Filling returns the members of the current map's up set outside its
// acting set (a pg_temp entry is in force), which the primary fills.
func (p *PG) Filling() []OSDID { return slices.Clone(p.cur.fill) }

// UpFilled reports, on the active primary of a remapped PG (its acting set
// is a pg_temp entry), that every member of its up set, which is no
// smaller than the acting set, holds a whole copy at our Last: the up set
// can take over as the acting set, and the daemon asks the mon to drop the
// entry.
func (p *PG) UpFilled() bool {
	// An up set smaller than the acting set (its members went down) would
	// serve with fewer members than the entry keeps: wait until placement
	// replaces them.
	if !p.isPrimary() || p.phase != phaseActive || p.cur.up == nil || len(p.cur.up) < len(p.cur.acting) {
		return false
	}
	for _, id := range p.cur.up {
		if id == p.self {
			continue
		}
		// Activation pushed to every member not at our Last; a push
		// ends only with the member caught up, and a RepOp it missed
		// since fails its push.
		if pr := p.peers[id]; pr == nil || pr.push != pushNone || pr.backfill {
			return false
		}
	}
	return true
}

// Primary returns the primary of the current map; false when the acting
// set is empty or no map is known.
func (p *PG) Primary() (OSDID, bool) { return p.cur.primary() }

// Role returns this OSD's part in the PG in the current map.
func (p *PG) Role() Role {
	switch {
	case p.epoch == 0:
		return RoleUnknown
	case p.isPrimary():
		return RolePrimary
	case p.cur.member(p.self):
		return RoleReplica // acting, or being filled
	}
	return RoleStray
}

// Local returns the info of the local copy, as a peer's query is answered
// and as the daemon persists it.
func (p *PG) Local() PeerInfo { return p.local }

// LastEpochStarted returns the local LastEpochStarted.
func (p *PG) LastEpochStarted() Epoch { return p.local.LastEpochStarted }

// Recovering returns the outstanding pull, if any. A pull that finishes
// after it stopped being outstanding (the interval changed) must not be
// installed: the daemon cancels it, or discards its result.
func (p *PG) Recovering() (Recover, bool) {
	if p.recovering == nil {
		return Recover{}, false
	}
	return *p.recovering, true
}

// Blocked lists, while the PG is down, the OSDs whose answer would let
// peering go on (Ceph's blocked_by): bringing one of them back unblocks
// the PG.
func (p *PG) Blocked() []OSDID { return slices.Clone(p.blocked) }

// Serving reports whether client ops may run here now: this OSD is the
// primary of the current interval, the PG went active, its log is at least
// the authoritative one, and MinSize members hold a whole copy (a member
// being backfilled does not count: Backfilling).
func (p *PG) Serving() bool {
	return p.isPrimary() && p.phase == phaseActive &&
		p.complete() >= p.cur.minSize && p.authLast.LE(p.local.Last) && !p.aheadOfMap()
}

// aheadOfMap reports whether the local log holds a write of an epoch after
// the machine's map: a pull brought entries a later interval wrote (its
// source had moved on). A later interval went active, so this primary's
// map is stale; its next write's version would not follow its log.
func (p *PG) aheadOfMap() bool { return p.local.Last.Epoch > p.epoch }

// CanServe returns nil when Serving, else why not: an error wrapping
// ErrNotPrimary, ErrPeering, ErrDown, ErrIncomplete or ErrBelowMinSize.
// Each is retriable by the client after a new map.
func (p *PG) CanServe() error {
	why := p.refusal()
	if why == nil {
		return nil
	}
	if why == ErrBelowMinSize {
		// Say why: members missing, or members still being filled.
		detail := fmt.Sprintf("%d of min_size %d members up", len(p.cur.acting), p.cur.minSize)
		if bf := p.Backfilling(); len(bf) > 0 {
			detail = fmt.Sprintf("%d of min_size %d members hold a whole copy, %s being backfilled", p.complete(), p.cur.minSize, ops.OSDList(bf))
		}
		return fmt.Errorf("pg %s on osd.%d at epoch %d: %w: %s (%s)", p.id, p.self, p.epoch, why, detail, p.State())
	}
	return fmt.Errorf("pg %s on osd.%d at epoch %d: %w (%s)", p.id, p.self, p.epoch, why, p.State())
}

// ServesReads reports whether the PG serves reads: when Serving, and
// while active below min_size. Unlike CanServe it formats nothing: a
// replica asks for every RepOp it takes.
func (p *PG) ServesReads() bool {
	why := p.refusal()
	return why == nil || why == ErrBelowMinSize
}

// refusal is CanServe's sentinel, nil when Serving.
func (p *PG) refusal() error {
	switch {
	case p.Serving():
		return nil
	case !p.isPrimary():
		return ErrNotPrimary
	case p.phase == phaseDown:
		return ErrDown
	case p.phase == phaseIncomplete:
		return ErrIncomplete
	case p.phase == phaseActive && p.complete() < p.cur.minSize && !p.aheadOfMap():
		return ErrBelowMinSize
	}
	return ErrPeering
}

// NextVersion returns the version the primary gives its next write: the
// current epoch, and the sequence after the local Last.
// REQUIRES: Serving.
func (p *PG) NextVersion() Version {
	return Version{Epoch: p.epoch, Seq: p.local.Last.Seq + 1}
}

// AcceptRepOp decides whether this replica takes a RepOp (or a push) that
// OSD from stamped with epoch. It accepts only the primary of the current
// interval, and only within the interval: once a replica has moved on, it
// must never apply a write of an older interval, because a new primary may
// already have counted its answer as the last word on that interval. The
// error is a *RefusedError; on ErrFutureEpoch the daemon fetches the newer
// map, steps it, and asks again.
func (p *PG) AcceptRepOp(from OSDID, epoch Epoch) error {
	if err := p.checkSender(from, epoch); err != nil {
		return err
	}
	if !p.cur.member(p.self) || p.isPrimary() {
		return p.refuse(from, epoch, ErrNotReplica)
	}
	return nil
}

// AnswerQuery returns the local info for a query OSD from sent at epoch.
// Only the primary of the current interval is answered, and only once this
// OSD has the querying map (ErrFutureEpoch: fetch it, step it, ask again):
// from then on AcceptRepOp refuses the old interval, so the answer covers
// every write the old interval can still acknowledge. Strays answer too:
// they are how the primary reaches earlier intervals.
func (p *PG) AnswerQuery(from OSDID, epoch Epoch) (PeerInfo, error) {
	if err := p.checkSender(from, epoch); err != nil {
		return PeerInfo{}, err
	}
	return p.local, nil
}

func (p *PG) checkSender(from OSDID, epoch Epoch) error {
	switch primary, ok := p.cur.primary(); {
	case epoch > p.epoch || p.epoch == 0:
		return p.refuse(from, epoch, ErrFutureEpoch)
	case epoch < p.cur.first:
		return p.refuse(from, epoch, ErrStaleEpoch)
	case !ok || primary != from:
		return p.refuse(from, epoch, ErrNotPrimary)
	}
	return nil
}

func (p *PG) refuse(from OSDID, epoch Epoch, why error) error {
	return &RefusedError{PG: p.id, From: from, Epoch: epoch, Known: p.epoch, Reason: why}
}

func (p *PG) isPrimary() bool {
	primary, ok := p.cur.primary()
	return ok && primary == p.self
}
