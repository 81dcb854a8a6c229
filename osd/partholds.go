package osd

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Holds on a replaced multipart object's parts, for its readers. A client
// reads a multipart object part by part, straight from the parts' PGs,
// long after it read the manifest. An overwrite or delete of the object
// deletes the old parts after the store's KeepReplacedFor
// (dropReplaced), so a reader slower than that found its next part gone,
// where S3 finishes a GET that began on the old object (RGW collects
// replaced tails two hours later). A plain object's reader renews its hold
// with every window it reads (store/keep.go); a multipart object's windows
// go to other OSDs, which know nothing of the head.
//
// So the reader names one of its parts to the head's primary, a get that
// reads nothing (GetObject.hold_parts), every third of the hold while it
// reads; the primary holds that part's upload (every part of a manifest
// is of one upload) in the bucket, and defers a delete of replaced parts
// while their upload is held, by itself or, if a map moved the PG since,
// by the PG's primary now (MSG_PART_HOLDS), to which the readers turn. Only
// the versions read are held, only while their readers read on, and at
// most maxPartHold. A new primary waits KeepReplacedFor before its deletes
// (redropRecent), within which the readers have named their parts to it.
type partHolds struct {
	mu sync.Mutex
	// until: when the hold lapses, by bucket and upload id (random, never
	// reused).
	until map[string]time.Time
	// pruneAt: the size of until at which lapsed holds are dropped.
	pruneAt int
	// waiting counts the deletes deferred for readers now.
	waiting atomic.Int64
}

const (
	// maxPartHold bounds how long readers defer a delete of replaced
	// parts: a reader still going then fails, as on RGW, whose garbage
	// collector removes replaced tails after rgw_gc_obj_min_wait (2 h).
	// It bounds what a reader that never ends could keep.
	maxPartHold = 2 * time.Hour
	// maxPartHolds bounds the holds an OSD keeps (about 100 bytes each):
	// past it, a reader's get takes none (hold_ms 0) until holds lapse.
	maxPartHolds = 1 << 17
)

func partHoldName(bucket, upload string) string { return bucket + "\x00" + upload }

// uploadOfPart is the upload id of a part or piece key.
func uploadOfPart(k string) (string, bool) {
	if id, _, ok := ops.ParsePartKey(k); ok {
		return id, true
	}
	if id, _, _, _, ok := ops.ParsePieceKey(k); ok {
		return id, true
	}
	return "", false
}

