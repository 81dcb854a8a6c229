package osd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd/pg"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// pgState is what an OSD keeps in memory about one PG. Only the PG's shard
// goroutine touches it, except while recovering, when the recovery
// goroutine owns the store side and the shard only queues.
type pgState struct {
	sid      uint32
	pool, pg uint32
	// dropsThrough is the seq of the newest entry whose replaced parts
	// this process deleted or set out to (dropReplaced, redropRecent): a
	// later activation re-drops only the entries past it.
	dropsThrough atomic.Uint64
	loaded       bool
	last         *osdpb.Version // newest applied version
	recovering   bool
	queued       []queuedRepOp // RepOps that wait for the recovery
	// recoveryFailures counts failed recoveries in a row; none starts
	// before retryAt (fullness.go).
	recoveryFailures int
	retryAt          time.Time
	retryPending     bool // a resumePull is scheduled for retryAt
	// m is the PG's peering machine (osd/pg), built on first use; the
	// shard drives it (peering.go).
	m *pg.PG
	// peering: we are (or are about to be, under a map being installed)
	// the PG's primary and its machine does not let it serve yet. Reads
	// and writes wait (SERVICE_UNAVAILABLE) until it clears; a PG that
	// went active below min_size still serves reads. Any goroutine may
	// read it; drive publishes it.
	peering atomic.Bool
	// As a new primary waiting for other OSDs to stop serving by older
	// maps (readlease.go, succeeded): waits, each until the OSD shows us
	// the new map or its time is up, and waitUntil, the latest of those
	// times (mono), which spares the read path a look while it is past.
	waits     atomic.Pointer[[]leaseWaitFor]
	waitUntil atomic.Int64
	// peeringUntil is the epoch of the newest map that marked the PG
	// peering (markPeering): the mark stays until its machine reaches it.
	peeringUntil atomic.Uint64
	// state is the machine's pg.State as its last Ready said (the beacon
	// reads it).
	state atomic.Uint32
	// upFilledAt is the machine's epoch when it last said UpFilled (the
	// PG is remapped and its up set holds it), else 0: the beacon asks
	// the mon to drop the pg_temp entry.
	upFilledAt atomic.Uint64
	// backfilling is what the machine last said of Backfilling (nil for
	// none): the acting members that hold no whole copy yet, for the
	// beacon.
	backfilling atomic.Pointer[[]uint32]
	// removals counts the starts and ends of removals of this stray's
	// copy (stray.go): odd while one runs, when the PG has no machine and
	// refuses RepOps, queries and recovery reads. A peer's read off the
	// shard compares it before and after (copyRead).
	removals atomic.Uint64
	// bf is set while a backfill of this replica's copy runs: RepOps go
	// on during it (backfill.go).
	bf atomic.Pointer[backfillState]
	// Meta PG only (buckets.go): currentIn is the first epoch of the
	// interval in which this replica applied a RepOp of its primary (the
	// shard's); currentAt is the machine's epoch while the local copy of
	// the bucket records is known to be current, else 0 (any goroutine
	// reads it; publish sets it).
	currentIn pg.Epoch
	currentAt atomic.Uint64

	// peerMu guards peerLast: where each replica said its log ends, in its
	// last RepOp reply (the cluster dispatcher's goroutine writes it, the
	// beacon reads it). A replica missing here or behind our last is
	// recovering: the PG is degraded, not clean.
	peerMu   sync.Mutex
	peerLast map[uint32]*osdpb.Version
	// inflight (under peerMu) counts, per replica, the writes sent to it
	// that it has not answered yet: a replica short of our log by no more
	// than those is not behind, they are on their way (pgStat).
	inflight map[uint32]int
}

// sending counts a write on its way to each of ids (pendingRep.acked and
// finish count it answered).
func (p *pgState) sending(ids []uint32) {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	if p.inflight == nil {
		p.inflight = map[uint32]int{}
	}
	for _, id := range ids {
		p.inflight[id]++
	}
}

// answered counts a write to id answered (acked, refused, or given up).
func (p *pgState) answered(id uint32) {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	if p.inflight[id] > 1 {
		p.inflight[id]--
	} else {
		delete(p.inflight, id)
	}
}

// inFlightTo reports whether replica id, at at, is short of last only by
// writes sent to it and not answered yet.
func (p *pgState) inFlightTo(id uint32, at, last *osdpb.Version) bool {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	n := uint64(p.inflight[id])
	return n > 0 && at.GetSeq()+n >= last.GetSeq()
}

// notePeer records that replica id's log ends at last, or further: a
// reply says its version is durable there, and the replica applies in
// order, but it syncs in batches whose acks may go out (and be read here)
// in any order, so an older reply must not move the replica back behind
// writes no longer counted in flight (pgStat would call the PG
// recovering+degraded, and sync it, while nothing is wrong). resetPeer
// sets where it is outright.
func (p *pgState) notePeer(id uint32, last *osdpb.Version) {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	if prev, ok := p.peerLast[id]; ok && versionLE(last, prev) {
		return
	}
	p.setPeerLocked(id, last)
}

// setPeerLocked records where replica id's log ends. REQUIRES: peerMu.
func (p *pgState) setPeerLocked(id uint32, last *osdpb.Version) {
	if p.peerLast == nil {
		p.peerLast = map[uint32]*osdpb.Version{}
	}
	p.peerLast[id] = last
}

// resetPeer records that replica id's log ends at have, or, zero, that we
// do not know where (pgStat: backfilling until its answer).
func (p *pgState) resetPeer(id uint32, have pg.Version) {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	if have == (pg.Version{}) {
		delete(p.peerLast, id)
		return
	}
	p.setPeerLocked(id, protoVersion(have))
}

// peerAt is where replica id's log ends, as far as we know.
func (p *pgState) peerAt(id uint32) (*osdpb.Version, bool) {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	v, ok := p.peerLast[id]
	return v, ok
}

type queuedRepOp struct {
	m    *msgr.Message
	op   *osdpb.RepOp
	from uint32 // its sender: the primary that sent it, which a gap is pulled from
}

// removing reports whether p's copy is being removed.
func (p *pgState) removing() bool { return p.removals.Load()&1 != 0 }

// pgOf returns the state of store PG sid, loading its version on first use.
func (o *OSD) pgOf(sid uint32) (*pgState, error) {
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	p := o.pgEntry(sid)
	if !p.loaded {
		last, _, err := o.st.PGInfo(o.ctx, sid)
		if err != nil {
			return nil, err
		}
		p.last, p.loaded = last, true
	}
	return p, nil
}

// pgEntry returns the state of store PG sid, made (not loaded) on first
// use. REQUIRES: o.pgMu held.
func (o *OSD) pgEntry(sid uint32) *pgState {
	p := o.pgs[sid]
	if p == nil {
		pool, pg := poolPGOf(o.Map(), sid)
		p = &pgState{sid: sid, pool: pool, pg: pg}
		o.pgs[sid] = p
	}
	return p
}

func versionLE(a, b *osdpb.Version) bool {
	if a.GetEpoch() != b.GetEpoch() {
		return a.GetEpoch() < b.GetEpoch()
	}
	return a.GetSeq() <= b.GetSeq()
}

// replyFunc builds a write's reply from its header and the entry applied
// (nil on failure).
type replyFunc func(h *osdpb.ReplyHeader, applied *osdpb.LogEntry) proto.Message

func objectReply(h *osdpb.ReplyHeader, applied *osdpb.LogEntry) proto.Message {
	return &osdpb.ObjectReply{Header: h, Meta: applied.GetMeta()}
}

