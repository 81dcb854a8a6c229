package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// partHold keeps a multipart object's parts for its reader: an overwrite
// or delete of the object deletes the parts it replaced once its primary
// has kept them KeepReplacedFor (30 s) and no reader holds them, and the
// reader reads them part by part from other OSDs, which know nothing of
// the head. So while the reader reads on, it names one of its parts to
// the head's primary (GetObject.hold_parts) every third of the hold the
// primary said (ObjectReply.hold_ms), off the read's path. A reader that
// stops reading stops holding; its parts go a hold later.
type partHold struct {
	every atomic.Int64 // nanoseconds; 0: the OSD holds nothing (older, or keeps nothing)
	last  atomic.Int64 // unix nanoseconds of the last hold sent
	busy  atomic.Bool  // a hold is in flight

	mu      sync.Mutex
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// minHoldEvery bounds how often a reader names its parts, whatever hold
// an OSD says.
const minHoldEvery = 10 * time.Millisecond

// holdSlice is how much of a window WriteTo writes between two chances to
// hold the parts: a consumer that takes a whole window (8 MiB) slower
// than a hold (30 s) keeps them held still.
const holdSlice = 256 << 10

// start arms h for a manifest read under ctx, whose primary holds parts
// for d after each get naming them (d 0: it holds none). The hold's
// clock starts with the get that read the manifest: the delete it guards
// against waits a hold after the replace, which came later.
func (h *partHold) start(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	h.setEvery(d)
	h.last.Store(time.Now().UnixNano())
	h.ctx, h.cancel = context.WithCancel(ctx)
}

// setEvery sets how often to hold from d, the hold an OSD said.
func (h *partHold) setEvery(d time.Duration) { h.every.Store(int64(max(d/3, minHoldEvery))) }

// on reports whether the reader holds its parts.
func (h *partHold) on() bool { return h.every.Load() > 0 }

// stop ends the holding: a hold in flight is cancelled and waited for.
func (h *partHold) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
}

// renewHold names o's parts to the object's primary again if a third of
// the hold has passed since it last did, on a goroutine of its own: a
// read never waits for it, and a failure (the object's PG busy, an older
// OSD) costs only the hold. Safe for concurrent use (ReadAt).
func (o *Object) renewHold() {
	h := &o.hold
	every := time.Duration(h.every.Load())
	if every <= 0 {
		return // a plain object's read, each Read: no clock read
	}
	now := time.Now()
	if now.Sub(time.Unix(0, h.last.Load())) < every || !h.busy.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		h.busy.Store(false)
		return
	}
	h.last.Store(now.UnixNano())
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer h.busy.Store(false)
		// Up to a whole hold: one slow answer (a loaded primary) still
		// renews it, and the next waits for this one (busy).
		ctx, cancel := context.WithTimeout(h.ctx, 3*every)
		defer cancel()
		held, err := o.c.holdParts(ctx, o.bucket, o.key, o.meta.Parts[0].Key)
		switch {
		case err != nil && ctx.Err() == nil:
			o.c.log.Debug("could not hold a multipart object's parts for its reader", "bucket", o.bucket, "key", o.key, "err", err)
		case held > 0:
			// The primary may be another by now, with a hold of its own.
			h.setEvery(held)
		}
	}()
}

// holdParts asks the primary of bucket/key to hold the parts of the
// upload of part (GetObject.hold_parts), and returns the hold it took.
func (c *Client) holdParts(ctx context.Context, bucket, key, part string) (time.Duration, error) {
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_GET_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.GetObject{Header: h, Bucket: bucket, Key: key, HasRange: true, Length: 0, HoldParts: part}
	}, nil, &rep, false)
	if errors.Is(err, ErrNoSuchKey) {
		// An OSD of a build without holds read the object, gone now.
		return 0, nil
	}
	return time.Duration(rep.HoldMs) * time.Millisecond, err
}
