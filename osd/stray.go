package osd

import (
	"context"
	"slices"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/pg"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Stray copies. A PG that moves (an OSD marked out, one added) leaves its
// old copy on the OSD that left the acting set. As in Ceph, that copy goes
// only once the PG is active+clean without it, and only at its primary's
// say-so: every StrayInterval, an OSD asks the primary of each PG it holds
// and is not a member of (PG_STRAY), and removes its copy when the
// primary answers that the PG is active, clean (every member at the
// primary's version, none backfilling or being pushed to), and holds
// every write the stray's copy has. Until then the copy stays: it may be
// the only one of some write, or a source the new primary's peering
// pulls from. Data loss is far worse than a leak, so every doubt (no
// answer, a map that disagrees, a recovery under way) keeps the copy.
//
// The removal runs one PG at a time, the next as soon as one ends, in
// pages with a pause between them
// (store.RemovePG, which also makes a crash midway safe: Start resumes
// one it finds marked), while the PG refuses RepOps, queries and recovery
// reads (pgState.removals). Its end drops the PG's state, unless the map
// made us a member again meanwhile. The empty copy left stays marked
// incomplete, so peering never takes it as a witness; a stray that
// rejoins the acting set is backfilled like a new member.

// strayQueryTimeout bounds one PG_STRAY question.
const strayQueryTimeout = 2 * time.Second

// removalPause is the pause between two pages of a removal: it keeps a
// removal's share of the disk and of the WAL's syncs small next to client
// writes (Ceph's osd_delete_sleep).
var removalPause = 10 * time.Millisecond

// strayLoop looks for stray copies every StrayInterval.
func (o *OSD) strayLoop() { o.every(o.cfg.StrayInterval, o.checkStrays) }

// checkStrays asks the primary of each PG we hold outside its acting set
// whether our copy may go, and starts the removal of the first it
// allows. Nothing while a removal runs.
func (o *OSD) checkStrays() {
	o.strayRounds.Add(1)
	if o.removingStray.Load() {
		return
	}
	// A map that has us down moved our PGs only until we are marked up
	// again (a restart: the mon's map says down until we boot): those
	// copies are about to be ours again, and removing them would cost a
	// backfill of all of them.
	if info, ok := o.Map().OSD(o.id); !ok || !info.Up {
		return
	}
	sids, err := o.st.HeldPGs(o.ctx)
	if err != nil {
		o.log.Warn("listing the pgs the store holds", "err", err)
		return
	}
	for _, sid := range sids {
		if o.ctx.Err() != nil {
			return
		}
		if o.removing(sid) {
			// A removal that failed midway: the copy is marked, and
			// unusable whatever the map says now; finish it.
			if o.removeStray(sid, 0) {
				return
			}
			continue
		}
		mp := o.Map()
		pool, pgn, primary, ok := o.strayOf(mp, sid)
		if !ok {
			continue
		}
		last, _, err := o.st.PGInfo(o.ctx, sid)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(o.ctx, strayQueryTimeout)
		var rep osdpb.PGStrayReply
		err = o.call(ctx, primary, osdpb.MsgType_MSG_PG_STRAY, &osdpb.PGStray{Epoch: mp.Epoch(), Pool: pool, Pg: pgn, Last: last}, &rep, nil)
		cancel()
		if err == nil {
			err = ops.FromReply(rep.Header)
		}
		if err != nil || !rep.Remove {
			o.log.Debug("stray pg copy kept", "pg", placement.PGIDOf(sid), "primary", primary, "err", err)
			continue
		}
		if hook := strayAllowed.Load(); hook != nil {
			hook(o.id, sid)
		}
		if o.removeStray(sid, mp.Epoch()) {
			return
		}
	}
}

// strayAllowed, when set (tests, through export_test.go), runs on OSD osd
// between its primary's "remove" for store PG sid and the removal's start.
var strayAllowed testHook[func(osd, sid uint32)]

// strayOf says whether store PG sid is a stray of ours in map mp: a PG of
// a pool of mp (not the meta PG, which every OSD holds) whose acting set
// does not have us. It returns the PG's primary.
func (o *OSD) strayOf(mp *placement.Map, sid uint32) (pool, pgn, primary uint32, ok bool) {
	pool, pgn = splitStorePG(sid)
	if pgn == placement.MetaPG {
		return 0, 0, 0, false
	}
	p, found := mp.Pool(pool)
	if !found || pgn >= p.PgCount {
		return 0, 0, 0, false // a pool deleted or shrunk: not ours to decide
	}
	acting := mp.ActingSet(pool, pgn)
	if len(acting) == 0 || mp.IsMember(pool, pgn, o.id) {
		return 0, 0, 0, false // a member, or one being filled
	}
	return pool, pgn, acting[0], true
}

// removeStray starts removing our copy of store PG sid, unless the map
// now makes us a member again or the PG is busy (a recovery, RepOps
// waiting); false when it did not start. asked is the epoch of the map we
// asked the primary with: an answer holds for that map only. Had we been a
// member since (marked in and out again), we may have taken writes the
// primary's answer knew nothing of, and they may be on no other OSD. A
// removal that failed midway (asked 0) is finished whatever the map.
func (o *OSD) removeStray(sid uint32, asked uint64) bool {
	p, err := o.pgOf(sid)
	if err != nil {
		return false
	}
	started := make(chan bool, 1)
	if !o.enqueue(o.shardOf(sid), func() {
		retry := p.removing() // a removal that failed midway
		if !retry && o.Map().Epoch() != asked {
			started <- false
			return
		}
		if _, _, _, ok := o.strayOf(o.Map(), sid); !retry && (!ok || p.recovering || p.bf.Load() != nil || len(p.queued) > 0) ||
			!o.removingStray.CompareAndSwap(false, true) {
			started <- false
			return
		}
		o.markRemoving(p)
		started <- true
		o.wg.Go(func() {
			o.runRemoval(p)
			o.removingStray.Store(false)
			// The next stray goes now, not a StrayInterval later: an
			// OSD that left hundreds of PGs frees them back to back,
			// each removal paced by itself (removalPause).
			if o.ctx.Err() == nil {
				o.checkStrays()
			}
		})
	}) {
		return false
	}
	return <-started
}

// markRemoving makes PG p refuse what its copy cannot serve until its
// removal ends. On p's shard, or before the OSD serves.
func (o *OSD) markRemoving(p *pgState) {
	if !p.removing() {
		p.removals.Add(1)
	}
	// Rebuilt from the empty copy once it is gone; nothing may count the
	// old copy meanwhile.
	p.m, p.last = nil, &osdpb.Version{}
}

// resumeRemovals finishes, one by one, the removals a stop cut short
// (Start marked their PGs), paced as any.
func (o *OSD) resumeRemovals(ps []*pgState) {
	defer o.removingStray.Store(false)
	for _, p := range ps {
		if o.ctx.Err() != nil {
			return
		}
		o.runRemoval(p)
	}
}

// runRemoval removes stray PG p's copy, then lets the PG be used again,
// or forgets it. The caller holds removingStray.
func (o *OSD) runRemoval(p *pgState) {
	id := placement.PGIDOf(p.sid)
	start := time.Now()
	n, err := o.st.RemovePG(o.ctx, p.sid, func(ctx context.Context) error {
		if hook := removalPage.Load(); hook != nil {
			if err := hook(o.id, p.sid); err != nil {
				return err
			}
		}
		if _, _, _, stray := o.strayOf(o.Map(), p.sid); !stray {
			// A member again: the PG waits for the removal to end before
			// it serves, so finish it at full speed.
			return nil
		}
		t := time.NewTimer(removalPause)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		// The PG stays refused: the store holds its removal mark, and
		// checkStrays or the next start finishes it.
		if o.ctx.Err() == nil {
			o.log.Error("removing a stray pg copy failed; it is retried", "pg", id, "objects", n, "err", err)
		}
		return
	}
	o.log.Info("removed a stray pg copy", "pg", id, "objects", n, "took", time.Since(start).Round(time.Millisecond))
	o.enqueue(o.shardOf(p.sid), func() {
		p.removals.Add(1) // p.last is already the empty copy's (markRemoving)
		if o.forgetRemoved(p) {
			return
		}
		p.peerMu.Lock()
		p.peerLast = nil
		p.peerMu.Unlock()
		o.advance(p, o.Map())
	})
}

// forgetRemoved drops the state of PG p, whose copy is gone, unless the
// map has us in its acting set again. Under mapMu, so that a map being
// installed (markPeering marks the PGs we lead) finds either this state,
// kept, or none. On p's shard.
func (o *OSD) forgetRemoved(p *pgState) bool {
	o.mapMu.Lock()
	defer o.mapMu.Unlock()
	if o.Map().IsMember(p.pool, p.pg, o.id) {
		return false
	}
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	if o.pgs[p.sid] == p {
		delete(o.pgs, p.sid)
	}
	return true
}

// removalPage, when set (tests, through export_test.go), runs after each
// page of a stray's removal on OSD osd; an error stops the removal there,
// as a crash would.
var removalPage testHook[func(osd, sid uint32) error]

// removing reports whether store PG sid's copy is being removed.
func (o *OSD) removing(sid uint32) bool {
	o.pgMu.Lock()
	p := o.pgs[sid]
	o.pgMu.Unlock()
	return p != nil && p.removing()
}

// copyRead is a peer's read of a PG's copy off the PG's shard (a log
// pull, a backfill step). A removal can start while one reads (a
// primary's "remove" and another's request cross), and a read that saw
// part of the copy gone must not be handed to a primary as if whole: the
// read takes the PG's removal count before and after (a seqlock), and
// fails, retriably, if a removal ran in between, even one that has ended
// since. The count is bumped on the PG's shard before the removal's
// first write to the store; a read that sees any of them sees the count
// moved. Its cost is what a check alone costs: pgMu and two atomic loads.
type copyRead struct {
	p  *pgState
	at uint64
}

// readCopy begins a peer's read of store PG sid's copy.
func (o *OSD) readCopy(sid uint32) (copyRead, error) {
	o.pgMu.Lock()
	p := o.pgEntry(sid)
	o.pgMu.Unlock()
	r := copyRead{p, p.removals.Load()}
	if r.at&1 != 0 {
		return r, removingError(sid)
	}
	if hook := copyReadBegun.Load(); hook != nil {
		hook(o.id, sid)
	}
	return r, nil
}

// done says whether the read saw the copy whole: an error if a removal
// began since readCopy.
func (r copyRead) done() error {
	if r.p.removals.Load() != r.at {
		return removingError(r.p.sid)
	}
	return nil
}

// copyReadBegun, when set (tests, through export_test.go), runs on OSD
// osd once a peer's read of store PG sid passed its first check.
var copyReadBegun testHook[func(osd, sid uint32)]

func removingError(sid uint32) error {
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: this OSD's copy is being removed", placement.PGIDOf(sid))
}

// answerStray answers OSD from's PG_STRAY on the PG's shard: remove only
// when we are the PG's primary in a map at least as new as the asker's,
// the asker is not in the acting set, the PG is active+clean (the
// machine's view: peered, no push under way, Size members; and every
// replica's last RepOp reply at our version), and our log is at or past
// the asker's. Anything else keeps the copy.
func (o *OSD) answerStray(q *osdpb.PGStray, sid, from uint32) (bool, error) {
	mp := o.Map()
	if q.Epoch > mp.Epoch() {
		o.learnEpoch(q.Epoch, from)
		return false, ops.Errorf(osdpb.Status_STALE_EPOCH, "pg %s: asked at epoch %d, we are at %d", pgName(q.Pool, q.Pg), q.Epoch, mp.Epoch())
	}
	p, err := o.pgOf(sid)
	if err != nil {
		return false, err
	}
	o.advance(p, mp)
	if p.m == nil || p.m.Role() != pg.RolePrimary {
		return false, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "pg %s: not its primary", pgName(q.Pool, q.Pg))
	}
	if info, ok := mp.OSD(from); !ok || !info.Up || slices.Contains(p.m.Acting(), pg.OSDID(from)) || slices.Contains(p.m.Filling(), pg.OSDID(from)) {
		return false, nil // a member, one being filled, or one about to be again
	}
	if s := p.m.State(); s&(pg.StateActive|pg.StateClean) != pg.StateActive|pg.StateClean ||
		p.peering.Load() || p.recovering || p.m.Local().Incomplete {
		return false, nil
	}
	last, _, err := o.st.PGInfo(o.ctx, sid)
	if err != nil {
		return false, err
	}
	if !versionLE(q.Last, last) {
		o.log.Warn("a stray copy is ahead of the primary; keeping it", "pg", p.m.ID(), "stray", from, "its_last", q.Last, "our_last", last)
		return false, nil
	}
	for _, id := range append(p.m.Acting()[1:], p.m.Filling()...) {
		at, known := p.peerAt(uint32(id))
		if last.GetSeq() != 0 && (!known || !versionLE(last, at)) {
			return false, nil
		}
	}
	return true, nil
}