// objectWrite checks a put or delete and queues it on its PG's shard;
// fill completes the log entry from the request; cond, when not nil, is
// checked on the shard (write).
func (o *OSD) objectWrite(m *msgr.Message, hdr *osdpb.Header, bucket, key string, cond *osdpb.Condition, reply replyFunc, fill func(*osdpb.LogEntry) error) {
	t, conn := osdpb.MsgType(m.Type), replyTo(m) // m is released before the reply goes
	fail := func(err error) {
		o.answerWrite(conn, t, hdr, reply, bucket, nil, err)
		m.Release()
	}
	e := &osdpb.LogEntry{Req: hdr.GetReq(), Bucket: bucket, Key: key}
	err := checkNames(bucket, key)
	if err == nil {
		err = fill(e)
	}
	if err != nil {
		fail(err)
		return
	}
	mp, pool, pg, err := o.target(hdr, bucket, key, false)
	if err != nil {
		fail(err)
		return
	}
	sid := storePG(pool.Id, pg)
	if o.writeNow(mp, bucket) {
		o.queueWrite(m, mp, sid, hdr, bucket, e, cond, reply)
		return
	}
	o.vouchedWrite(mp, sid, bucket, func(err error) {
		o.send(conn, ops.ReplyType(t), reply(o.header(hdr, err), nil), nil)
		m.Release()
	}, func() { o.queueWrite(m, mp, sid, hdr, bucket, e, cond, reply) })
}

// queueWrite runs objectWrite's entry e, an op on bucket, on its PG's
// shard.
func (o *OSD) queueWrite(m *msgr.Message, mp *placement.Map, sid uint32, hdr *osdpb.Header, bucket string, e *osdpb.LogEntry, cond *osdpb.Condition, reply replyFunc) {
	t, conn := osdpb.MsgType(m.Type), replyTo(m)
	o.onShard(m, sid, func() {
		// The body outlives m (each RepOp holds it until its replica
		// acks), so it is kept, not borrowed: an inline one is copied out
		// of the RDMA receive buffer m's release gives back to the client.
		//
		// m itself is held until the write is done, replicas included,
		// as Ceph holds a client op's osd_client_message_size_cap bytes:
		// its bytes of the public receive budget then bound the client
		// bodies this OSD holds, those its replicas have yet to read
		// among them. On RDMA they lie in registered memory, and the
		// budget, an eighth of the RDMA one (Config.ClientMessageBytes),
		// keeps room for what this OSD receives as a replica: two OSDs
		// whose client bodies took it all would each wait for the other
		// to read what it forwards, for good.
		buf, body := m.KeepData()
		o.write(mp, sid, e, body, buf, o.chunkCRCs(m), hdr.GetAttempt() > 0, cond, func(applied *osdpb.LogEntry, err error) {
			m.Release()
			o.answerWrite(conn, t, hdr, reply, bucket, applied, err)
		}, func() {})
	})
}

// answerWrite answers a write of type t on bucket: the entry applied, or
// err (through bucketAnswer: a missing bucket may be one this OSD has not
// heard of yet).
func (o *OSD) answerWrite(to dest, t osdpb.MsgType, hdr *osdpb.Header, reply replyFunc, bucket string, applied *osdpb.LogEntry, err error) {
	if err != nil {
		o.bucketAnswer(bucket, err, func(err error) { o.send(to, ops.ReplyType(t), reply(o.header(hdr, err), nil), nil) })
		return
	}
	h := o.header(hdr, nil)
	h.Version = applied.Version
	o.send(to, ops.ReplyType(t), reply(h, applied), nil)
}

// bucketWrite creates or deletes a bucket, on the meta PG's shard at its
// primary. The meta PG's acting set is every OSD that is up, so every OSD
// holds every bucket record and checks bucket existence locally.
func (o *OSD) bucketWrite(m *msgr.Message, req *osdpb.BucketRequest) {
	t, conn := osdpb.MsgType(m.Type), replyTo(m) // m is released before the reply goes
	done := func(err error) {
		o.send(conn, ops.ReplyType(t), &osdpb.BucketReply{Header: o.header(req.Header, err)}, nil)
	}
	mp, _, _, err := o.target(req.Header, req.Bucket, "", true)
	if err == nil {
		err = ops.CheckBucketName(req.Bucket)
	}
	if err != nil {
		done(err)
		m.Release()
		return
	}
	e := &osdpb.LogEntry{Req: req.Header.GetReq(), Bucket: req.Bucket}
	if t == osdpb.MsgType_MSG_CREATE_BUCKET {
		e.Kind = osdpb.OpKind_OP_CREATE_BUCKET
		e.Meta = &osdpb.ObjectMeta{MtimeUnixNano: time.Now().UnixNano()}
	} else {
		e.Kind = osdpb.OpKind_OP_DELETE_BUCKET
		lift, err := o.fencedEmpty(mp, req.Bucket)
		if err != nil && req.Header.GetAttempt() > 0 && errors.Is(opError(err), ops.ErrNoSuchBucket) {
			// A resend of a delete that went through, whose reply was
			// lost: write finds it in the log and answers as the first
			// time (and a bucket that was never there gets NoSuchBucket
			// from the store's check).
			err = nil
		}
		if err != nil {
			done(err)
			m.Release()
			return
		}
		if lift != nil {
			answer := done
			done = func(err error) {
				answer(err)
				if err == nil {
					// A failed delete may still roll forward from a
					// log that has it: its fences lift by themselves.
					lift()
				}
			}
		}
	}
	o.write(mp, placement.MetaPG, e, nil, nil, nil, req.Header.GetAttempt() > 0, nil, func(_ *osdpb.LogEntry, err error) { done(err) }, m.Release)
}

// bucketDeleteChecked, when set (tests), runs once a delete found its
// bucket empty, before the delete is written: a test puts to it there.
var bucketDeleteChecked testHook[func(bucket string)]

// fencedEmpty fences bucket (fenceBucket) and checks it is empty
// (checkBucketEmpty), for its delete to be written next: lift lowers the
// fences once that write is answered. An error lifts them itself.
func (o *OSD) fencedEmpty(mp *placement.Map, bucket string) (lift func(), err error) {
	if _, err := o.st.HeadBucket(o.ctx, bucket); err != nil {
		return nil, err
	}
	start := time.Now()
	if lift, err = o.fenceBucket(mp, bucket); err != nil {
		return nil, err
	}
	err = o.checkBucketEmpty(mp, bucket)
	if hook := bucketDeleteChecked.Load(); hook != nil && err == nil {
		hook(bucket)
	}
	switch {
	case err != nil:
	case o.Map().Epoch() != mp.Epoch():
		// An OSD that came up since has no fence.
		err = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "the map changed while bucket %s was checked for its delete", bucket)
	case time.Since(start) > fenceTTL/3:
		err = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "checking bucket %s for its delete took %v", bucket, time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		lift()
		return nil, err
	}
	return lift, nil
}

// checkBucketEmpty asks the primary of every PG (ourselves included)
// whether the PG holds an object of bucket, as a client's listing does: a
// primary that has peered holds every acknowledged write of its PG, and
// one still peering answers ServiceUnavailable. Other copies are not
// asked, since they can still show an object whose delete was
// acknowledged: a stray's copy never gets the delete, and a replica being
// backfilled acks a delete ahead of its walk unapplied while the copy it
// fetched just before shows until the walk copies the object again.
// A put that would race the check is refused: the bucket is fenced
// first (fencedEmpty), and the delete purges the bucket's objects (store:
// OP_DELETE_BUCKET) only once the check found none. Its caller has
// found the bucket here.
func (o *OSD) checkBucketEmpty(mp *placement.Map, bucket string) error {
	for pool := range mp.Pools() {
		led := map[uint32][]uint32{} // primary -> its PGs of pool
		for pg := range pool.PgCount {
			if id, ok := mp.Primary(pool.Id, pg); ok {
				led[id] = append(led[id], pg)
			}
		}
		for id, pgs := range led {
			req := &osdpb.ListObjects{Header: &osdpb.Header{Epoch: mp.Epoch(), Pool: pool.Id}, Bucket: bucket, MaxKeys: 1, Pgs: pgs}
			var rep osdpb.ListObjectsReply
			var err error
			if id == o.id {
				err = o.listLed(req, &rep)
			} else {
				ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RepTimeout)
				err = o.call(ctx, id, osdpb.MsgType_MSG_LIST_OBJECTS, req, &rep, nil)
				cancel()
				if err == nil {
					err = ops.FromReply(rep.Header)
				}
			}
			if err != nil {
				return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "checking osd.%d's pgs of pool %d for objects of %s: %v", id, pool.Id, bucket, err)
			}
			if len(rep.Objects) > 0 || len(rep.CommonPrefixes) > 0 {
				return ops.Errorf(osdpb.Status_BUCKET_NOT_EMPTY, "bucket %s is not empty", bucket)
			}
		}
	}
	return nil
}

