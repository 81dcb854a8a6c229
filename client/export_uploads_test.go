package client

import (
	"bytes"
	"context"

	"github.com/ospreystore/osprey/internal/ops"
)

// NewInternalUpload starts an upload of the SDK's own (as a PUT put whole
// in pieces does), for tests that check listings hide it.
func NewInternalUpload(ctx context.Context, c *Client, bucket, key string) (string, error) {
	return c.newUpload(ctx, bucket, key, PutOptions{}, true)
}

// RemoveHidden deletes an object of the multipart bucket, for tests that
// leave what a lost delete would.
func RemoveHidden(ctx context.Context, c *Client, key string) error { return c.removeHidden(ctx, key) }

// KeepBucketUploads makes RemoveBucket leave the bucket's uploads, as a
// cleanup cut short would, for the test's lifetime.
func KeepBucketUploads(t interface{ Cleanup(func()) }) {
	dropBucketUploads = false
	t.Cleanup(func() { dropBucketUploads = true })
}

// PutPartUnchecked sends part n of an upload without asking first whether
// the upload exists, as a client that skips the SDK's check would, for
// tests of the OSD's own.
func PutPartUnchecked(ctx context.Context, c *Client, bucket, key, uploadID string, n int, data []byte) error {
	tg := target{bucket: ops.MultipartBucket, key: ops.PartKey(uploadID, uint32(n))}
	bd, err := c.readBody(bytes.NewReader(data), c.payloadBuffer(ctx, tg, len(data)))
	if err != nil {
		bd.release()
		return err
	}
	_, err = c.putPart(ctx, bucket, key, uploadID, n, "", 0, bd)
	return err
}
