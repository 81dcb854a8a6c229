package osd

import (
	"context"
	"errors"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// The test hooks (testHook): Set installs one, Set(nil) removes it.
var (
	// BackfillFetched runs after a backfill's walk fetched an object and
	// before it installs it.
	BackfillFetched = &backfillFetched
	// RecoveryStarting runs when OSD osd starts to recover its copy of
	// store PG sid (a catch-up from a peer), before it copies anything;
	// an error it returns fails that recovery.
	RecoveryStarting = &recoveryStarting
	// VouchAnswered runs when the meta PG's primary answered OSD osd's
	// question about bucket for a write, before the write takes its turn.
	VouchAnswered = &vouchAnswered
	// UploadCreating runs as OSD osd makes an upload of bucket/key,
	// before the upload's record is written.
	UploadCreating = &uploadCreating
	// RepairInstalled runs as an OSD installed a read repair's copy; its
	// error stands for the install's.
	RepairInstalled = &repairInstalled
	// ClusterReceived runs as an OSD receives a cluster message, which it
	// drops unanswered when the hook returns true.
	ClusterReceived = &clusterReceived
	// RepOpReceived runs as OSD osd has decoded a RepOp from OSD from,
	// which it drops unanswered when the hook returns true.
	RepOpReceived = &repOpReceived
	// PGStateLate runs as OSD osd takes up a PG query or RepOp for store
	// PG sid; true refuses it as before the PG's map ("no state yet").
	PGStateLate = &pgStateLate
	// RepOpApplying runs on OSD osd's shard of store PG sid as it takes up
	// a RepOp.
	RepOpApplying = &repOpApplying
	// ScrubMapRead runs as OSD osd has read the objects of a scrub map of
	// store PG sid, before it reads where its log ends (names: a second
	// look's map).
	ScrubMapRead = &scrubMapRead
	// BucketAnswered runs when a recovery at OSD osd learnt from the meta
	// PG's primary whether bucket, the bucket of an object it copies,
	// exists.
	BucketAnswered = &bucketAnswered
	// BucketAnswering runs when an op at OSD osd found bucket missing,
	// before the OSD decides what to answer.
	BucketAnswering = &bucketAnswering
	// BucketDeleteChecked runs on the meta PG's primary once a bucket's
	// delete found it empty, before the delete is written.
	BucketDeleteChecked = &bucketDeleteChecked
	// RemovalPage runs after each page of the removal of a stray copy at
	// OSD osd; an error stops the removal there, as a crash would.
	RemovalPage = &removalPage
	// StrayAllowed runs at OSD osd between its primary's "remove" for
	// store PG sid and the start of the removal.
	StrayAllowed = &strayAllowed
	// CopyReadBegun runs at OSD osd once a peer's read of store PG sid
	// (a log pull, a backfill step) passed its first check.
	CopyReadBegun = &copyReadBegun
	// PeeringStarted runs as OSD osd starts a sync of every PG it shares
	// with OSD peer on a session event (why).
	PeeringStarted = &peeringStarted
	// WithoutSideSessions makes each OSD started while it is set, that it
	// returns true for, a build without heartbeat side sessions: it
	// refuses its peers' and heartbeats on the lossless session.
	WithoutSideSessions = &withoutSideSessions
	// PartsDropping runs as OSD osd is about to delete the parts an
	// entry made garbage, after its wait; true gives them up, as a crash
	// during the wait would.
	PartsDropping = &partsDropping
	// ClientReceived runs as OSD osd takes up a client's message, which
	// it drops unanswered when the hook returns true.
	ClientReceived = &clientReceived
)

// ServesReadsForTest reports whether o serves reads at all (not stopping,
// nor holding off for a stuck disk until its next boot).
func (o *OSD) ServesReadsForTest() bool { return !o.noReads.Load() }

// HoldsPGStateForTest reports whether o keeps state for store PG sid.
func (o *OSD) HoldsPGStateForTest(sid uint32) bool {
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	return o.pgs[sid] != nil
}

// QueryForTest answers, on the PG's shard, a PG query from OSD from at
// o's map epoch, as o answers a peer's.
func (o *OSD) QueryForTest(pool, pgn, from uint32) (*osdpb.PGInfo, error) {
	sid, err := o.peerPG(pool, pgn)
	if err != nil {
		return nil, err
	}
	type answer struct {
		info *osdpb.PGInfo
		err  error
	}
	got := make(chan answer, 1)
	if !o.enqueue(o.shardOf(sid), func() {
		info, err := o.answerQuery(&osdpb.PGQuery{Epoch: o.Map().Epoch(), Pool: pool, Pg: pgn}, sid, from)
		got <- answer{info, err}
	}) {
		return nil, errors.New("osd closing")
	}
	a := <-got
	return a.info, a.err
}

// StrayAnswers is how many PG_STRAY questions o answered, as primary,
// with a removal and with a refusal.
func (o *OSD) StrayAnswers() (allowed, kept uint64) { return o.strayAllowed.Load(), o.strayKept.Load() }

// StrayRounds is how many times o looked for stray copies.
func (o *OSD) StrayRounds() uint64 { return o.strayRounds.Load() }

// MetaStorePG is the store PG id of the meta PG under m.
func MetaStorePG(m *placement.Map) uint32 { return storePG(metaPool(m), placement.MetaPG) }

// SetPeeringForTest marks every PG o holds as peering (reads are answered
// SERVICE_UNAVAILABLE) or not, until its next map change. Tests only.
func (o *OSD) SetPeeringForTest(on bool) {
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	for _, p := range o.pgs {
		p.peering.Store(on)
	}
}

// SetPGPeeringForTest is SetPeeringForTest of one PG, by pool and seed.
func (o *OSD) SetPGPeeringForTest(pool, pg uint32, on bool) {
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	if p := o.pgs[storePG(pool, pg)]; p != nil {
		p.peering.Store(on)
	}
}

// HeldWritesForTest is the number of writes waiting in o's lines behind
// (or for) a vouch for their bucket.
func (o *OSD) HeldWritesForTest() int64 { return o.lines.held.Load() }

// BucketsCurrentForTest reports whether o vouches for its buckets itself
// at its map.
func (o *OSD) BucketsCurrentForTest() bool { return o.bucketsCurrent(o.Map()) }

// CallForTest asks OSD id for its map through o.call, as the OSD asks its
// peers everything.
func (o *OSD) CallForTest(ctx context.Context, id uint32) error {
	var rep osdpb.GetMapReply
	return o.call(ctx, id, osdpb.MsgType_MSG_GET_MAP, &osdpb.GetMap{}, &rep, nil)
}

// PeerConnForTest is o's cluster session to OSD id.
func (o *OSD) PeerConnForTest(id uint32) (*msgr.Conn, error) { return o.peerConn(id) }

// PendingCallsForTest is the number of o's calls to its peers that wait
// for a reply.
func (o *OSD) PendingCallsForTest() int { return o.calls.Len() }

// InstallForTest installs entry e of store PG sid with its body, as a
// recovery does with what it copied.
func (o *OSD) InstallForTest(ctx context.Context, sid uint32, e *osdpb.LogEntry, body []byte) error {
	o.pgMu.Lock()
	p := o.pgs[sid]
	o.pgMu.Unlock()
	return o.install(ctx, p, 0, e, body)
}

// PushForTest sends a repair's MSG_PG_PUSH of e with body to OSD to.
func (o *OSD) PushForTest(ctx context.Context, to, pool, pg uint32, e *osdpb.LogEntry, body []byte) error {
	var rep osdpb.PGPushReply
	err := o.callWith(ctx, to, osdpb.MsgType_MSG_PG_PUSH, &osdpb.PGPush{Epoch: o.Map().Epoch(), Pool: pool, Pg: pg, Entry: e}, body, &rep, nil)
	if err == nil {
		err = ops.FromReply(rep.Header)
	}
	return err
}

// ScrubMapForTest asks OSD from for its scrub map of the whole of PG
// (pool, pg), as a primary's compare does.
func (o *OSD) ScrubMapForTest(ctx context.Context, from, pool, pg uint32) ([]*osdpb.ScrubObject, error) {
	objs, _, _, err := o.replicaMap(ctx, from, &osdpb.PGScrubMap{Epoch: o.Map().Epoch(), Pool: pool, Pg: pg, ToEnd: true})
	return objs, err
}

// HasStateForTest is hasState: whether a Ceph state string has a word.
var HasStateForTest = hasState

// PGStatForTest is what this OSD, as PG (pool, pg)'s primary, would
// report of it in its next beacon.
func (o *OSD) PGStatForTest(pool, pg uint32) *osdpb.PGStat {
	mp := o.Map()
	p, _ := mp.Pool(pool)
	return o.pgStat(mp, p, pg)
}

// PGStateForTest is the state this OSD, as PG (pool, pg)'s primary, would
// report of it in its next beacon.
func (o *OSD) PGStateForTest(pool, pg uint32) string {
	mp := o.Map()
	p, _ := mp.Pool(pool)
	return o.pgStat(mp, p, pg).State
}

// SendSyncForTest sends replica to a sync RepOp of PG (pool, pgn) at o's
// log end, as o's beacon does for a replica behind it.
func (o *OSD) SendSyncForTest(to, pool, pgn uint32) bool {
	sid, err := o.peerPG(pool, pgn)
	if err != nil {
		return false
	}
	p, err := o.pgOf(sid)
	if err != nil {
		return false
	}
	last, _, err := o.st.PGInfo(o.ctx, sid)
	return err == nil && p != nil && o.sendSync(o.Map().Epoch(), to, pool, pgn, last)
}

// QueuedForTest is how many RepOps of store PG sid wait for its recovery,
// read on the PG's shard behind what was queued there before.
func (o *OSD) QueuedForTest(sid uint32) int {
	p, err := o.pgOf(sid)
	if err != nil {
		return -1
	}
	got := make(chan int, 1)
	if !o.enqueue(o.shardOf(sid), func() { got <- len(p.queued) }) {
		return -1
	}
	return <-got
}

// SetFreshStoreForTest marks o as booting on a new store the mon has not
// acknowledged yet (on), or not.
func (o *OSD) SetFreshStoreForTest(on bool) { o.freshStore.Store(on) }

// HasMachineForTest reports whether o has built the peering machine of
// store PG sid, on the PG's shard.
func (o *OSD) HasMachineForTest(sid uint32) bool {
	p, err := o.pgOf(sid)
	if err != nil {
		return false
	}
	got := make(chan bool, 1)
	if !o.enqueue(o.shardOf(sid), func() { got <- p.m != nil }) {
		return false
	}
	return <-got
}

// FullnessOfForTest is how full o counts itself with its disk at sp.
func (o *OSD) FullnessOfForTest(sp store.Space) osdpb.Fullness { return o.fullnessOf(sp) }

// StorePG is the store's id of PG (pool, pg).
func StorePG(pool, pg uint32) uint32 { return storePG(pool, pg) }

// DropPartsForTest deletes parts (keys of the multipart bucket in pool) as
// a replaced object's are, each at its PG's primary.
func (o *OSD) DropPartsForTest(pool uint32, parts []string) { o.dropParts(o.Map(), pool, parts) }

// RecoveryPacedForTest is how many bytes of recovery the recovery
// throttle (RecoveryBytesPerSec) has granted.
func (o *OSD) RecoveryPacedForTest() uint64 { return o.recoveryPaced.Load() }

// StallForTest makes o's next heartbeat look as one after a stall of d:
// its last beat and every sign of life from its peers moved d back, as a
// process stopped for d sees them.
func (o *OSD) StallForTest(d time.Duration) {
	o.peerMu.Lock()
	for _, ps := range o.peers {
		ps.lastSeen = ps.lastSeen.Add(-d)
	}
	o.peerMu.Unlock()
	o.lastBeat.Add(-int64(d))
}

// StallsForTest is how many stalls of its own o has seen, and
// LastBeatForTest when its heartbeat last ran (unix ns).
func (o *OSD) StallsForTest() uint64  { return o.stalls.Load() }
func (o *OSD) LastBeatForTest() int64 { return o.lastBeat.Load() }