// listLed lists, here, the PGs req names, which must be ours to lead,
// as a peer's LIST_OBJECTS would.
func (o *OSD) listLed(req *osdpb.ListObjects, rep *osdpb.ListObjectsReply) error {
	opts, err := o.listOptions(req, false)
	if err != nil {
		return err
	}
	res, err := o.st.List(o.ctx, req.Bucket, opts)
	if err != nil {
		return err
	}
	rep.Objects, rep.CommonPrefixes = res.Objects, res.CommonPrefixes
	return nil
}

// peeringErr is non-nil while store PG sid waits for its new primary to
// catch up (reads must not see its older state), or while its primary
// holds no read lease (readlease.go).
func (o *OSD) peeringErr(sid uint32) error {
	o.pgMu.Lock()
	p := o.pgs[sid]
	o.pgMu.Unlock()
	if p != nil && p.peering.Load() {
		state := pgStateName(p)
		if state == "" || state == "unknown" {
			state = "peering" // its machine is being brought to the newest map
		}
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s is %s", placement.PGIDOf(sid), state)
	}
	return o.readLeaseErr(p, sid, o.Map())
}

// metaPool is the id of the pool whose placement places the meta PG
// (placement.Map.MetaPool), 0 with none. Clients send bucket ops with it.
func metaPool(mp *placement.Map) uint32 {
	if p := mp.MetaPool(); p != nil {
		return p.Id
	}
	return 0
}

// write runs on the shard of store PG sid at its primary: a resent request
// (resend: the client's attempt > 0; a first send cannot have been applied,
// which saves a log lookup per write) is answered from the PG log once the
// replicas have it too; otherwise the
// entry gets the next version, is forwarded to the replicas and applied
// here, and done runs when our commit is synced and every replica acked
// its own (or it failed). The shard does not wait for the sync
// (whenDurable). release runs once body is no longer needed; chunks, when
// not nil, are body's chunk CRCs (chunkCRCs), valid until then. cond, when
// not nil, is checked against the object e replaces after the resend
// lookup (a resend of a conditional write that was applied answers as the
// first time, though the object is now its own) and before anything is
// written: the shard runs no other write to the PG in between.
func (o *OSD) write(mp *placement.Map, sid uint32, e *osdpb.LogEntry, body []byte, buf *wire.Buffer, chunks []uint32, resend bool, cond *osdpb.Condition,
	done func(*osdpb.LogEntry, error), release func()) {
	if buf != nil {
		callers := release
		release = func() {
			buf.Release()
			callers()
		}
	}
	p, err := o.pgOf(sid)
	if err != nil {
		release()
		done(nil, err)
		return
	}
	if cur := o.Map(); cur.Epoch() > mp.Epoch() {
		// A map came since the op was checked: write under the newest,
		// which the PG's machine is brought to, or the replicas would
		// refuse the RepOp as one of a past interval.
		mp = cur
	}
	acting := mp.ActingSet(p.pool, p.pg)
	if len(acting) == 0 || acting[0] != o.id {
		release()
		done(nil, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "osd.%d is not the primary of pg %s (epoch %d)", o.id, pgName(p.pool, p.pg), mp.Epoch()))
		return
	}
	// The members being filled (a pg_temp entry) take every write too:
	// the walk does not come back for what it passed.
	replicas := mp.Members(p.pool, p.pg)[1:]
	if pool, ok := mp.Pool(p.pool); ok && len(acting) < placement.MinSize(pool) {
		release()
		done(nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s has %d of %d members up, below min_size %d (epoch %d)",
			pgName(p.pool, p.pg), len(acting), pool.Size, placement.MinSize(pool), mp.Epoch()))
		return
	}
	if err := o.canServe(p, mp); err != nil {
		release()
		done(nil, err)
		return
	}
	if e.Req != nil && resend {
		prev, found, err := o.st.FindRequest(o.ctx, sid, e.Req)
		if err != nil {
			release()
			done(nil, err)
			return
		}
		if found {
			// A resend: make sure the replicas are at least at its
			// version before answering as the first time. The first
			// time's own sync may still be in flight (whenDurable).
			release()
			if err := o.st.SyncWAL(o.ctx); err != nil {
				done(nil, err)
				return
			}
			sync := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_NONE, Version: prev.Version}
			o.replicate(mp, p, replicas, sync, nil, nil, nil, func(err error) {
				done(prev, err)
				if err == nil {
					// The first attempt may have failed before its drop
					// (its replicas did not ack in time), or this is a
					// new primary, which never saw it: deleting a part
					// again is harmless.
					o.dropReplaced(p, prev)
				}
			})
			return
		}
	}
	if cond != nil {
		// The condition reads our copy: as a read, it needs the leases.
		if err := o.readLeaseErr(p, sid, mp); err != nil {
			release()
			done(nil, err)
			return
		}
	}
	if err := o.checkCondition(e.Bucket, e.Key, cond); err != nil {
		release()
		done(nil, err)
		return
	}
	checkOpts := store.CheckOptions{ChunkCRCs: chunks, ChunkSize: o.st.ChunkSize()}
	if adds(e) {
		sp, err := o.fullCheck(mp, p.pool, p.pg, acting)
		if err != nil {
			release()
			done(nil, err)
			return
		}
		checkOpts.Space = &sp
	}
	for _, id := range replicas {
		if o.peerDown(id) {
			release()
			done(nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: replica osd.%d is down", pgName(p.pool, p.pg), id))
			return
		}
	}
	// The replicas apply e only where our log ends now (RepOp.prior).
	prior := &osdpb.Version{Epoch: p.last.GetEpoch(), Seq: p.last.GetSeq()}
	e.Version = &osdpb.Version{Epoch: mp.Epoch(), Seq: p.last.GetSeq() + 1}
	objectOp := e.Kind == osdpb.OpKind_OP_PUT || e.Kind == osdpb.OpKind_OP_DELETE
	if objectOp {
		e.LoggedUnixNanos = time.Now().UnixNano() // redropRecent
		o.bucketGate.RLock()
	}
	// Every answer (a bad digest, no room, no bucket) comes from Check,
	// before any replica has the entry: the apply below can then fail only
	// on an I/O error.
	ck, err := o.st.Check(o.ctx, e, body, checkOpts)
	if err == nil && e.Kind == osdpb.OpKind_OP_PUT && o.fences.fenced(e.Bucket) {
		err = fenceErr(e.Bucket) // its delete is under way (bucketfence.go)
	}
	if err != nil {
		if objectOp {
			o.bucketGate.RUnlock()
		}
		release()
		done(nil, err)
		return
	}
	// The replicas are sent the entry first and apply it while we do, as
	// Ceph's primary does: a write waits for the slowest of the synced
	// commits, not for ours and then theirs. Whoever finishes last of the
	// two answers. Our apply sets e.DroppedParts (store.Options.DroppedParts)
	// before our finish, whose lock hands it to the replicas' finish when
	// that one comes last.
	var (
		mu      sync.Mutex
		pending = 2
		first   error
	)
	finish := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		pending--
		last, err := pending == 0, first
		mu.Unlock()
		if !last {
			return
		}
		if err != nil {
			done(nil, err)
			return
		}
		done(e, nil)
		o.dropReplaced(p, e)
	}
	o.replicate(mp, p, replicas, e, prior, body, buf, finish)
	applied, err := o.apply(sid, e, body, ck)
	if objectOp {
		o.bucketGate.RUnlock()
	}
	release()
	if err != nil {
		o.applyFailed(p, e, err)
		finish(err)
		return
	}
	o.setLast(p, e.Version)
	o.whenDurable(applied, func(err error) {
		if err != nil {
			o.applyFailed(p, e, err)
		}
		finish(err)
	})
	o.trimSometimes(sid, e.Version)
}

