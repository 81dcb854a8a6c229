package client

import (
	"bytes"
	"context"
	"iter"
	"sync/atomic"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// ListHidden lists the multipart bucket, for tests that check what uploads
// leave behind.
func ListHidden(ctx context.Context, c *Client) iter.Seq2[ObjectInfo, error] {
	return c.list(ctx, ops.MultipartBucket, ListOptions{})
}

// ListHiddenUnder lists the multipart bucket under prefix (an upload's
// parts: "ID/"), as a client that knows an upload id could.
func ListHiddenUnder(ctx context.Context, c *Client, prefix string) iter.Seq2[ObjectInfo, error] {
	return c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: prefix})
}

// GetHidden reads an object of the multipart bucket (a part) by its key,
// and HeadHidden its metadata, as a client that knows its key could.
func GetHidden(ctx context.Context, c *Client, key string) ([]byte, error) {
	var crcd atomic.Int64
	_, msg, err := c.getRangeOnce(ctx, ops.MultipartBucket, key, 0, -1, nil, true, &crcd)
	if err != nil {
		return nil, err
	}
	defer msg.Release()
	return bytes.Clone(msg.Data), nil
}

func HeadHidden(ctx context.Context, c *Client, key string) error {
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_HEAD_OBJECT, target{bucket: ops.MultipartBucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: ops.MultipartBucket, Key: key}
	}, nil, &rep, false)
	return err
}

// PutManifest puts bucket/key as a multipart manifest naming parts (keys
// of the multipart bucket), as only COMPLETE_UPLOAD should make one: a
// hand-made one, for the tests that check the OSDs refuse it.
func PutManifest(ctx context.Context, c *Client, bucket, key string, parts []string) error {
	meta := &osdpb.ObjectMeta{}
	for i, p := range parts {
		meta.Parts = append(meta.Parts, &osdpb.PartRef{Number: uint32(i + 1), Key: p, Size: 1})
		meta.Size++
	}
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_PUT_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.PutObject{Header: h, Bucket: bucket, Key: key, Meta: meta}
	}, nil, &rep, false)
	return err
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
