package osd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/pg"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Every OSD holds every bucket record (the meta PG's acting set is every
// up and in OSD) and checks an object op's bucket locally. A copy can be
// behind, though: an OSD that comes back into the acting sets with a new
// map may lead a PG before the meta PG's primary has caught its copy up on
// the buckets created while it was out. Its "no such bucket" then means
// "not heard of yet", and answering NoSuchBucket would end a client's
// retries for a bucket that exists. So a missing bucket is the op's answer
// only while this OSD's copy is known to be current (bucketsCurrent);
// otherwise the meta PG's primary, which serves only once peered, says
// whether the bucket exists: if it does, the op gets SERVICE_UNAVAILABLE,
// which the client retries until the catch-up lands.

// askMetaTimeout bounds the question to the meta PG's primary.
const askMetaTimeout = queryTimeout

// bucketAnswer hands answer err, the outcome of an op on bucket, once it
// can: at once, unless err says the bucket is missing and this OSD cannot
// vouch for that (see above); then from a goroutine, after asking the meta
// PG's primary.
func (o *OSD) bucketAnswer(bucket string, err error, answer func(error)) {
	if err == nil || bucket == ops.MultipartBucket || !errors.Is(opError(err), ops.ErrNoSuchBucket) {
		answer(err) // every OSD makes the multipart bucket for itself at start
		return
	}
	if hook := bucketAnswering.Load(); hook != nil {
		hook(o.id, bucket)
	}
	mp := o.Map()
	if o.bucketsCurrent(mp) {
		// Current now, but the op may have looked before a catch-up (or a
		// create) put the bucket here: then it is retried, not refused.
		if _, herr := o.st.HeadBucket(o.ctx, bucket); herr == nil {
			answer(ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "bucket %s arrived at osd.%d while the op ran", bucket, o.id))
			return
		}
		answer(err)
		return
	}
	primary, ok := mp.Primary(metaPool(mp), placement.MetaPG)
	if !ok || primary == o.id {
		// Our own copy is the one being caught up: nobody else can tell.
		answer(ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is catching up on the bucket records (epoch %d)", o.id, mp.Epoch()))
		return
	}
	o.wg.Go(func() { answer(o.askMetaPrimary(mp, primary, bucket, err)) })
}

// bucketAnswering, when set (tests, through export_test.go), runs on OSD
// osd when an op on bucket found it missing, before bucketAnswer decides
// the answer: a test creates the bucket there.
var bucketAnswering testHook[func(osd uint32, bucket string)]

// askMetaPrimary asks OSD primary, the meta PG's primary under mp, whether
// bucket exists, and returns the answer to an op that found it missing
// here (notFound, its error).
func (o *OSD) askMetaPrimary(mp *placement.Map, primary uint32, bucket string, notFound error) error {
	ctx, cancel := context.WithTimeout(o.ctx, askMetaTimeout)
	defer cancel()
	_, err := o.headMetaBucket(ctx, mp, primary, bucket)
	switch {
	case err == nil:
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "bucket %s exists; osd.%d is catching up on the bucket records", bucket, o.id)
	case errors.Is(err, ops.ErrNoSuchBucket):
		return notFound
	}
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is catching up on the bucket records, and the meta PG's primary osd.%d did not say whether bucket %s exists: %v",
		o.id, primary, bucket, err)
}

// headMetaBucket asks OSD primary, the meta PG's primary under mp, for
// bucket's record: it answers only once it has peered the meta PG, so its
// answer (ErrNoSuchBucket included) holds every bucket write acknowledged.
func (o *OSD) headMetaBucket(ctx context.Context, mp *placement.Map, primary uint32, bucket string) (*osdpb.BucketInfo, error) {
	var rep osdpb.BucketReply
	err := o.call(ctx, primary, osdpb.MsgType_MSG_HEAD_BUCKET,
		&osdpb.BucketRequest{Header: &osdpb.Header{Epoch: mp.Epoch(), Pool: metaPool(mp), Pg: placement.MetaPG}, Bucket: bucket}, &rep, nil)
	if err == nil {
		err = ops.FromReply(rep.Header)
	}
	if err == nil && rep.Info == nil {
		err = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d sent no record of bucket %s", primary, bucket)
	}
	return rep.Info, err
}