// trimSometimes trims PG sid's log to its window (store Options.LogKeep)
// every trimEvery versions, on the primary and on replicas alike: a
// replica's log grows with every RepOp as its primary's does, and a
// replica that comes to lead answers resends from it.
func (o *OSD) trimSometimes(sid uint32, v *osdpb.Version) {
	if v.GetSeq()%o.trimEvery != 0 {
		return
	}
	if err := o.st.TrimLog(o.ctx, sid); err != nil {
		o.log.Warn("trim pg log", "pg", sid, "err", err)
		return
	}
	o.noteTrim(sid)
}

// noteTrim tells PG sid's machine where its log starts now, on its shard:
// a replica behind that is backfilled, and counts toward nothing until it
// is filled (pg.LogTrimmed).
func (o *OSD) noteTrim(sid uint32) {
	_, tail, err := o.st.PGInfo(o.ctx, sid)
	if err != nil {
		return
	}
	p, err := o.pgOf(sid)
	if err != nil {
		return
	}
	o.enqueue(o.shardOf(sid), func() {
		if p.m != nil {
			p.m.Step(pg.LogTrimmed{Tail: pgVersion(tail)})
		}
	})
}

// replacedParts returns the keys of the parts of the multipart object (old,
// whose head the apply of e replaced) that e overwrote or deleted: they are
// garbage now. Every member's store asks it at its apply
// (store.Options.DroppedParts) and logs the answer in the entry. In the
// multipart bucket, only a part uploaded again replaces anything: the
// pieces of the part before that the new one does not name (a record of
// pieces deleted at completion gives its pieces to the object).
func replacedParts(e *osdpb.LogEntry, old *osdpb.ObjectMeta) []string {
	if old == nil || e.Kind != osdpb.OpKind_OP_PUT && e.Kind != osdpb.OpKind_OP_DELETE {
		return nil
	}
	if e.Bucket == ops.MultipartBucket {
		if _, _, ok := ops.ParsePartKey(e.Key); !ok || e.Kind != osdpb.OpKind_OP_PUT {
			return nil
		}
	}
	return partKeys(garbageParts(old.GetParts(), e.GetMeta().GetParts()))
}

// partKeys is the keys of parts, nil for none.
func partKeys(parts []*osdpb.PartRef) []string {
	if len(parts) == 0 {
		return nil
	}
	keys := make([]string, len(parts))
	for i, p := range parts {
		keys[i] = p.Key
	}
	return keys
}

// garbageParts is the parts of a replaced object that its replacement does
// not hold too: a part uploaded again keeps the pieces its new record
// still names, and a CompleteMultipartUpload repeated before the first
// one's removal of the upload record lands completes the same upload
// again, so the new object is made of the very parts of the old, which
// must stay.
func garbageParts(old, kept []*osdpb.PartRef) []*osdpb.PartRef {
	if len(kept) == 0 {
		return old
	}
	keep := make(map[string]bool, len(kept))
	for _, p := range kept {
		keep[p.Key] = true
	}
	var garbage []*osdpb.PartRef
	for _, p := range old {
		if !keep[p.Key] {
			garbage = append(garbage, p)
		}
	}
	return garbage
}

// dropReplaced deletes, off the shard, the parts that the applied entry e
// made garbage (e.DroppedParts), but those that the object now at e's key
// names (garbageKeys). Only deleting is unsafe: a part kept by mistake
// costs space, so a failed read of the object keeps them all.
//
// It waits the store's KeepReplacedFor first (and on, while a reader
// holds them: partholds.go), as the store keeps a plain
// object's replaced data for the reads under way (store/keep.go): a
// client reads a multipart object part by part, and a part deleted before
// its turn would fail a read that began on the old object, where S3 (and
// RGW, which collects replaced tails hours later) finishes it. A graceful
// stop ends the wait (FlushDrops); after a crash during it, the PG's next
// primary deletes them as it goes active (redropRecent).
func (o *OSD) dropReplaced(p *pgState, e *osdpb.LogEntry) {
	if len(e.DroppedParts) == 0 {
		return
	}
	p.noteDrops(e)
	o.dropWhenFree(p.pool, e, true)
}

// dropWhenFree deletes e's garbage parts off the caller's goroutine, once
// no reader holds them (waitPartHolds), after KeepReplacedFor first with
// keepFirst; counted in drops, which a graceful stop waits for.
func (o *OSD) dropWhenFree(pool uint32, e *osdpb.LogEntry, keepFirst bool) {
	o.drops.Add(1)
	o.wg.Go(func() {
		defer o.drops.Add(-1)
		if (!keepFirst || o.waitKeepReplaced()) && o.waitPartHolds(pool, e) {
			o.dropGarbage(pool, e)
		}
	})
}

// noteDrops records that this process deletes e's replaced parts.
func (p *pgState) noteDrops(e *osdpb.LogEntry) {
	seq := e.GetVersion().GetSeq()
	for cur := p.dropsThrough.Load(); seq > cur && !p.dropsThrough.CompareAndSwap(cur, seq); cur = p.dropsThrough.Load() {
	}
}

// waitKeepReplaced waits the store's KeepReplacedFor (less on a graceful
// stop: FlushDrops); false when the OSD stops meanwhile.
func (o *OSD) waitKeepReplaced() bool { return o.waitDrop(o.st.KeepReplacedFor()) }

// dropGarbage deletes the parts e made garbage but those the object now at
// e's key names, by the map of the moment.
func (o *OSD) dropGarbage(pool uint32, e *osdpb.LogEntry) {
	if h := partsDropping.Load(); h != nil && h(o.id) {
		return
	}
	cur, err := o.st.Head(o.ctx, e.Bucket, e.Key)
	if err != nil && !errors.Is(err, store.ErrNoSuchKey) && !errors.Is(err, store.ErrNoSuchBucket) {
		o.log.Warn("keeping a replaced object's parts: cannot read what replaced it", "bucket", e.Bucket, "key", e.Key, "err", err)
		return
	}
	o.dropParts(o.Map(), pool, garbageKeys(e.DroppedParts, cur))
}

// partsDropping runs as OSD osd is about to delete the parts an entry
// made garbage, after its wait; true gives the deletes up, as a crash
// during the wait would.
var partsDropping testHook[func(osd uint32) bool]

// redropWindow is how far back from the newest entry of its log a primary
// that goes active deletes again the parts its entries made garbage
// (redropRecent): past the wait and retries of a drop cut short by the
// previous primary's crash, and a margin for the clocks of the OSDs that
// logged them.
func (o *OSD) redropWindow() time.Duration {
	return o.st.KeepReplacedFor() + partDropRetry + redropClockMargin
}

// redropClockMargin is redropWindow's margin for the clocks of the OSDs
// that logged a PG's entries.
const redropClockMargin = time.Minute

