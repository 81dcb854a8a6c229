package osd

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/pg"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// The daemon is the I/O shell around each PG's peering machine (osd/pg):
// it feeds the machine every map epoch and the outcome of every request,
// and carries out what the machine's Ready asks for — queries, the pull of
// the authoritative log, pushes to replicas — and publishes whether the PG
// serves. All of it runs on the PG's shard, like the PG's ops, so a RepOp
// accepted before a query's answer is applied before it.

// queryTimeout bounds one PG query; an OSD that does not answer in time
// is Unreachable to the machine, which then decides without it (or waits,
// down, for one that can witness an interval).
const queryTimeout = 2 * time.Second

// probeInterval is how often a down PG asks the OSDs that could unblock it
// again: the machine asks only at a new map, and they may come back
// without one.
const probeInterval = time.Second

func pgVersion(v *osdpb.Version) pg.Version {
	return pg.Version{Epoch: pg.Epoch(v.GetEpoch()), Seq: v.GetSeq()}
}

func protoVersion(v pg.Version) *osdpb.Version {
	return &osdpb.Version{Epoch: uint64(v.Epoch), Seq: v.Seq}
}

// advanceOf is PG p's AdvanceMap at map m; false when its pool is not in
// m (not created yet, or deleted).
func (o *OSD) advanceOf(p *pgState, m *placement.Map) (pg.AdvanceMap, bool) {
	ev := pg.AdvanceMap{Epoch: pg.Epoch(m.Epoch())}
	var acting []uint32
	if p.pg == placement.MetaPG {
		// Every OSD that is up and in holds the meta PG; any one of them
		// may have taken bucket writes, so every interval counts.
		acting = m.ActingSet(metaPool(m), placement.MetaPG)
		ev.Size, ev.MinSize = max(len(acting), 1), 1
	} else {
		pool, ok := m.Pool(p.pool)
		if !ok {
			return ev, false
		}
		acting = m.ActingSet(p.pool, p.pg)
		ev.Size, ev.MinSize = int(pool.Size), placement.MinSize(pool)
	}
	ev.Acting = osdIDs(acting)
	if p.pg != placement.MetaPG && m.Remapped(p.pool, p.pg) {
		ev.Up = osdIDs(m.UpSet(p.pool, p.pg))
	}
	ev.GivenUp = func(id pg.OSDID, first pg.Epoch) bool { return m.GivenUp(uint32(id), uint64(first)) }
	return ev, true
}

func osdIDs(ids []uint32) []pg.OSDID {
	out := make([]pg.OSDID, len(ids))
	for i, id := range ids {
		out[i] = pg.OSDID(id)
	}
	return out
}

