package client

import (
	"context"
	"iter"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr"
)

// ListHidden lists the multipart bucket, for tests that check what uploads
// leave behind.
func ListHidden(ctx context.Context, c *Client) iter.Seq2[ObjectInfo, error] {
	return c.list(ctx, ops.MultipartBucket, ListOptions{})
}

// ListBatch is ListObjects asking each primary for batch entries in its
// first round (twice as many in each further one), so that a small
// listing takes several rounds.
func ListBatch(ctx context.Context, c *Client, bucket string, opts ListOptions, batch int) iter.Seq2[ObjectInfo, error] {
	opts.batch = batch
	return c.list(ctx, bucket, opts)
}

// WholePartFetches is how many parts o fetched whole (CRC-checked).
func WholePartFetches(o *Object) int { return int(o.wholeParts.Load()) }

// CRCBytes is how many bytes o checksummed itself (not the messenger).
func CRCBytes(o *Object) int64 { return o.crcBytes.Load() }

// HeldBytes is how many bytes of get replies c's Objects keep, and
// HeldExternal how many of them in a transport's (registered) memory.
func HeldBytes(c *Client) int64    { return c.held.bytes.Load() }
func HeldExternal(c *Client) int64 { return c.held.external.Load() }

// KeepExternal is the most HeldExternal may be.
const KeepExternal = keepExternal

// MessengerStats are the counters of c's messenger.
func MessengerStats(c *Client) msgr.Stats { return c.m.Stats() }

// BytesReceived is how many bytes c's sessions have received.
func BytesReceived(c *Client) uint64 {
	var n uint64
	for conn := range c.m.Conns() {
		n += conn.Stats().BytesReceived
	}
	return n
}

// SetWaitReleased replaces how PutObjectBytes waits for the messenger to
// let go of its body, for the test's lifetime.
func SetWaitReleased(t interface{ Cleanup(func()) }, f func(wait func())) {
	old := waitReleased
	waitReleased = f
	t.Cleanup(func() { waitReleased = old })
}