// redropRecent deletes again, off the shard, the parts that the entries
// of PG p's log made garbage within redropWindow of its newest entry, as p
// goes active with us as its primary. The previous primary deleted them
// after its wait (dropReplaced), in memory only: a crash during that wait
// or its retries left them, taking space that nothing but osprey gc would
// give back (RGW queues such deletes in its gc log). The entries are on
// every member, so whoever leads next finds them; a delete of a part gone
// already, or that the object now at the key names again, changes nothing
// (dropReplaced).
//
// Only the entries past p.dropsThrough: those this process deleted the
// parts of already (as primary before, or at an earlier activation) are
// not done again at every re-peering; a delete of a part gone already is
// a lookup (dropPartOnce). One goroutine runs them one after another.
func (o *OSD) redropRecent(p *pgState) {
	o.drops.Add(1)
	o.wg.Go(func() {
		defer o.drops.Add(-1)
		window, done := o.redropWindow(), p.dropsThrough.Load()
		var newest int64
		entries, err := o.st.LogNewest(o.ctx, p.sid, func(e *osdpb.LogEntry) bool {
			// Back to the first entry done already, or logged before the
			// window by more than its margin for clocks again (the log's
			// order is the order of the writes; their times are the
			// clocks of the primaries that logged them).
			newest = max(newest, e.LoggedUnixNanos)
			t := e.LoggedUnixNanos
			return e.GetVersion().GetSeq() > done && (t == 0 || t >= newest-int64(window+redropClockMargin))
		})
		if err != nil {
			return
		}
		todo := redropTodo(entries, window, done)
		for _, e := range todo {
			p.noteDrops(e)
		}
		if len(todo) == 0 || !o.waitKeepReplaced() {
			return
		}
		for _, e := range todo {
			if o.partHolds.heldUntil(e.Bucket, uploadsOf(e.DroppedParts)).After(time.Now()) {
				// A reader holds these: they wait on their own, not
				// the entries after them.
				o.dropWhenFree(p.pool, e, false)
				continue
			}
			o.dropGarbage(p.pool, e)
		}
	})
}

// redropTodo is what redropRecent deletes again of a PG's log entries:
// those that made parts garbage, logged within window of the newest entry
// (by the primaries' clocks; an entry of an older build, with no time, is
// left out), past seq done.
func redropTodo(entries []*osdpb.LogEntry, window time.Duration, done uint64) []*osdpb.LogEntry {
	var newest int64
	for _, e := range entries {
		newest = max(newest, e.LoggedUnixNanos)
	}
	from := newest - int64(window)
	var todo []*osdpb.LogEntry
	for _, e := range entries {
		if len(e.DroppedParts) > 0 && e.LoggedUnixNanos != 0 && e.LoggedUnixNanos >= from && e.GetVersion().GetSeq() > done {
			todo = append(todo, e)
		}
	}
	return todo
}

// FlushDrops ends the wait of the replaced parts' deletes (dropReplaced),
// as a graceful stop begins, and gives them until ctx ends, at most
// flushDropsFor, to finish while the messengers still run. Later deletes
// do not wait. A cluster stopping whole flushes every OSD before it stops
// any, so that no delete goes to an OSD already gone.
func (o *OSD) FlushDrops(ctx context.Context) {
	o.dropOnce.Do(func() { close(o.dropNow) })
	deadline := time.Now().Add(flushDropsFor)
	for o.drops.Load() > 0 {
		if ctx.Err() != nil || time.Now().After(deadline) {
			o.log.Warn("stopping with replaced parts not yet deleted: osprey gc removes them", "objects", o.drops.Load())
			return
		}
		time.Sleep(5 * time.Millisecond) // a stop polls; no op waits on it
	}
}

const flushDropsFor = 5 * time.Second

// garbageKeys is what may be deleted of dropped, the keys an entry made
// garbage, given cur, the object now at the entry's key (nil for none): the
// parts and pieces among them (an entry naming an upload record is bad or
// garbled, and must not remove a pending upload) that cur does not name. A
// later write may have made them live again (a completion of the same
// upload repeated before its record's removal landed), and a resend
// answered from the log can come long after its entry.
func garbageKeys(dropped []string, cur *osdpb.ObjectMeta) []string {
	live := make(map[string]bool, len(cur.GetParts()))
	for _, p := range cur.GetParts() {
		live[p.Key] = true
	}
	return slices.DeleteFunc(slices.Clone(dropped), func(k string) bool {
		_, _, isPart := ops.ParsePartKey(k)
		_, _, _, _, isPiece := ops.ParsePieceKey(k)
		return live[k] || !isPart && !isPiece
	})
}

// dropParts deletes the parts (keys of the multipart bucket) of a multipart
// object that was overwritten or deleted, each at its PG's primary (here, or
// over the cluster network), and waits for them. A part that cannot be
// deleted (dropPart) stays behind (logged), taking space but never visible.
func (o *OSD) dropParts(mp *placement.Map, poolID uint32, parts []string) {
	sem := make(chan struct{}, partDropsAtOnce)
	var wg sync.WaitGroup
	for _, part := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o.dropPart(mp, poolID, part)
		})
	}
	wg.Wait()
}

// A part's delete that its PG's primary cannot take yet (the PG peers,
// the primary moved, a map it has not seen) is tried again for up to
// partDropRetry: after a failover, the primary that answers a client's
// resend drops the replaced parts just as their PGs peer. partDropsAtOnce
// bounds the deletes in flight for one object.
const (
	partDropRetry   = 30 * time.Second
	partDropsAtOnce = 16
)

// dropPart deletes part, a key of the multipart bucket in pool poolID, at
// its PG's primary, first by mp, then, when tried again, by the map of the
// moment; it logs a failure it gives up on.
func (o *OSD) dropPart(mp *placement.Map, poolID uint32, part string) {
	deadline := time.Now().Add(partDropRetry)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := o.dropPartOnce(mp, poolID, part)
		var oe *ops.Error
		retry := err != nil && o.ctx.Err() == nil && (!errors.As(err, &oe) || oe.Retriable())
		if !retry || time.Now().After(deadline) {
			if err != nil && o.ctx.Err() == nil {
				o.log.Warn("deleting a replaced object's part", "part", part, "err", err)
			}
			return
		}
		select {
		case <-time.After(wait):
		case <-o.ctx.Done():
			return
		}
		mp = o.Map()
	}
}

// dropPartOnce sends part's delete to its PG's primary by mp, and waits
// for the answer. The delete is conditional on the part being there
// (If-Match "*"): one gone already, as most are when redropRecent deletes
// again what an earlier primary did delete, costs a lookup at its primary,
// not a replicated write and a log entry; its NO_SUCH_KEY is success.
func (o *OSD) dropPartOnce(mp *placement.Map, poolID uint32, part string) error {
	err := o.dropPartIfThere(mp, poolID, part)
	if errors.Is(opError(err), ops.ErrNoSuchKey) {
		return nil
	}
	return err
}

// partThere is dropPartOnce's condition.
var partThere = &osdpb.Condition{IfMatch: []string{"*"}}