// advance brings PG p's machine to map mp, building it on first use from
// the persisted info and the map history, then carries out what it asks.
// On p's shard.
func (o *OSD) advance(p *pgState, mp *placement.Map) {
	if p.removing() {
		return // no machine until the copy is gone (stray.go)
	}
	if o.freshStore.Load() {
		// A new store whose boot the mon has not acknowledged: the map
		// we hold may still show us up, as primary even, with the old
		// store's born; a machine built now would take our empty copy
		// for a witness of what the old store held, and could go active
		// on it. None until the boot (Start then advances every PG).
		return
	}
	if p.m != nil && uint64(p.m.Epoch()) >= mp.Epoch() {
		o.publish(p) // a peering mark set since may be cleared
		return
	}
	start := uint64(0)
	if p.m == nil {
		les, err := o.st.PGLastEpochStarted(o.ctx, p.sid)
		if err != nil {
			o.log.Warn("pg last_epoch_started", "pg", placement.PGIDOf(p.sid), "err", err)
		}
		last, tail, err := o.st.PGInfo(o.ctx, p.sid)
		var incomplete bool
		if err == nil {
			incomplete, err = o.st.PGBackfilling(o.ctx, p.sid)
		}
		if err != nil {
			o.log.Warn("pg info", "pg", placement.PGIDOf(p.sid), "err", err)
			return
		}
		p.m = pg.New(pg.Config{Self: pg.OSDID(o.id), ID: pg.ID{Pool: p.pool, Seed: p.pg},
			Local: pg.PeerInfo{Last: pgVersion(last), LogTail: pgVersion(tail), LastEpochStarted: pg.Epoch(les), Incomplete: incomplete, Born: o.born()}})
		// From LastEpochStarted on (earlier intervals are covered by it),
		// or from the oldest map holding the pool: also for a copy
		// mid-backfill, whose LastEpochStarted peering ignores.
		if incomplete {
			les = 0
		}
		start = o.oldestWith(les, p.pool, p.pg == placement.MetaPG)
		if start == 0 || start > mp.Epoch() {
			start = mp.Epoch()
		}
	} else {
		start = uint64(p.m.Epoch()) + 1
	}
	// A missing epoch right after the machine's is one that changed
	// nothing, like one further on: the machine keeps its past intervals.
	var prev *placement.Map
	if p.m.Epoch() != 0 {
		prev, _ = o.mapAt(uint64(p.m.Epoch()))
	}
	for e := start; e <= mp.Epoch(); e++ {
		m, ok := o.mapAt(e)
		switch {
		case e == mp.Epoch():
			m, ok = mp, true
		case !ok && prev != nil:
			// An epoch nobody could give us: take it as one that changed
			// nothing for this PG. (With a mon or peers that keep their
			// maps this does not happen.)
			m, ok = prev, true
		}
		if !ok {
			continue
		}
		before := prev
		prev = m
		ev, ok := o.advanceOf(p, m)
		if !ok {
			continue
		}
		ev.Epoch = pg.Epoch(e)
		if p.m.Epoch() != 0 && ev.Epoch != p.m.Epoch()+1 {
			// A pool that disappeared and came back, or a gap before the
			// first map we hold: start a fresh machine at this epoch.
			p.m = pg.New(pg.Config{Self: pg.OSDID(o.id), ID: p.m.ID(), Local: p.m.Local()})
		}
		o.succeeded(p, before, m)
		if err := p.m.Step(ev); err != nil {
			o.log.Warn("pg machine refused a map", "pg", p.m.ID(), "epoch", e, "err", err)
		}
	}
	o.drive(p)
	o.publish(p) // a map that kept the interval changes no state, but the epoch published
}

// drive carries out what PG p's machine wants done. On p's shard.
func (o *OSD) drive(p *pgState) {
	for p.m != nil && p.m.HasReady() {
		rd := p.m.Ready()
		if rd.LastEpochStarted != 0 {
			if err := o.st.SetPGLastEpochStarted(o.ctx, p.sid, uint64(rd.LastEpochStarted)); err != nil && o.ctx.Err() == nil {
				o.log.Warn("persisting last_epoch_started", "pg", p.m.ID(), "err", err)
			}
		}
		for _, q := range rd.Queries {
			o.query(p, q.To, q.Epoch, true)
		}
		if rd.Recover != nil {
			o.log.Info("new primary is behind a peer; recovering before serving", "pg", p.m.ID(),
				"peer", rd.Recover.From, "have", rd.Recover.Have, "want", rd.Recover.Want)
			o.startRecovery(p, uint32(rd.Recover.From))
		}
		// Where each replica's log ends as of this push or notice, not
		// as its last RepOp reply said, perhaps in an earlier interval
		// (a copy removed as a stray since): pgStat counts the PG clean
		// from it.
		for _, t := range rd.Push {
			p.resetPeer(uint32(t.To), t.Have)
			o.push(p, t)
		}
		for _, t := range rd.Notify {
			p.resetPeer(uint32(t.To), t.Have)
			o.sendSyncOp(activatedSync(p, t.Epoch, t.Want), uint32(t.To)) // nothing to retry: see pg.Ready.Notify
		}
		was := pg.State(p.state.Swap(uint32(rd.State)))
		o.publish(p)
		if rd.State&pg.StateActive != 0 && was&pg.StateActive == 0 && p.m.Role() == pg.RolePrimary {
			o.redropRecent(p)
		}
		if was != rd.State {
			lvl := o.log.Debug
			if rd.State&(pg.StateDown|pg.StateIncomplete) != 0 {
				lvl = o.log.Warn
			}
			lvl("pg state", "pg", p.m.ID(), "epoch", p.m.Epoch(), "state", rd.State, "was", was, "blocked_by", p.m.Blocked())
		}
	}
}

