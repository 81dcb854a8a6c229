package client

import (
	"context"
	"errors"
	"hash/crc32"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/ospreystore/osprey/osd/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BucketInfo describes a bucket.
type BucketInfo struct {
	Name    string
	Created time.Time
}

// ObjectInfo describes an object (or, in a listing with a delimiter, a
// common prefix: IsPrefix set and only Key filled).
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	CRC32C       uint32
	LastModified time.Time
	ContentType  string
	UserMetadata map[string]string
	IsPrefix     bool
}

func objectInfo(key string, m *osdpb.ObjectMeta) ObjectInfo {
	return ObjectInfo{Key: key, Size: int64(m.GetSize()), ETag: m.GetEtag(), CRC32C: m.GetCrc32C(),
		LastModified: time.Unix(0, m.GetMtimeUnixNano()), ContentType: m.GetContentType(), UserMetadata: m.GetUserMeta()}
}

// MakeBucket creates a bucket.
func (c *Client) MakeBucket(ctx context.Context, bucket string) error {
	if err := ops.CheckBucketName(bucket); err != nil {
		return err
	}
	var rep osdpb.BucketReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_CREATE_BUCKET, target{bucket: bucket, meta: true}, func(h *osdpb.Header) proto.Message {
		return &osdpb.BucketRequest{Header: h, Bucket: bucket}
	}, nil, &rep, false)
	return err
}

// RemoveBucket deletes an empty bucket.
func (c *Client) RemoveBucket(ctx context.Context, bucket string) error {
	if err := ops.CheckBucketName(bucket); err != nil {
		return err
	}
	var rep osdpb.BucketReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_DELETE_BUCKET, target{bucket: bucket, meta: true}, func(h *osdpb.Header) proto.Message {
		return &osdpb.BucketRequest{Header: h, Bucket: bucket}
	}, nil, &rep, false)
	return err
}

// StatBucket returns a bucket's record; ErrNoSuchBucket if it has none.
func (c *Client) StatBucket(ctx context.Context, bucket string) (BucketInfo, error) {
	if err := ops.CheckBucketName(bucket); err != nil {
		return BucketInfo{}, err
	}
	var rep osdpb.BucketReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_HEAD_BUCKET, target{bucket: bucket, meta: true}, func(h *osdpb.Header) proto.Message {
		return &osdpb.BucketRequest{Header: h, Bucket: bucket}
	}, nil, &rep, false)
	if err != nil {
		return BucketInfo{}, err
	}
	return BucketInfo{Name: rep.Info.GetName(), Created: time.Unix(0, rep.Info.GetCreatedUnixNano())}, nil
}

// BucketExists reports whether a bucket exists.
func (c *Client) BucketExists(ctx context.Context, bucket string) (bool, error) {
	_, err := c.StatBucket(ctx, bucket)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, ErrNoSuchBucket) {
		return false, nil
	}
	return false, err
}

// ListBuckets lists the buckets in ascending name order.
func (c *Client) ListBuckets(ctx context.Context) ([]BucketInfo, error) {
	var rep osdpb.ListBucketsReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_LIST_BUCKETS, target{meta: true}, func(h *osdpb.Header) proto.Message {
		return &osdpb.BucketRequest{Header: h}
	}, nil, &rep, false)
	if err != nil {
		return nil, err
	}
	out := make([]BucketInfo, 0, len(rep.Buckets))
	for _, b := range rep.Buckets {
		out = append(out, BucketInfo{Name: b.Name, Created: time.Unix(0, b.CreatedUnixNano)})
	}
	return out, nil
}

// PutOptions are an object's metadata.
type PutOptions struct {
	ContentType  string
	UserMetadata map[string]string
	// ETag is stored as given (the SDK's multipart code sets S3's); empty
	// leaves it empty.
	ETag string
}

// PutObject stores data as bucket/key, replacing any object there. The
// CRC32C of data travels with it and the primary checks it before it
// commits. At most ops.MaxPutSize bytes.
func (c *Client) PutObject(ctx context.Context, bucket, key string, data []byte, opts PutOptions) (ObjectInfo, error) {
	if err := checkNames(bucket, key); err != nil {
		return ObjectInfo{}, err
	}
	if len(data) > ops.MaxPutSize {
		return ObjectInfo{}, ops.Errorf(ErrEntityTooLarge.Status, "%d bytes; one put takes at most %d", len(data), ops.MaxPutSize)
	}
	meta := &osdpb.ObjectMeta{Size: uint64(len(data)), Crc32C: crc32.Checksum(data, castagnoli),
		ContentType: opts.ContentType, UserMeta: opts.UserMetadata, Etag: opts.ETag}
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_PUT_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.PutObject{Header: h, Bucket: bucket, Key: key, Meta: meta}
	}, data, &rep, false)
	if err != nil {
		return ObjectInfo{}, err
	}
	return objectInfo(key, rep.Meta), nil
}

// GetOptions select a byte range: Length -1 (or Range false) means to the
// end.
type GetOptions struct {
	Range          bool
	Offset, Length int64
}