func (o *OSD) dropPartIfThere(mp *placement.Map, poolID uint32, part string) error {
	pool, ok := mp.Pool(poolID)
	if !ok {
		return nil // the pool is gone, and its objects with it
	}
	pg := placement.PGOf(pool, ops.MultipartBucket, part)
	primary, ok := mp.Primary(pool.Id, pg)
	if !ok {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %d.%d has no primary in epoch %d", pool.Id, pg, mp.Epoch())
	}
	if primary == o.id {
		// Our own PG: a delete on its shard, like any other.
		sid := storePG(pool.Id, pg)
		e := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: ops.MultipartBucket, Key: part}
		done := make(chan error, 1)
		if !o.enqueue(o.shardOf(sid), func() {
			o.write(o.Map(), sid, e, nil, nil, nil, false, partThere, func(_ *osdpb.LogEntry, err error) { done <- err }, func() {})
		}) {
			return o.ctx.Err()
		}
		select {
		case err := <-done:
			return err
		case <-o.ctx.Done():
			return o.ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RepTimeout)
	defer cancel()
	del := func(t osdpb.MsgType, cond *osdpb.Condition) error {
		var rep osdpb.ObjectReply
		err := o.call(ctx, primary, t, &osdpb.ObjectRequest{Header: &osdpb.Header{Epoch: mp.Epoch(), Pool: pool.Id, Pg: pg},
			Bucket: ops.MultipartBucket, Key: part, Condition: cond}, &rep, nil)
		if err == nil {
			err = ops.FromReply(rep.Header)
		}
		return err
	}
	err := del(osdpb.MsgType_MSG_DELETE_OBJECT_IF, partThere)
	if errors.Is(opError(err), ops.ErrInvalidArgument) {
		// A primary of an older build takes no conditional delete over
		// the cluster network ("unknown cluster op"): a plain one.
		err = del(osdpb.MsgType_MSG_DELETE_OBJECT, nil)
	}
	return err
}

// pendingRep is one entry on its way to the replicas.
type pendingRep struct {
	mu      sync.Mutex
	waiting []uint32    // replicas that have not acked yet
	timer   *time.Timer // under mu: set after the entry is published
	once    sync.Once
	done    func(error)
	pg      *pgState // a write's PG, whose inflight counts it; nil for a sync
}

func (p *pendingRep) finish(err error) {
	p.once.Do(func() {
		p.mu.Lock()
		unanswered := p.waiting
		p.waiting = nil
		p.mu.Unlock()
		if p.pg != nil {
			for _, id := range unanswered {
				p.pg.answered(id)
			}
		}
		// An ack (or the timer itself) can finish the entry before
		// replicate has stored its timer; that timer then finds the
		// entry taken and does nothing.
		p.mu.Lock()
		t := p.timer
		p.mu.Unlock()
		if t != nil {
			t.Stop()
		}
		p.done(err)
	})
}

// acked removes id from the replicas waited for and reports whether none
// is left.
func (p *pendingRep) acked(id uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pg != nil && slices.Contains(p.waiting, id) {
		p.pg.answered(id)
	}
	p.waiting = slices.DeleteFunc(p.waiting, func(w uint32) bool { return w == id })
	return len(p.waiting) == 0
}

func (p *pendingRep) waitsFor(id uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.waiting, id)
}

// failPeer fails at once every write still waiting for OSD id, which
// restarted (its session was reset, so what we sent it is gone) or whose
// connections are refused. Without this each such write waited out
// RepTimeout (10 s); now the client retries after its backoff, and the
// retry finds the entry in the PG log and only syncs the replicas.
func (o *OSD) failPeer(id uint32, why string) {
	n := o.reps.FailIf(func(pr *pendingRep) bool { return pr.waitsFor(id) }, func(pr *pendingRep) {
		pr.finish(ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "replica osd.%d %s", id, why))
	})
	if n > 0 {
		o.log.Info("writes waiting for a replica failed at once (retriable)", "peer", id, "why", why, "writes", n)
	}
}

// apply applies e to store PG sid (ck from Check, or nil), without waiting
// for its synced commit: whenDurable does. A bucket delete holds bucketGate
// exclusively meanwhile, at the primary and at replicas alike: this OSD's
// own checked object writes go first (see write).
func (o *OSD) apply(sid uint32, e *osdpb.LogEntry, body []byte, ck *store.Checked) (*store.Applied, error) {
	if e.Kind == osdpb.OpKind_OP_DELETE_BUCKET {
		var applied *store.Applied
		err := o.dropBuckets(func() (err error) {
			applied, err = o.st.ApplyAsync(o.ctx, sid, e, body, ck)
			return err
		})
		return applied, err
	}
	return o.st.ApplyAsync(o.ctx, sid, e, body, ck)
}

// dropBuckets runs drop, which removes bucket records, with bucketGate
// held exclusively, and counts it in bucketDrops.
func (o *OSD) dropBuckets(drop func() error) error {
	o.bucketGate.Lock()
	defer o.bucketGate.Unlock()
	defer o.bucketDrops.Add(1)
	return drop()
}

// whenDurable calls f once the commit of an applied entry is synced (or
// with the error that kept it from being so), off the caller's shard. The
// shard goes on to its next op meanwhile: a PG's entries are applied in
// order, one behind the other, while the WAL syncs of earlier ones are in
// flight (Ceph's primary pipelines a PG's ops the same way), and every
// entry applied while a sync runs rides on the next one. An entry's
// acknowledgement, to the client or to the primary, waits here: never
// before the sync that covers it.
func (o *OSD) whenDurable(a *store.Applied, f func(error)) {
	o.durable.Go(func() { f(a.Durable()) })
}

// applyFailed handles a local apply that failed after the entry went to
// the replicas, which may have applied it. Check answered everything an
// op can be refused for, so this is an I/O error (or a lack of space that
// came since), or the OSD is stopping. Going on would leave the PG's
// version sequence with a hole only some members skipped, so the OSD
// stops as if it had crashed, as a Ceph OSD does on an error from its
// object store: peering then rolls the entry forward from a replica that
// has it, or drops it where none does (it was never acknowledged).
func (o *OSD) applyFailed(p *pgState, e *osdpb.LogEntry, err error) {
	if o.ctx.Err() != nil {
		return // stopping: peering sorts it out at the restart
	}
	o.fatal(fmt.Errorf("pg %s: applying version %d.%d, already sent to the replicas: %w",
		pgName(p.pool, p.pg), e.Version.GetEpoch(), e.Version.GetSeq(), err))
}

// fatal stops the OSD at once because it cannot go on safely: through
// Config.Store.OnFatal where set (the daemon exits), else (an OSD in a
// test or in `osprey up`) by killing its messengers, so that peers see it
// as crashed and the mon marks it down; Close then ends the rest.
func (o *OSD) fatal(err error) {
	o.log.Error("the OSD cannot go on and stops (its acknowledged writes are on its replicas)", "err", err)
	o.stoppedBy.CompareAndSwap(nil, &err)
	if f := o.cfg.Store.OnFatal; f != nil {
		f(err.Error())
		return
	}
	if o.fenced.Swap(true) {
		return
	}
	o.cancel()
	go func() {
		o.pub.Kill()
		o.clu.Kill()
	}()
}

// Stopped is the error that stopped the OSD on its own (it cannot go on:
// a store failure, another daemon booted as it); nil while it runs or
// after a Close.
func (o *OSD) Stopped() error {
	if e := o.stoppedBy.Load(); e != nil {
		return *e
	}
	return nil
}