// publish sets PG p's peering mark from its machine. Reads go on below
// min_size once peered (the survivor has every acknowledged write);
// writes ask the machine itself (canServe). A mark set for a map the
// machine has not reached yet (markPeering, before the map is installed)
// stays. On p's shard.
func (o *OSD) publish(p *pgState) {
	if p.m == nil {
		return
	}
	reads := p.m.ServesReads()
	lagging := uint64(p.m.Epoch()) < p.peeringUntil.Load()
	p.peering.Store((p.m.Role() == pg.RolePrimary && !reads) || lagging)
	var filled uint64
	if p.m.UpFilled() {
		filled = uint64(p.m.Epoch())
	}
	p.upFilledAt.Store(filled)
	publishBackfilling(p)
	publishCurrent(p)
}

// publishBackfilling stores the machine's Backfilling for the beacon,
// allocating only when it changes.
func publishBackfilling(p *pgState) {
	bf := p.m.Backfilling()
	old := p.backfilling.Load()
	if old == nil && len(bf) == 0 {
		return
	}
	if old != nil && slices.EqualFunc(*old, bf, func(a uint32, b pg.OSDID) bool { return a == uint32(b) }) {
		return
	}
	if len(bf) == 0 {
		p.backfilling.Store(nil)
		return
	}
	ids := make([]uint32, len(bf))
	for i, id := range bf {
		ids[i] = uint32(id)
	}
	p.backfilling.Store(&ids)
}

// query asks OSD to for its info of PG p, as the machine's Query of epoch
// e; the answer (or the failure) is stepped on p's shard. asked is false
// for a down PG's periodic probe, which the machine did not ask for.
func (o *OSD) query(p *pgState, to pg.OSDID, e pg.Epoch, asked bool) {
	id := uint32(to)
	step := func(ev pg.Event) {
		o.enqueue(o.shardOf(p.sid), func() {
			if p.m != nil {
				p.m.Step(ev)
				o.drive(p)
			}
		})
	}
	if info, ok := o.Map().OSD(id); asked && (!ok || !info.Up) {
		// The map says it is down: no need to wait out a timeout.
		step(pg.Unreachable{From: to, Epoch: e})
		return
	}
	o.wg.Go(func() {
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(o.ctx, queryTimeout)
			var rep osdpb.PGQueryReply
			err := o.call(ctx, id, osdpb.MsgType_MSG_PG_QUERY, &osdpb.PGQuery{Epoch: uint64(e), Pool: p.pool, Pg: p.pg}, &rep, nil)
			cancel()
			if err == nil {
				err = ops.FromReply(rep.Header)
			}
			if err == nil {
				o.sawEpoch(id, uint64(e))
				i := rep.GetInfo()
				step(pg.Info{From: to, Epoch: e, Info: pg.PeerInfo{Last: pgVersion(i.GetLast()),
					LogTail: pgVersion(i.GetLogTail()), LastEpochStarted: pg.Epoch(i.GetLastEpochStarted()), Incomplete: i.GetIncomplete(),
					Born: pg.Epoch(i.GetBorn())}})
				return
			}
			// A peer still fetching our map says so: ask again shortly,
			// rather than count it unreachable for the whole interval.
			if errors.Is(err, ops.ErrStaleEpoch) && attempt < 20 && o.ctx.Err() == nil {
				select {
				case <-o.ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			if asked {
				o.log.Debug("pg query failed", "pg", placement.PGIDOf(p.sid), "to", id, "epoch", e, "err", err)
				step(pg.Unreachable{From: to, Epoch: e})
			}
			return
		}
	})
}

// push brings replica t.To of PG p up to t.Want: a sync RepOp, which it
// answers once it has pulled what it lacks (repReply steps PeerRecovered).
// The machine pushes only while active, with the log it went active with
// or a later one: the RepOp says so (activated), and the replica raises
// its last_epoch_started once its log ends there (pg.Activated).
func (o *OSD) push(p *pgState, t pg.PushTarget) {
	if !o.sendSyncOp(activatedSync(p, t.Epoch, t.Want), uint32(t.To)) {
		p.m.Step(pg.Unreachable{From: t.To, Epoch: t.Epoch})
	}
}

// pushesTo reports whether PG p's machine is active with id among its
// members to push to: it serves, or it fills id. On p's shard.
func (p *pgState) pushesTo(id uint32) bool {
	return p.m != nil && (p.m.Serving() || slices.Contains(p.m.Backfilling(), pg.OSDID(id)))
}

// pushFailed tells PG p's machine that a push to id did not go: the
// probe loop pushes again (pg.RetryPushes). On p's shard.
func (o *OSD) pushFailed(p *pgState, id uint32) {
	p.m.Step(pg.Unreachable{From: pg.OSDID(id), Epoch: p.m.Epoch()})
	o.drive(p)
}

// activatedSync is the sync RepOp of PG p, at epoch e, of an active
// primary whose log ends at (or after the one it went active with at)
// want.
func activatedSync(p *pgState, e pg.Epoch, want pg.Version) *osdpb.RepOp {
	return &osdpb.RepOp{Epoch: uint64(e), Pool: p.pool, Pg: p.pg, Activated: true,
		Entry: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_NONE, Version: protoVersion(want)}}
}