// metaBucket returns bucket's record as the meta PG's primary has it,
// asking it over the cluster network unless it is us: ErrNoSuchBucket
// when the bucket does not exist, a retriable error when nobody can tell
// yet (the primary has not peered the meta PG).
func (o *OSD) metaBucket(ctx context.Context, bucket string) (*osdpb.BucketInfo, error) {
	mp := o.Map()
	primary, ok := mp.Primary(metaPool(mp), placement.MetaPG)
	if !ok {
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "the meta PG has no primary (epoch %d)", mp.Epoch())
	}
	if primary != o.id {
		return o.headMetaBucket(ctx, mp, primary, bucket)
	}
	if err := o.peeringErr(placement.MetaPG); err != nil {
		return nil, err
	}
	return o.st.HeadBucket(ctx, bucket)
}

// bucketVouched reports whether this OSD may write an object of bucket on
// its own word: while its copy of the bucket records is current (and
// always for the multipart bucket, which every OSD makes for itself).
// Otherwise that copy may still hold a bucket deleted while we were out,
// and the write would store an object in a bucket that is gone:
// vouchedWrite asks the meta PG's primary first (a round trip per write until our
// copy is current: the primary's sync after each new map makes that
// brief).
func (o *OSD) bucketVouched(mp *placement.Map, bucket string) bool {
	return bucket == ops.MultipartBucket || o.bucketsCurrent(mp)
}

// vouchedWrite runs write, an op on bucket in store PG sid, once this OSD
// may write to bucket: at once while it vouches for the bucket itself
// (bucketVouched), else once the meta PG's primary has said that the
// bucket exists; refuse gets NoSuchBucket when it does not, or a
// retriable error when nobody can tell yet (we are that primary, still
// catching up). Either way the PG's writes reach its shard in the order
// they arrived: a write that arrives behind one still waiting for its
// answer waits too, so two puts to one key from one client, sent back to
// back, apply in the order sent.
//
// Callers run the write themselves when writeNow allows, which costs the
// common case no closure and no lock.
func (o *OSD) vouchedWrite(mp *placement.Map, sid uint32, bucket string, refuse func(error), write func()) {
	vouched := o.bucketVouched(mp, bucket)
	w := &lineWrite{ready: vouched, write: write, refuse: refuse}
	o.lines.join(sid, w)
	if vouched {
		o.lines.drain(sid)
		return
	}
	o.wg.Go(func() {
		ctx, cancel := context.WithTimeout(o.ctx, askMetaTimeout)
		_, err := o.metaBucket(ctx, bucket)
		cancel()
		if err = opError(err); err != nil && !errors.Is(err, ops.ErrNoSuchBucket) {
			err = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is catching up on the bucket records, and nobody vouched for bucket %s: %v", o.id, bucket, err)
		}
		if hook := vouchAnswered.Load(); hook != nil {
			hook(o.id, bucket)
		}
		o.lines.settle(sid, w, err)
	})
}

// writeNow reports whether a write on bucket may go to its PG's shard at
// once: this OSD vouches for the bucket, and no write of any PG waits in a
// line (vouchedWrite).
func (o *OSD) writeNow(mp *placement.Map, bucket string) bool {
	return o.bucketVouched(mp, bucket) && o.lines.held.Load() == 0
}

// vouchAnswered, when set (tests, through export_test.go), runs on the
// goroutine of OSD osd's vouch for bucket once the meta PG's primary
// answered, before the write takes its turn: a test holds a write there.
var vouchAnswered testHook[func(osd uint32, bucket string)]

