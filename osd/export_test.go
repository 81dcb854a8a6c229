package osd

import (
	"context"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// SetBackfillFetched installs a hook that runs after a backfill's walk
// fetched an object and before it installs it; nil removes it. Tests only.
func SetBackfillFetched(f func(bucket, key string)) {
	if f == nil {
		backfillFetched.Store(nil)
		return
	}
	backfillFetched.Store(&f)
}

// SetRecoveryStarting installs a hook that runs when OSD osd starts to
// recover its copy of store PG sid (a catch-up from a peer), before it
// copies anything; nil removes it. Tests only.
func SetRecoveryStarting(f func(osd, sid uint32)) {
	if f == nil {
		recoveryStarting.Store(nil)
		return
	}
	recoveryStarting.Store(&f)
}

// SetRecoveryFails installs a hook that may fail each recovery OSD osd
// starts of store PG sid, before it copies anything; nil removes it.
func SetRecoveryFails(f func(osd, sid uint32) error) {
	if f == nil {
		recoveryFails.Store(nil)
		return
	}
	recoveryFails.Store(&f)
}

// SetPeeringForTest marks every PG o holds as peering (reads are answered
// SERVICE_UNAVAILABLE) or not, until its next map change. Tests only.
func (o *OSD) SetPeeringForTest(on bool) {
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	for _, p := range o.pgs {
		p.peering.Store(on)
	}
}

// SetVouchAnswered installs a hook that runs when the meta PG's primary
// answered OSD osd's question about bucket for a write, before the write
// takes its turn; nil removes it. Tests only.
func SetVouchAnswered(f func(osd uint32, bucket string)) {
	if f == nil {
		vouchAnswered.Store(nil)
		return
	}
	vouchAnswered.Store(&f)
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

// PendingCallsForTest is the number of o's calls to its peers that wait
// for a reply.
func (o *OSD) PendingCallsForTest() int { return o.calls.Len() }

// SetClusterReceived installs a hook that runs as an OSD receives a
// cluster message, which it drops unanswered when the hook returns true;
// nil removes it. Tests only.
func SetClusterReceived(f func(osd, from uint32, t osdpb.MsgType) bool) {
	if f == nil {
		clusterReceived.Store(nil)
		return
	}
	clusterReceived.Store(&f)
}

// SetBucketAnswered installs a hook that runs when a recovery at OSD osd
// learnt from the meta PG's primary whether bucket, the bucket of an
// object it copies, exists; nil removes it. Tests only.
func SetBucketAnswered(f func(osd uint32, bucket string)) {
	if f == nil {
		bucketAnswered.Store(nil)
		return
	}
	bucketAnswered.Store(&f)
}

// InstallForTest installs entry e of store PG sid with its body, as a
// recovery does with what it copied.
func (o *OSD) InstallForTest(ctx context.Context, sid uint32, e *osdpb.LogEntry, body []byte) error {
	o.pgMu.Lock()
	p := o.pgs[sid]
	o.pgMu.Unlock()
	return o.install(ctx, p, 0, e, body)
}
