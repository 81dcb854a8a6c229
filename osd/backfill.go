package osd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd/pg"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Writes during a backfill. A replica being backfilled walks the primary's
// objects of the PG in (bucket, key) order and copies each as it is then;
// that can take minutes, and holding the PG's RepOps until it ends stalled
// every write to the PG as long (puts to a PG fell to a fifth of their
// rate while it moved). Instead, as Ceph's backfill does with
// last_backfill, a RepOp to an object the walk has passed is applied to
// it at once, and one to an object the walk has not reached is acked
// without applying: the walk copies that object later, as it is then. A
// write the walk may have copied too early (the RepOp arrived while the
// object was in flight, or the object was created behind the walk) is
// copied again. Until the walk ends, the copy may lack acknowledged
// writes, so the store marks it backfilling and peering counts it as no
// witness of its intervals (pg.PeerInfo.Incomplete).

// backfillFetched, when set (tests, through export_test.go), runs after
// the walk fetched an object and before it installs it: the window where a
// write can overtake the copy.
var backfillFetched testHook[func(bucket, key string)]

// bfKey is an object's place in the walk's order.
type bfKey [2]string // bucket, key

func (k bfKey) le(o bfKey) bool { return k[0] < o[0] || (k[0] == o[0] && k[1] <= o[1]) }

// backfillState is what the walk (the recovery goroutine) and the RepOps
// (the PG's shard) share while a backfill runs.
type backfillState struct {
	mu sync.Mutex
	// pos: every object up to it (inclusive) is copied and kept current;
	// none before the first copy (started false).
	pos     bfKey
	started bool
	// pending are the newest versions acked, unapplied, for objects past
	// pos; copied the PG version (at the primary) the object's last copy
	// reflects. A pending write is done once copied reaches it.
	pending map[bfKey]*osdpb.Version
	copied  map[bfKey]*osdpb.Version
	// applied lists the objects RepOps changed behind pos: the walk's
	// final sweep of local leftovers must not remove them.
	applied map[bfKey]bool
	// seen has every RepOp version taken since the walk's first fetch,
	// by sequence number. The PG ends at the newest version with no
	// missing sequence number before it (contiguous): a RepOp refused
	// meanwhile (an epoch we did not have yet) left a hole the walk may
	// not cover, which the log catch-up after the walk fills. walking:
	// the first fetch is on its way; a RepOp taken before (waiting for a
	// slot or for room, which may last hours) is older than the version
	// that fetch answers with, which end starts from, so it is not kept.
	seen    map[uint64]*osdpb.Version
	walking bool
	// done: the walk has settled every pending write; RepOps from here on
	// wait for the end of the recovery, in order, as before.
	done bool
}

func newBackfillState() *backfillState {
	return &backfillState{pending: map[bfKey]*osdpb.Version{}, copied: map[bfKey]*osdpb.Version{}, applied: map[bfKey]bool{},
		seen: map[uint64]*osdpb.Version{}}
}

func (bf *backfillState) reached(k bfKey) bool { return bf.started && k.le(bf.pos) }

func (bf *backfillState) noteSeen(v *osdpb.Version) {
	if bf.walking {
		bf.seen[v.GetSeq()] = v
	}
}

// end is the version the walk brings the copy to: from first (the
// primary's version when the walk began, which every copy reflects), on
// through the RepOps taken during the walk while their sequence numbers
// have no hole. Under bf.mu, after settle(nil).
func (bf *backfillState) end(first *osdpb.Version) *osdpb.Version {
	last := first
	for {
		v := bf.seen[last.GetSeq()+1]
		if v == nil {
			return last
		}
		last = v
	}
}