// replicate sends e (with body) to the replicas and calls done when every
// one acked its synced commit, or with SERVICE_UNAVAILABLE after
// RepTimeout. prior is where our log ended before e (nil for a sync,
// which writes nothing): a replica applies e only on top of it. buf, when
// not nil, holds body (a client's message): every RepOp sends from it
// without a copy. Otherwise body is copied once, into a buffer from the
// cluster network (registered memory on RDMA), which all the RepOps share.
func (o *OSD) replicate(mp *placement.Map, p *pgState, replicas []uint32, e *osdpb.LogEntry, prior *osdpb.Version, body []byte, buf *wire.Buffer, done func(error)) {
	if len(replicas) == 0 {
		done(nil)
		return
	}
	pr := &pendingRep{done: done, waiting: slices.Clone(replicas)}
	if prior != nil {
		pr.pg = p
		p.sending(replicas)
	}
	tid := o.reps.Add(pr)
	start, graced := time.Now(), false
	timer := time.AfterFunc(o.cfg.RepTimeout, func() {
		if !graced && time.Since(start) > o.cfg.RepTimeout+repStallSlack {
			// We fire late: this process was stalled (SIGSTOP, a VM
			// paused, a starved host), and the replicas' acks may be
			// in our sockets, unread. They get repStallGrace before the
			// write fails and they are blamed for it (SLOW_OPS).
			graced = true
			pr.mu.Lock()
			t := pr.timer
			pr.mu.Unlock()
			if t != nil {
				t.Reset(min(repStallGrace, o.cfg.RepTimeout))
				return
			}
		}
		if pr, ok := o.reps.Take(tid); ok {
			pr.mu.Lock()
			late := slices.Clone(pr.waiting)
			pr.mu.Unlock()
			o.repTimeouts.add(time.Now(), late)
			o.ratelog.Log(o.log, slog.LevelWarn, "rep timeout", "a write failed: replicas did not ack within the rep timeout",
				"pg", pgName(p.pool, p.pg), "osds", late, "rep_timeout", o.cfg.RepTimeout)
			pr.finish(ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: %s did not ack version %d.%d within %v",
				pgName(p.pool, p.pg), ops.OSDList(late), e.Version.GetEpoch(), e.Version.GetSeq(), o.cfg.RepTimeout))
		}
	})
	pr.mu.Lock()
	pr.timer = timer
	pr.mu.Unlock()
	front, err := proto.Marshal(&osdpb.RepOp{Epoch: mp.Epoch(), Pool: p.pool, Pg: p.pg, Entry: e, Prior: prior, Tid: tid})
	if err != nil {
		o.failRep(tid, err)
		return
	}
	if buf != nil {
		buf.Ref() // ours, released below like one we allocate
	}
	for _, id := range replicas {
		c, err := o.peerConn(id)
		if err != nil {
			o.failRep(tid, err)
			break
		}
		if buf == nil && len(body) > 0 {
			if buf, err = c.AllocPayload(len(body)); err != nil {
				o.failRep(tid, err)
				break
			}
			copy(buf.B, body)
			body = buf.B
		}
		m := msgr.NewMessage(uint16(osdpb.MsgType_MSG_REP_OP), front, nil)
		if buf != nil {
			buf.Ref()
			m.SetPayload(buf)
			m.Data = body
			if e.Kind == osdpb.OpKind_OP_PUT && len(e.Meta.GetParts()) == 0 {
				// Check verified the body against the put's CRC32C:
				// the link need not read it again to checksum each send.
				m.SetDataCRC(e.Meta.GetCrc32C())
			}
		}
		ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RepTimeout)
		err = c.Send(ctx, m)
		cancel()
		if err != nil {
			m.Release()
			o.failRep(tid, fmt.Errorf("pg %s: sending to osd.%d: %w", pgName(p.pool, p.pg), id, err))
			break
		}
	}
	if buf != nil {
		buf.Release()
	}
}

// A rep timer that fires more than repStallSlack past its time found the
// OSD itself stalled; it waits repStallGrace more for the acks that came
// meanwhile (replicate).
const (
	repStallSlack = time.Second
	repStallGrace = 2 * time.Second
)