// answerQuery answers a peer's PG query on the PG's shard: only the
// primary of the PG's current interval, and only once we have its map
// (until then STALE_EPOCH, and we fetch it).
func (o *OSD) answerQuery(q *osdpb.PGQuery, sid, from uint32) (*osdpb.PGInfo, error) {
	p, err := o.pgOf(sid)
	if err != nil {
		return nil, err
	}
	o.advance(p, o.Map())
	if p.m == nil || o.stateLate(p, osdpb.MsgType_MSG_PG_QUERY) {
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: no state yet", pgName(q.Pool, q.Pg))
	}
	info, err := p.m.AnswerQuery(pg.OSDID(from), pg.Epoch(q.Epoch))
	if err != nil {
		if errors.Is(err, pg.ErrFutureEpoch) {
			o.learnEpoch(q.Epoch, from)
		}
		return nil, refusal(err)
	}
	// The log itself, not the machine's copy of its ends: an answer is
	// what the primary trusts to pick the authoritative log.
	last, tail, err := o.st.PGInfo(o.ctx, sid)
	var incomplete bool
	if err == nil {
		incomplete, err = o.st.PGBackfilling(o.ctx, sid)
	}
	if err != nil {
		return nil, err
	}
	return &osdpb.PGInfo{Pg: q.Pg, Last: last, LogTail: tail, LastEpochStarted: uint64(info.LastEpochStarted), Incomplete: incomplete,
		Born: uint64(o.born())}, nil
}

// pgStateLate, when set (tests), runs as OSD osd takes up a peer's
// message of type t (a PG query or a RepOp) for store PG sid: true makes
// it refuse the message as before it took up the PG's map ("no state
// yet"), as an OSD of a new cluster does for a moment.
var pgStateLate testHook[func(osd, sid uint32, t osdpb.MsgType) bool]

func (o *OSD) stateLate(p *pgState, t osdpb.MsgType) bool {
	hook := pgStateLate.Load()
	return hook != nil && hook(o.id, p.sid, t)
}

// born is the epoch our store was made as our map says (OSDInfo.born).
func (o *OSD) born() pg.Epoch {
	info, _ := o.Map().OSD(o.id)
	return pg.Epoch(info.GetBorn())
}

