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
// the head. So while the reader reads on, it names its manifest's first
// part to the head's primary (GetObject.hold_parts) every third of the
// hold the primary said (ObjectReply.hold_ms), off the read's path. A
// reader that stops reading stops holding; its parts go a hold later.
type partHold struct {
	every time.Duration // 0: the OSD holds nothing (older, or keeps nothing)
	last  atomic.Int64  // unix nanoseconds of the last hold sent
	busy  atomic.Bool   // a hold is in flight

	mu      sync.Mutex
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// minHoldEvery bounds how often a reader names its parts, whatever hold
// an OSD says.
const minHoldEvery = 50 * time.Millisecond

// start arms h for a manifest read under ctx whose primary holds parts for
// d after each get naming them (d 0: it holds none). The get that read
// the manifest counts as the first.
func (h *partHold) start(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	h.every = max(d/3, minHoldEvery)
	h.last.Store(time.Now().UnixNano())
	h.ctx, h.cancel = context.WithCancel(ctx)
}

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
	now := time.Now()
	if h.every <= 0 || now.Sub(time.Unix(0, h.last.Load())) < h.every || !h.busy.CompareAndSwap(false, true) {
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
		ctx, cancel := context.WithTimeout(h.ctx, h.every)
		defer cancel()
		if err := o.c.holdParts(ctx, o.bucket, o.key, o.meta.Parts[0].Key); err != nil && ctx.Err() == nil {
			o.c.log.Debug("could not hold a multipart object's parts for its reader", "bucket", o.bucket, "key", o.key, "err", err)
		}
	}()
}

// holdParts asks the primary of bucket/key to hold the parts of the
// manifest whose first part is part (GetObject.hold_parts): a get of no
// bytes, whose answer is the object as it is now, or NoSuchKey, either of
// which holds them.
func (c *Client) holdParts(ctx context.Context, bucket, key, part string) error {
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_GET_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.GetObject{Header: h, Bucket: bucket, Key: key, HasRange: true, Length: 0, HoldParts: part}
	}, nil, &rep, false)
	if errors.Is(err, ErrNoSuchKey) {
		return nil
	}
	return err
}
