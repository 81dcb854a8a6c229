package client

import (
	"context"
	"iter"

	"github.com/ospreystore/osprey/osd/ops"
)

// ListHidden lists the multipart bucket, for tests that check what uploads
// leave behind.
func ListHidden(ctx context.Context, c *Client) iter.Seq2[ObjectInfo, error] {
	return c.list(ctx, ops.MultipartBucket, ListOptions{})
}

// WholePartFetches is how many parts o fetched whole (CRC-checked).
func WholePartFetches(o *Object) int { return int(o.wholeParts.Load()) }