// GetObject returns the object's bytes (the range asked for) and its info,
// after checking the whole object's CRC32C when the whole object was read.
func (c *Client) GetObject(ctx context.Context, bucket, key string, opts GetOptions) ([]byte, ObjectInfo, error) {
	if err := checkNames(bucket, key); err != nil {
		return nil, ObjectInfo{}, err
	}
	req := func(h *osdpb.Header) proto.Message {
		g := &osdpb.GetObject{Header: h, Bucket: bucket, Key: key}
		if opts.Range {
			g.HasRange, g.Offset, g.Length = true, uint64(opts.Offset), opts.Length
		}
		return g
	}
	var rep osdpb.ObjectReply
	msg, err := c.do(ctx, osdpb.MsgType_MSG_GET_OBJECT, target{bucket: bucket, key: key}, req, nil, &rep, true)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	data := slices.Clone(msg.Data)
	msg.Release()
	info := objectInfo(key, rep.Meta)
	if !opts.Range && len(rep.Meta.GetParts()) == 0 {
		if got := crc32.Checksum(data, castagnoli); got != rep.Meta.GetCrc32C() || int64(len(data)) != info.Size {
			return nil, info, ops.Errorf(ErrBadDigest.Status, "%s/%s: read %d bytes with CRC32C %08x, the object has %d bytes and %08x",
				bucket, key, len(data), got, info.Size, rep.Meta.GetCrc32C())
		}
	}
	return data, info, nil
}

// StatObject returns an object's info.
func (c *Client) StatObject(ctx context.Context, bucket, key string) (ObjectInfo, error) {
	if err := checkNames(bucket, key); err != nil {
		return ObjectInfo{}, err
	}
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_HEAD_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: bucket, Key: key}
	}, nil, &rep, false)
	if err != nil {
		return ObjectInfo{}, err
	}
	return objectInfo(key, rep.Meta), nil
}

// RemoveObject deletes an object; deleting a missing key succeeds, as in S3.
func (c *Client) RemoveObject(ctx context.Context, bucket, key string) error {
	if err := checkNames(bucket, key); err != nil {
		return err
	}
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_DELETE_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: bucket, Key: key}
	}, nil, &rep, false)
	return err
}

// ListOptions select a listing, with S3 ListObjectsV2's semantics.
type ListOptions struct {
	Prefix     string
	Delimiter  string
	StartAfter string
	// MaxKeys bounds the whole listing (0: no bound); pages are fetched
	// as needed.
	MaxKeys int
}

// ListObjects yields the bucket's objects (and common prefixes, with a
// delimiter) in ascending byte order of key. The PGs are spread over their
// primaries: each primary lists its PGs and the pages are merged.
func (c *Client) ListObjects(ctx context.Context, bucket string, opts ListOptions) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		if err := ops.CheckBucketName(bucket); err != nil {
			yield(ObjectInfo{}, err)
			return
		}
		// A missing bucket is an error, not an empty listing.
		if _, err := c.StatBucket(ctx, bucket); err != nil {
			yield(ObjectInfo{}, err)
			return
		}
		after := opts.StartAfter
		sent := 0
		for {
			page, truncated, err := c.listPage(ctx, bucket, opts.Prefix, opts.Delimiter, after)
			if err != nil {
				yield(ObjectInfo{}, err)
				return
			}
			for _, o := range page {
				if !yield(o, nil) {
					return
				}
				sent++
				if opts.MaxKeys > 0 && sent >= opts.MaxKeys {
					return
				}
				after = o.Key
				if o.IsPrefix {
					// Everything under the prefix rolled up into it.
					after = o.Key + "\U0010FFFF"
				}
			}
			if !truncated || len(page) == 0 {
				return
			}
		}
	}
}

// listPage lists up to ops.MaxListKeys entries after `after` from every
// primary and merges them; truncated when any primary has more.
func (c *Client) listPage(ctx context.Context, bucket, prefix, delim, after string) ([]ObjectInfo, bool, error) {
	mp := c.Map()
	pool := c.pool(mp)
	byPrimary := map[uint32][]uint32{}
	for pg := range pool.PgCount {
		if p, ok := mp.Primary(pool.Id, pg); ok {
			byPrimary[p] = append(byPrimary[p], pg)
		}
	}
	type result struct {
		rep *osdpb.ListObjectsReply
		err error
	}
	results := make(chan result, len(byPrimary))
	for _, pgs := range byPrimary {
		go func() {
			var rep osdpb.ListObjectsReply
			// The first PG routes the op to their primary.
			_, err := c.do(ctx, osdpb.MsgType_MSG_LIST_OBJECTS, target{bucket: bucket, pg: pgs[0], hasPG: true}, func(h *osdpb.Header) proto.Message {
				return &osdpb.ListObjects{Header: h, Bucket: bucket, Prefix: prefix, Delimiter: delim, StartAfter: after,
					MaxKeys: ops.MaxListKeys, Pgs: pgs}
			}, nil, &rep, false)
			results <- result{&rep, err}
		}()
	}
	var all []ObjectInfo
	truncated := false
	limit := ""
	var firstErr error
	for range byPrimary {
		r := <-results
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		for _, e := range r.rep.Objects {
			all = append(all, objectInfo(e.Key, e.Meta))
		}
		for _, p := range r.rep.CommonPrefixes {
			all = append(all, ObjectInfo{Key: p, IsPrefix: true})
		}
		if r.rep.Truncated {
			// Entries past this primary's last are not known to be
			// complete: the merged page stops there.
			last := lastKey(r.rep)
			if !truncated || last < limit {
				limit = last
			}
			truncated = true
		}
	}
	if firstErr != nil {
		return nil, false, firstErr
	}
	slices.SortFunc(all, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	all = slices.CompactFunc(all, func(a, b ObjectInfo) bool { return a.IsPrefix && b.IsPrefix && a.Key == b.Key })
	if truncated {
		n := 0
		for n < len(all) && all[n].Key <= limit {
			n++
		}
		all = all[:n]
	}
	return all, truncated, nil
}

func lastKey(r *osdpb.ListObjectsReply) string {
	last := ""
	for _, e := range r.Objects {
		last = max(last, e.Key)
	}
	for _, p := range r.CommonPrefixes {
		last = max(last, p)
	}
	return last
}

func checkNames(bucket, key string) error {
	if err := ops.CheckBucketName(bucket); err != nil {
		return err
	}
	return ops.CheckKey(key)
}
