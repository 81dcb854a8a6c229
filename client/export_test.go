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
