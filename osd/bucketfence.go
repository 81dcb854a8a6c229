package osd

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Bucket delete fences. A delete checks that no PG's primary holds an
// object of the bucket, then writes the delete, whose apply removes the
// bucket's objects on every OSD. A put acknowledged between the two would
// be removed with it, both calls succeeding, where S3 lets at most one of
// them. So the meta PG's primary first raises a fence on the bucket at
// every OSD up: each takes it with bucketGate held exclusively, so the
// puts it had checked are in its store by then (a primary applies a put
// with the gate held shared, write), and refuses later ones as primary,
// retriably. The emptiness check then sees every put that can still be
// acknowledged, and the delete goes only if it saw none; the fences come
// down after it, or when the check refuses it (a delete whose write
// failed leaves them to lift themselves: it may still roll forward).
//
// A fence lasts fenceTTL from when each OSD took it, by its own clock, so
// that one left by a primary that died lifts itself; the delete is
// written only while fenceTTL/3 has not passed since the fences went up,
// and not at all if the map changed meanwhile (an OSD that came up since
// has none). An OSD that predates fences answers the fence as an unknown
// op: the delete goes on without it, as before, and a put it leads can
// still race the delete.

// fenceTTL is how long a fence stands unless lifted.
const fenceTTL = time.Minute

// fences are the buckets this OSD refuses puts to: until when, raised by
// which delete (its token).
type fences struct {
	mu sync.Mutex
	by map[string]fence
}

type fence struct {
	until time.Time
	token uint64
}

// raise or lift the fence of token on bucket: a lift takes down only the
// fence its own delete raised. REQUIRES: bucketGate held exclusively, so
// that a raise orders after every put checked before.
func (f *fences) set(bucket string, token uint64, lift bool, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if lift {
		if f.by[bucket].token == token {
			delete(f.by, bucket)
		}
		return
	}
	if f.by == nil {
		f.by = make(map[string]fence)
	}
	f.by[bucket] = fence{until: time.Now().Add(ttl), token: token}
}

// fenced reports whether puts to bucket are refused now.
func (f *fences) fenced(bucket string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.by[bucket]
	if ok && !time.Now().Before(fc.until) {
		delete(f.by, bucket)
		return false
	}
	return ok
}

// fenceErr is the answer to a put its bucket's fence refuses.
func fenceErr(bucket string) error {
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "bucket %s is being deleted", bucket)
}

// setFence raises or lifts a fence here, after the puts checked before.
func (o *OSD) setFence(bucket string, token uint64, lift bool, ttl time.Duration) {
	o.bucketGate.Lock()
	defer o.bucketGate.Unlock()
	o.fences.set(bucket, token, lift, ttl)
}

// serveFence takes a peer's BucketFence.
func (o *OSD) serveFence(m *msgr.Message) {
	var q osdpb.BucketFence
	if err := m.DecodeFront(&q); err != nil {
		o.badRequest(m, err)
		return
	}
	to := replyTo(m)
	o.wg.Go(func() {
		ttl := time.Duration(q.TtlMs) * time.Millisecond
		if !q.Lift && (ttl <= 0 || ttl > fenceTTL) {
			ttl = fenceTTL
		}
		o.setFence(q.Bucket, q.Token, q.Lift, ttl)
		o.send(to, osdpb.MsgType_MSG_BUCKET_FENCE_REPLY, &osdpb.BucketReply{Header: o.header(nil, nil)}, nil)
		m.Release()
	})
}

// fenceBucket raises the fence on bucket at every OSD up in mp, ourselves
// included, and returns when it stands: lift takes it down again (from
// a goroutine of its own; a fence it misses lifts itself). An OSD that
// does not answer in time fails it (lifting the others): a delete then
// cannot know what that OSD may still acknowledge. A delete whose write
// failed does not lift: it may still roll forward (its entry is in some
// logs), and the fences lift themselves after fenceTTL.
func (o *OSD) fenceBucket(mp *placement.Map, bucket string) (lift func(), err error) {
	var up []uint32
	for info := range mp.OSDs() {
		if info.Up && info.Id != o.id {
			up = append(up, info.Id)
		}
	}
	token := rand.Uint64() | 1 // nonzero: an older build's lift carries none
	send := func(lift bool) error {
		o.setFence(bucket, token, lift, fenceTTL)
		errs := make([]error, len(up))
		var wg sync.WaitGroup
		for i, id := range up {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RepTimeout)
				defer cancel()
				var rep osdpb.BucketReply
				err := o.call(ctx, id, osdpb.MsgType_MSG_BUCKET_FENCE,
					&osdpb.BucketFence{Bucket: bucket, Lift: lift, TtlMs: uint32(fenceTTL / time.Millisecond), Token: token}, &rep, nil)
				if err == nil {
					err = ops.FromReply(rep.Header)
				}
				if errors.Is(err, ops.ErrInvalidArgument) {
					// A build that predates fences: nothing to wait for.
					o.ratelog.Log(o.log, slog.LevelWarn, "fence unknown", "a bucket delete goes on without fencing an OSD of an older build: a put it leads may race the delete",
						"osd", id, "bucket", bucket)
					err = nil
				}
				if err != nil {
					errs[i] = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "fencing bucket %s at osd.%d for its delete: %v", bucket, id, err)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err // one, so that the reply carries one status
			}
		}
		return nil
	}
	lift = func() { o.wg.Go(func() { _ = send(true) }) }
	if err := send(false); err != nil {
		lift()
		return nil, err
	}
	return lift, nil
}