func (o *OSD) failRep(tid uint64, err error) {
	if pr, ok := o.reps.Take(tid); ok {
		pr.finish(ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%v", err))
	}
}

// repReply counts replica from's answer to a RepOp.
func (o *OSD) repReply(r *osdpb.RepOpReply, from uint32) {
	if r.Last != nil {
		if sid, err := o.peerPG(r.Pool, r.Pg); err == nil {
			if p, err := o.pgOf(sid); err == nil {
				p.notePeer(from, r.Last)
				if r.Tid == 0 && ops.FromReply(r.Header) == nil {
					// The answer to a sync (a push): the replica caught up.
					ev := pg.PeerRecovered{OSD: pg.OSDID(from), Last: pgVersion(r.Last)}
					o.enqueue(o.shardOf(sid), func() {
						if p.m != nil {
							p.m.Step(ev)
							o.drive(p)
							o.publish(p) // UpFilled may have turned true with no state change
						}
					})
				}
			}
		}
	}
	if err := ops.FromReply(r.Header); err != nil {
		if r.Tid == 0 && (errors.Is(err, ops.ErrStaleEpoch) || errors.Is(err, ops.ErrServiceUnavailable)) {
			o.resync(r.Pool, r.Pg, from)
		}
		if pr, ok := o.reps.Take(r.Tid); ok {
			pr.finish(err)
		}
		return
	}
	pr, ok := o.reps.Get(r.Tid)
	if ok && pr.acked(from) {
		if pr, ok := o.reps.Take(r.Tid); ok {
			pr.finish(nil)
		}
	}
}

// resync sends replica id the sync of PG (pool, pg) again, a second after
// it refused one for its epoch (a replica that had not yet adopted the map
// the sync came with fetches it meanwhile) or could not act on it now (its
// catch-up failed, e.g. a source's bucket records were peering, and waits
// out its backoff): without a second sync it would stay behind until the
// next write to the PG.
func (o *OSD) resync(pool, pg, id uint32) {
	time.AfterFunc(time.Second, func() {
		mp := o.Map()
		sid, err := o.peerPG(pool, pg)
		if err != nil || o.ctx.Err() != nil || id == o.id || !mp.IsMember(pool, pg, id) || !mp.IsPrimary(pool, pg, o.id) {
			return // not ours to sync, or no longer a replica
		}
		p, err := o.pgOf(sid)
		if err != nil {
			return
		}
		// On the shard, which owns the machine: a sync of a primary that
		// serves, or that fills id, is marked activated, as the push it
		// repeats was. An empty PG's machine waits for the answer to its
		// push of nothing to a member it counts as backfilling (a new
		// PG whose replicas had not taken up the map): it stays peered
		// until then, with no write to make one.
		o.enqueue(o.shardOf(sid), func() {
			last, _, err := o.st.PGInfo(o.ctx, sid)
			active := p.pushesTo(id)
			if err != nil || last.GetSeq() == 0 && !active {
				return
			}
			if !active {
				o.sendSync(mp.Epoch(), id, pool, pg, last)
				return
			}
			if !o.sendSyncOp(activatedSync(p, p.m.Epoch(), pgVersion(last)), id) {
				o.pushFailed(p, id) // retried by the probe loop
			}
		})
	})
}

// repOpApplying, when set (tests, through export_test.go), runs on OSD
// osd's shard of store PG sid as it takes up a RepOp: a test holds the
// replica's writes there.
var repOpApplying testHook[func(osd, sid uint32)]

// repOp applies a RepOp at a replica, on the PG's shard: in version order;
// a duplicate is acked again; a gap (or a sync entry ahead of us) starts a
// recovery from the sender, and the op waits for it.
func (o *OSD) repOp(m *msgr.Message, r *osdpb.RepOp, sid, from uint32) {
	if hook := repOpApplying.Load(); hook != nil {
		hook(o.id, sid)
	}
	p, err := o.pgOf(sid)
	if err != nil {
		o.ackRepOp(m, r, nil, err)
		return
	}
	if err := o.acceptRepOp(p, r, from); err != nil {
		o.ratelog.Log(o.log, slog.LevelWarn, "rep op refused", "rep op refused", "pg", placement.PGIDOf(sid), "from", from, "epoch", r.Epoch, "err", err)
		o.ackRepOp(m, r, nil, err)
		return
	}
	if p.recovering {
		if o.backfillRepOp(p, m, r) {
			return
		}
		if r.Entry.GetKind() == osdpb.OpKind_OP_NONE && p.queueSync(m, r, from) {
			return
		}
		p.queued = append(p.queued, queuedRepOp{m, r, from})
		return
	}
	o.applyRepOp(p, m, r, from)
}

// queueSync folds sync RepOp r into the one already queued, if any, while
// PG p recovers: the primary sends one every second a replica stays behind
// (pgStat), and a backfill can wait long (for a slot, for room), so each
// one queued would hold its message, and the receive credit with it, until
// the recovery ends, stalling every other RepOp from that primary. One
// answered when the recovery ends says all they would. A sync marked
// activated replaces the queued one (the older is released unanswered);
// a plain one is dropped. Only syncs without a tid fold: one with a tid (a
// primary making sure its replicas hold a resent write's version, for the
// client's answer) waits for its own answer, and dropped it would hold
// that client's write for the whole RepTimeout. Reports whether r was
// folded.
func (p *pgState) queueSync(m *msgr.Message, r *osdpb.RepOp, from uint32) bool {
	if r.Tid != 0 {
		return false
	}
	i := slices.IndexFunc(p.queued, func(q queuedRepOp) bool {
		return q.from == from && q.op.Entry.GetKind() == osdpb.OpKind_OP_NONE && q.op.Tid == 0
	})
	switch {
	case i < 0:
		return false
	case r.Activated:
		// In arrival order, after the writes queued since the old one.
		p.queued[i].m.Release()
		p.queued = append(slices.Delete(p.queued, i, i+1), queuedRepOp{m, r, from})
	default:
		m.Release()
	}
	return true
}

// chunkCRCs are the CRC32Cs of m's data in the store's chunks, as its
// link computed them while the data arrived (msgr.Options.DataChunkCRC),
// so that the store's check of a put reads no byte of it again; nil when
// the link did not (a sealed session, a transport that does not).
func (o *OSD) chunkCRCs(m *msgr.Message) []uint32 {
	crcs, _ := m.DataChunkCRCs(o.st.ChunkSize())
	return crcs
}

func (o *OSD) applyRepOp(p *pgState, m *msgr.Message, r *osdpb.RepOp, from uint32) {
	v := r.Entry.GetVersion()
	if v == nil {
		o.ackRepOp(m, r, nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "rep op without a version"))
		return
	}
	if versionLE(v, p.last) && !(r.Entry.Kind == osdpb.OpKind_OP_NONE && p.m != nil && p.m.Local().Incomplete) {
		// Acked again, or a sync from the primary: what we have may
		// still be on its way to the disk (whenDurable). A sync to a
		// copy marked mid-backfill (its backfill cut short, or a removed
		// stray's, emptied) goes to the recovery below instead, which
		// backfills it, though there may be nothing to copy: until then
		// it witnesses no interval, and the PG would wait on it.
		if err := o.st.SyncWAL(o.ctx); err != nil {
			o.ackRepOp(m, r, nil, err)
			return
		}
		if r.Activated && r.Entry.Kind == osdpb.OpKind_OP_NONE && versionLE(p.last, v) && p.m != nil {
			// The active primary's push or word of activation, and our
			// log, settled (no pull under way: a queued op comes here
			// after it), ends exactly there: we witness the interval.
			p.m.Step(pg.Activated{Epoch: pg.Epoch(r.Epoch), Version: pgVersion(v)})
			o.drive(p)
		}
		o.noteCurrent(p, r.Epoch)
		o.ackRepOp(m, r, p.last, nil)
		return
	}
	checkOpts := store.CheckOptions{ChunkCRCs: o.chunkCRCs(m), ChunkSize: o.st.ChunkSize()}
	if adds(r.Entry) {
		// A write that raced our heartbeat to a primary that thought us
		// not yet full.
		lvl, sp := o.measureSpace(true)
		if lvl >= osdpb.Fullness_FULLNESS_FAILSAFE {
			o.ackRepOp(m, r, p.last, o.fullError(lvl))
			return
		}
		checkOpts.Space = &sp
	}
	next := r.Entry.Kind != osdpb.OpKind_OP_NONE && v.Seq == p.last.GetSeq()+1
	if next && !follows(r.Prior, p.last) {
		o.log.Warn("rep op does not follow our log (a divergent entry); recovering the pg from its primary",
			"pg", placement.PGIDOf(p.sid), "last", p.last, "prior", r.Prior, "version", v)
		next = false
	}
	if next {
		// A put is checked with the usage just measured, so that its
		// room check costs no second statfs; the apply skips the CRC
		// pass the check made.
		var ck *store.Checked
		var err error
		if r.Entry.Kind == osdpb.OpKind_OP_PUT {
			ck, err = o.st.Check(o.ctx, r.Entry, m.Data, checkOpts)
		}
		var applied *store.Applied
		if err == nil {
			applied, err = o.apply(p.sid, r.Entry, m.Data, ck)
		}
		if err == nil {
			o.setLast(p, v)
			o.noteCurrent(p, r.Epoch)
			o.trimSometimes(p.sid, v)
			o.whenDurable(applied, func(err error) {
				if err != nil {
					// Applied but maybe lost: we cannot go on (applyFailed).
					o.fatal(fmt.Errorf("pg %s: syncing version %d.%d: %w", pgName(p.pool, p.pg), v.GetEpoch(), v.GetSeq(), err))
					o.ackRepOp(m, r, nil, err)
					return
				}
				o.ackRepOp(m, r, v, nil)
			})
			return
		}
		if o.ctx.Err() != nil {
			// We are stopping (Close): nothing was applied, and a
			// recovery would only be canceled too. The primary's write
			// fails retriably, as with any replica that goes.
			o.ackRepOp(m, r, p.last, o.shuttingDown())
			return
		}
		o.log.Warn("replica apply failed; recovering the pg from its primary", "pg", p.sid, "version", v, "err", err)
	}
	if !p.recovering {
		if err := o.recoveryWait(p); err != nil {
			o.ackRepOp(m, r, p.last, err)
			return
		}
	}
	p.queued = append(p.queued, queuedRepOp{m, r, from})
	o.startRecovery(p, from)
}

// follows reports whether a RepOp whose primary's log ended at prior
// before its entry may be applied on our log, which ends at last: only
// where the two are the same version. Otherwise our entry at that sequence
// number is one the primary does not have (divergent), and stacking the
// next entry on it would keep it beside a log that skips the primary's
// own: the op waits for a recovery from the primary, which rolls ours back.
// A sender without prior (an older build) is trusted on the sequence
// number alone.
func follows(prior, last *osdpb.Version) bool {
	return prior == nil || prior.GetEpoch() == last.GetEpoch() && prior.GetSeq() == last.GetSeq()
}

// ackRepOp answers a RepOp; last is where our log of its PG now ends (nil
// when the op was refused before we looked).
func (o *OSD) ackRepOp(m *msgr.Message, r *osdpb.RepOp, last *osdpb.Version, err error) {
	to := replyTo(m)
	m.Release()
	o.send(to, osdpb.MsgType_MSG_REP_OP_REPLY, &osdpb.RepOpReply{
		Header: o.header(&osdpb.Header{Epoch: r.Epoch}, err), Pool: r.Pool, Pg: r.Pg, Last: last, Tid: r.Tid}, nil)
}

// acceptRepOp accepts a RepOp only from the PG's primary of the current
// interval, as Ceph does (the machine's AcceptRepOp): before this, a
// replica applied ops from any peer that named itself osd.N, and one
// injected entry made it skip the next real write. A sender ahead of us
// makes us fetch its map first (the op is refused, retriably, meanwhile);
// one behind our interval's start has not seen the map that changed the
// PG's members. On p's shard.
func (o *OSD) acceptRepOp(p *pgState, r *osdpb.RepOp, from uint32) error {
	o.advance(p, o.Map())
	if p.m == nil || o.stateLate(p, osdpb.MsgType_MSG_REP_OP) {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: no state yet", pgName(r.Pool, r.Pg))
	}
	err := p.m.AcceptRepOp(pg.OSDID(from), pg.Epoch(r.Epoch))
	if errors.Is(err, pg.ErrFutureEpoch) {
		o.learnEpoch(r.Epoch, from)
	}
	if err != nil {
		return refusal(err)
	}
	return nil
}