// uploadsOf is the upload ids of the parts and pieces among keys, each once.
func uploadsOf(keys []string) []string {
	var ids []string
	for _, k := range keys {
		if id, ok := uploadOfPart(k); ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// hold holds the parts of upload in bucket until d from now; false if
// the OSD holds too many already.
func (h *partHolds) hold(bucket, upload string, d time.Duration) bool {
	now := time.Now()
	name := partHoldName(bucket, upload)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until == nil {
		h.until = make(map[string]time.Time)
	}
	if len(h.until) >= h.pruneAt {
		for n, t := range h.until {
			if !t.After(now) {
				delete(h.until, n)
			}
		}
		h.pruneAt = max(1024, 2*len(h.until))
	}
	if _, ok := h.until[name]; !ok && len(h.until) >= maxPartHolds {
		return false
	}
	h.until[name] = now.Add(d)
	return true
}

// heldUntil is when the last hold on the parts of uploads (in bucket)
// lapses; zero if none is held.
func (h *partHolds) heldUntil(bucket string, uploads []string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last time.Time
	for _, id := range uploads {
		if t := h.until[partHoldName(bucket, id)]; t.After(last) {
			last = t
		}
	}
	return last
}

// waitPartHolds waits while a reader holds the parts of e, an entry of a
// PG of pool that replaced a multipart object (partHolds), at most
// maxPartHold; false when the OSD stops meanwhile. A graceful stop
// (FlushDrops) ends waitKeepReplaced's wait but not a reader's hold: the
// parts are left, and the PG's next primary (another OSD, or this one
// restarted) deletes them as it activates (redropRecent), after its own
// wait, once no reader, who now names its parts there, holds them. Else
// a slow reader would break off at every restart of an OSD it read from.
func (o *OSD) waitPartHolds(pool uint32, e *osdpb.LogEntry) bool {
	uploads := uploadsOf(e.DroppedParts)
	if len(uploads) == 0 {
		return true
	}
	giveUp := time.Now().Add(maxPartHold)
	counted := false
	defer func() {
		if counted {
			o.partHolds.waiting.Add(-1)
		}
	}()
	for {
		until := o.partHolds.heldUntil(e.Bucket, uploads)
		if t := o.primaryHolds(pool, e.Bucket, e.Key, uploads); t.After(until) {
			until = t
		}
		if until.After(giveUp) {
			until = giveUp
		}
		d := time.Until(until)
		if d <= 0 {
			return true
		}
		select {
		case <-o.dropNow:
			o.log.Info("stopping: leaving replaced parts a reader holds to the PG's next primary",
				"bucket", e.Bucket, "key", e.Key, "held_for", d.Round(time.Millisecond))
			return false
		default:
		}
		if !counted {
			counted = true
			o.partHolds.waiting.Add(1)
		}
		if !o.waitDrop(d) {
			return false
		}
	}
}

// primaryHolds is when the holds on uploads (parts in bucket) lapse at
// the primary of bucket/key's PG in pool, where that is another OSD: a map
// moved the PG since the entry, and the readers name their parts there
// now. Zero if we lead the PG, or it has none; a primary that cannot tell
// us (it does not answer) is taken to hold them a third of a hold more,
// so that we ask again; one of a build without holds holds none.
func (o *OSD) primaryHolds(poolID uint32, bucket, key string, uploads []string) time.Time {
	mp := o.Map()
	pool, ok := mp.Pool(poolID)
	if !ok {
		return time.Time{}
	}
	primary, ok := mp.Primary(pool.Id, placement.PGOf(pool, bucket, key))
	if !ok || primary == o.id {
		return time.Time{}
	}
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RepTimeout)
	defer cancel()
	var rep osdpb.PartHoldsReply
	err := o.call(ctx, primary, osdpb.MsgType_MSG_PART_HOLDS, &osdpb.PartHolds{Bucket: bucket, Uploads: uploads}, &rep, nil)
	if err == nil {
		err = ops.FromReply(rep.Header)
	}
	switch {
	case err == nil:
		return time.Now().Add(time.Duration(rep.HeldMs) * time.Millisecond)
	case errors.Is(err, ops.ErrInvalidArgument):
		return time.Time{} // an older build: no holds there
	default:
		return time.Now().Add(o.st.KeepReplacedFor() / 3)
	}
}

// servePartHolds answers another OSD's PartHolds.
func (o *OSD) servePartHolds(m *msgr.Message) {
	var q osdpb.PartHolds
	if err := m.DecodeFront(&q); err != nil {
		o.badRequest(m, err)
		return
	}
	if err := ops.CheckBucketName(q.Bucket); err != nil || len(q.Uploads) > ops.MaxParts {
		o.badRequest(m, errors.New("a part holds question names a bad bucket or too many uploads"))
		return
	}
	rep := &osdpb.PartHoldsReply{Header: o.header(nil, nil)}
	if d := time.Until(o.partHolds.heldUntil(q.Bucket, q.Uploads)); d > 0 {
		rep.HeldMs = msOf(d + time.Millisecond)
	}
	o.send(replyTo(m), osdpb.MsgType_MSG_PART_HOLDS_REPLY, rep, nil)
	m.Release()
}

// msOf is d in whole milliseconds, for a uint32 field.
func msOf(d time.Duration) uint32 { return uint32(min(max(d.Milliseconds(), 0), math.MaxUint32)) }

// waitDrop waits d before a delete of replaced parts, less if a graceful
// stop begins (FlushDrops); false when the OSD stops meanwhile.
func (o *OSD) waitDrop(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-o.dropNow:
	case <-o.ctx.Done():
		return false
	}
	return true
}
