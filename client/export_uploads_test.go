package client

import "context"

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