// backfillRepOp takes a RepOp of a PG being backfilled, on the PG's shard:
// applied to an object the walk has passed, acked unapplied for one it has
// not reached. False when the op is not for it (no walk under way, or a
// sync, or the walk is settling): the caller queues it as before.
func (o *OSD) backfillRepOp(p *pgState, m *msgr.Message, r *osdpb.RepOp) bool {
	bf := p.bf.Load()
	e := r.Entry
	if bf == nil || (e.Kind != osdpb.OpKind_OP_PUT && e.Kind != osdpb.OpKind_OP_DELETE) || e.Version == nil {
		return false
	}
	k := bfKey{e.Bucket, e.Key}
	bf.mu.Lock()
	if bf.done {
		bf.mu.Unlock()
		return false
	}
	bf.noteSeen(e.Version)
	if !bf.reached(k) {
		if pv := bf.pending[k]; pv == nil || versionLE(pv, e.Version) {
			bf.pending[k] = e.Version
		}
		bf.mu.Unlock()
		// Acked unapplied: the walk copies the object when it gets
		// there, with this write in it. We answer with the PG version
		// we had before the backfill, so the primary still counts us
		// behind (backfilling) until it ends.
		o.ackRepOp(m, r, p.last, nil)
		return true
	}
	bf.applied[k] = true
	bf.mu.Unlock()
	// Behind the walk nothing else writes this object: apply it outside
	// the lock (the walk goes on meanwhile).
	if err := o.st.InstallObject(o.ctx, p.sid, e, m.Data); err != nil {
		// Its bucket record may not be here yet (the meta PG recovers on
		// its own). Copy it again instead, as a write ahead of the walk:
		// the walk settles every pending object before it ends.
		o.log.Debug("backfill: a write behind the walk failed; copying the object again", "pg", placement.PGIDOf(p.sid), "key", k, "err", err)
		bf.mu.Lock()
		delete(bf.applied, k)
		if pv := bf.pending[k]; pv == nil || versionLE(pv, e.Version) {
			bf.pending[k] = e.Version
		}
		bf.mu.Unlock()
	}
	o.ackRepOp(m, r, p.last, nil)
	return true
}

// settle moves the walk's position to upTo: it first copies again every
// object up to there with a write pending that its copy may lack, until
// none is left, so that no acked write is behind the position unapplied.
// upTo nil settles everything (the walk ended) and marks bf done. It
// returns the keys it copied.
func (o *OSD) settle(ctx context.Context, p *pgState, from uint32, bf *backfillState, upTo *bfKey) ([]bfKey, error) {
	var copied []bfKey
	for round := 0; ; round++ {
		if round == 12 {
			// The source does not have writes we acked: it is no longer
			// the primary. The recovery fails; the new primary's sync
			// starts another.
			return copied, fmt.Errorf("backfill of pg %s: osd.%d does not have the writes acked meanwhile (no longer the primary?)", placement.PGIDOf(p.sid), from)
		}
		if round > 1 {
			// A primary sends a write to its replicas while it applies
			// it: the copy fetched just after our ack may predate it by
			// the primary's own commit. Give that time (about 6 s in
			// all) before deciding the source is not the primary.
			t := time.NewTimer(min(10*time.Millisecond<<(round-2), time.Second))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return copied, ctx.Err()
			}
		}
		bf.mu.Lock()
		var todo []bfKey
		for k, pv := range bf.pending {
			if upTo != nil && !k.le(*upTo) {
				continue
			}
			if c := bf.copied[k]; c == nil || !versionLE(pv, c) {
				todo = append(todo, k)
			} else {
				delete(bf.pending, k)
			}
		}
		if len(todo) == 0 {
			if upTo == nil {
				bf.done = true
			} else {
				bf.pos, bf.started = *upTo, true
			}
			bf.mu.Unlock()
			return copied, nil
		}
		bf.mu.Unlock()
		for _, k := range todo {
			f, release, err := o.fetch(ctx, p, from, &osdpb.PGBackfill{AfterBucket: k[0], AfterKey: k[1], Exact: true})
			if err != nil {
				return copied, err
			}
			err = o.install(ctx, p, from, f.Entry, f.data)
			release()
			if err != nil {
				return copied, err
			}
			bf.mu.Lock()
			bf.copied[k] = f.Last
			bf.mu.Unlock()
			copied = append(copied, k)
		}
	}
}

// startBackfill publishes bf on p's shard, so that it is atomic with the
// PG's RepOps: the machine hears of the backfill, and the RepOps that
// queued before it (while the log pull found the log too short) go
// through backfillRepOp in their order, instead of waiting for the whole
// walk. Those it does not take (syncs) stay queued. False when the OSD is
// closing.
func (o *OSD) startBackfill(ctx context.Context, p *pgState, bf *backfillState) bool {
	done := make(chan struct{})
	if !o.enqueue(o.shardOf(p.sid), func() {
		defer close(done)
		if ctx.Err() != nil {
			return // the backfill gave up waiting for us
		}
		if p.m != nil {
			p.m.Step(pg.BackfillStarted{})
		}
		p.bf.Store(bf)
		queued := p.queued
		p.queued = nil
		for _, q := range queued {
			if !o.backfillRepOp(p, q.m, q.op) {
				p.queued = append(p.queued, q)
			}
		}
	}) {
		return false
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