// writeLines holds, per store PG, the writes that arrived while an
// earlier write of the PG waited for a vouch, so that they reach the
// PG's shard in arrival order (vouchedWrite).
type writeLines struct {
	// held counts the writes in lines or being handed on from them; at
	// zero a write that needs no vouch skips the lines.
	held  atomic.Int64
	mu    sync.Mutex
	lines map[uint32]*writeLine
}

type writeLine struct {
	writes   []*lineWrite
	draining bool // a goroutine is handing the line's ready writes on
}

// lineWrite is a write in a line: ready once vouched for (err nil) or
// refused (err).
type lineWrite struct {
	ready  bool
	err    error
	write  func()
	refuse func(error)
}

// join puts w at the end of sid's line.
func (ls *writeLines) join(sid uint32, w *lineWrite) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.held.Add(1)
	if ls.lines == nil {
		ls.lines = make(map[uint32]*writeLine)
	}
	l := ls.lines[sid]
	if l == nil {
		l = &writeLine{}
		ls.lines[sid] = l
	}
	l.writes = append(l.writes, w)
}

// settle marks w, in sid's line, answered with err, and hands on what
// is ready.
func (ls *writeLines) settle(sid uint32, w *lineWrite, err error) {
	ls.mu.Lock()
	w.ready, w.err = true, err
	ls.mu.Unlock()
	ls.drain(sid)
}

// drain runs, in order, the writes at the head of sid's line that are
// ready, until one is not. One goroutine drains a line at a time, outside
// the lock (a write waits for room in its shard's queue); a write made
// ready meanwhile is seen when it takes the lock again.
func (ls *writeLines) drain(sid uint32) {
	ls.mu.Lock()
	l := ls.lines[sid]
	if l == nil || l.draining {
		ls.mu.Unlock()
		return
	}
	l.draining = true
	for len(l.writes) > 0 && l.writes[0].ready {
		w := l.writes[0]
		l.writes[0] = nil
		l.writes = l.writes[1:]
		ls.mu.Unlock()
		if w.err != nil {
			w.refuse(w.err)
		} else {
			w.write()
		}
		// Only now: a write that finds none held must come after this one.
		ls.held.Add(-1)
		ls.mu.Lock()
	}
	l.draining = false
	if len(l.writes) == 0 {
		delete(ls.lines, sid)
	}
	ls.mu.Unlock()
}

// bucketsCurrent reports whether this OSD's copy of the bucket records is
// known to hold every bucket created before now: at the newest map,
// either its meta PG serves as the primary, or, a replica, it applied a
// RepOp (a bucket write, or the sync that catches a member up) from the
// primary of the current interval.
func (o *OSD) bucketsCurrent(mp *placement.Map) bool {
	o.pgMu.Lock()
	p := o.pgs[placement.MetaPG]
	o.pgMu.Unlock()
	return p != nil && p.currentAt.Load() >= mp.Epoch()
}

// noteCurrent records, on the meta PG's shard, that its replica p holds
// what its primary sent it in a RepOp stamped with epoch: a RepOp of the
// current interval comes from its primary, after that primary peered and
// pushed us its log; every bucket write the interval acknowledges comes to
// us too.
func (o *OSD) noteCurrent(p *pgState, epoch uint64) {
	if p.sid != placement.MetaPG || p.m == nil || pg.Epoch(epoch) < p.m.IntervalStart() {
		return
	}
	if p.currentIn != p.m.IntervalStart() {
		p.currentIn = p.m.IntervalStart()
		o.publish(p)
	}
}

// publishCurrent sets the meta PG's currentAt from its machine: the
// machine's epoch while the local copy is current, else 0. On p's shard.
func publishCurrent(p *pgState) {
	if p.sid != placement.MetaPG {
		return
	}
	var at uint64
	switch p.m.Role() {
	case pg.RolePrimary:
		if p.m.Serving() {
			at = uint64(p.m.Epoch())
		}
	case pg.RoleReplica:
		if p.currentIn == p.m.IntervalStart() {
			at = uint64(p.m.Epoch())
		}
	}
	p.currentAt.Store(at)
}
