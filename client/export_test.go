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

// WholePartFetches is how many parts o fetched whole (CRC-checked).
func WholePartFetches(o *Object) int { return int(o.wholeParts.Load()) }

// HeldBytes is how many bytes of get replies c's Objects hold.
func HeldBytes(c *Client) int64 {
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	return c.held.total
}

// HeldReplies is how many get replies c's Objects hold, over all sessions.
func HeldReplies(c *Client) int64 {
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	var n int64
	for _, h := range c.held.byConn {
		n += h.msgs
	}
	return n
}

// The most HeldBytes and HeldReplies hold from one session.
const (
	HoldPerConn     = holdPerConn
	HoldMsgsPerConn = holdMsgsPerConn
)

// MessengerStats are the counters of c's messenger.
func MessengerStats(c *Client) msgr.Stats { return c.m.Stats() }