// refusal maps a machine's refusal or CanServe error to the wire status a
// peer or client retries on.
func refusal(err error) error {
	switch {
	case errors.Is(err, pg.ErrFutureEpoch), errors.Is(err, pg.ErrStaleEpoch):
		return ops.Errorf(osdpb.Status_STALE_EPOCH, "%v", err)
	case errors.Is(err, pg.ErrNotPrimary), errors.Is(err, pg.ErrNotReplica):
		return ops.Errorf(osdpb.Status_WRONG_PRIMARY, "%v", err)
	}
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%v", err)
}

// canServe says whether the primary may run a client op on PG p at map
// mp, bringing the machine to mp first. On p's shard.
func (o *OSD) canServe(p *pgState, mp *placement.Map) error {
	o.advance(p, mp)
	if p.m == nil {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: no state yet", pgName(p.pool, p.pg))
	}
	if err := p.m.CanServe(); err != nil {
		return refusal(err)
	}
	if p.recovering {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s is recovering", p.m.ID())
	}
	return o.leaseWaitErr(p)
}

// setLast records that PG p's log now ends at v. On p's shard.
func (o *OSD) setLast(p *pgState, v *osdpb.Version) {
	p.last = v
	if p.m != nil {
		p.m.Step(pg.Applied{Version: pgVersion(v)})
	}
}

// advanceAll brings the machine of every PG we hold to map mp (and builds
// one for each PG we are a member of), each on its shard.
func (o *OSD) advanceAll(mp *placement.Map) {
	sids := map[uint32]bool{}
	o.pgMu.Lock()
	for sid, p := range o.pgs {
		if p.loaded { // every PG we touched: members, and strays that answered queries
			sids[sid] = true
		}
	}
	o.pgMu.Unlock()
	if _, ok := mp.RoleOf(metaPool(mp), placement.MetaPG, o.id); ok {
		sids[placement.MetaPG] = true
	}
	for pool := range mp.Pools() {
		for pgn := range mp.PGsOf(pool.Id, o.id) {
			sids[storePG(pool.Id, pgn)] = true
		}
		for pgn := range mp.FillingPGsOf(pool.Id, o.id) {
			sids[storePG(pool.Id, pgn)] = true
		}
	}
	for sid := range sids {
		p, err := o.pgOf(sid)
		if err != nil {
			continue
		}
		o.enqueue(o.shardOf(sid), func() { o.advance(p, mp) })
	}
}

// probeLoop asks, every probeInterval, the OSDs that block each down PG
// we lead: one that answers lets it peer. And it pushes again to the
// members of our active PGs whose push failed (degraded): a map that stays
// the same brings no retry.
func (o *OSD) probeLoop() { o.every(probeInterval, o.probe) }

func (o *OSD) probe() {
	o.pgMu.Lock()
	var todo []*pgState
	for _, p := range o.pgs {
		if pg.State(p.state.Load())&(pg.StateDown|pg.StateDegraded) != 0 {
			todo = append(todo, p)
		}
	}
	o.pgMu.Unlock()
	for _, p := range todo {
		o.enqueue(o.shardOf(p.sid), func() {
			if p.m == nil {
				return
			}
			if p.m.State()&pg.StateDown == 0 {
				p.m.Step(pg.RetryPushes{})
				o.drive(p)
				return
			}
			for _, id := range p.m.Blocked() {
				o.query(p, id, p.m.Epoch(), false)
			}
		})
	}
}

// machinePeered reports whether p's machine went active short of
// min_size members with a whole copy (StatePeered): it serves reads only.
func machinePeered(p *pgState) bool { return pg.State(p.state.Load())&pg.StatePeered != 0 }

// pgStateName is PG p's state as its machine last reported it, for the
// states the machine alone knows (peering, down, incomplete); "" when it
// is active and the beacon's own counts say the rest.
func pgStateName(p *pgState) string {
	s := pg.State(p.state.Load())
	switch {
	case s == 0:
		return "unknown"
	case s&(pg.StateDown|pg.StateIncomplete|pg.StatePeering) != 0:
		return s.String()
	}
	return ""
}
