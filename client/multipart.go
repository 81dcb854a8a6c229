package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// ObjectPart is one uploaded part of a multipart upload.
type ObjectPart struct {
	PartNumber   int
	ETag         string
	Size         int64
	CRC32C       uint32
	LastModified time.Time
}

// CompletePart names a part for CompleteMultipartUpload.
type CompletePart struct {
	PartNumber int
	ETag       string
}

// MultipartUpload is an upload in progress.
type MultipartUpload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// NewMultipartUpload starts a multipart upload of bucket/key and returns
// its id. The object appears only when the upload completes.
func (c *Client) NewMultipartUpload(ctx context.Context, bucket, key string, opts PutOptions) (string, error) {
	if err := checkNames(bucket, key); err != nil {
		return "", err
	}
	var rep osdpb.UploadReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_CREATE_UPLOAD, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key,
			Meta: &osdpb.ObjectMeta{ContentType: opts.ContentType, UserMeta: opts.UserMetadata}}
	}, nil, &rep, false)
	return rep.UploadId, err
}

// PutObjectPart uploads part partNumber (1 to 10000) of an upload: size
// bytes of r, at most 64 MiB. Parts go to different PGs, so they can be
// uploaded in parallel.
func (c *Client) PutObjectPart(ctx context.Context, bucket, key, uploadID string, partNumber int, r io.Reader, size int64) (ObjectPart, error) {
	if err := checkNames(bucket, key); err != nil {
		return ObjectPart{}, err
	}
	if err := ops.CheckUploadID(uploadID); err != nil {
		return ObjectPart{}, err
	}
	if partNumber < 1 || partNumber > ops.MaxParts {
		return ObjectPart{}, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "part number %d: must be 1 to %d", partNumber, ops.MaxParts)
	}
	if size < 0 || size > ops.MaxPutSize {
		return ObjectPart{}, ops.Errorf(ErrEntityTooLarge.Status, "part of %d bytes: at most %d", size, ops.MaxPutSize)
	}
	// The part is an object of its own PG, apart from the upload's record,
	// so the OSD that stores it cannot tell whether the upload exists: ask
	// first, as RGW reads an upload's meta object before each part, so a
	// part of an unknown or aborted upload is NoSuchUpload and not an
	// orphan. (An abort racing this part can still leave one behind.)
	if err := c.uploadExists(ctx, bucket, key, uploadID); err != nil {
		return ObjectPart{}, err
	}
	tg := target{bucket: ops.MultipartBucket, key: ops.PartKey(uploadID, uint32(partNumber))}
	bd, err := c.readBody(r, c.payloadBuffer(ctx, tg, int(size)))
	if err != nil {
		bd.release()
		return ObjectPart{}, fmt.Errorf("client: reading part %d: %w", partNumber, err)
	}
	return c.putPart(ctx, bucket, key, uploadID, partNumber, bd)
}

// putPart uploads bd (and releases it) as part partNumber. With
// Options.MD5 the OSD's ETag for it, the part's MD5, is checked against
// the client's; without, the OSD's is taken: it is of bytes whose CRC32C
// the OSD checked.
func (c *Client) putPart(ctx context.Context, bucket, key, uploadID string, partNumber int, bd body) (ObjectPart, error) {
	defer bd.release()
	partKey := ops.PartKey(uploadID, uint32(partNumber))
	meta := &osdpb.ObjectMeta{Size: uint64(bd.n), Crc32C: bd.crc}
	var rep osdpb.UploadReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_UPLOAD_PART, target{bucket: ops.MultipartBucket, key: partKey}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key, UploadId: uploadID, PartNumber: uint32(partNumber), Meta: meta}
	}, bd.buf, &rep, false)
	if err != nil {
		return ObjectPart{}, err
	}
	if got := rep.Part.GetEtag(); bd.md5 != nil && got != bd.etag() {
		return ObjectPart{}, ops.Errorf(ErrBadDigest.Status, "part %d: the OSD computed ETag %s, we %s", partNumber, got, bd.etag())
	}
	return ObjectPart{PartNumber: partNumber, ETag: rep.Part.GetEtag(), Size: int64(bd.n), CRC32C: bd.crc}, nil
}

// CompleteMultipartUpload makes the object from the parts listed, which
// must be in ascending order, all but the last at least 5 MiB, with the
// ETags their uploads returned (InvalidPartOrder, EntityTooSmall,
// InvalidPart otherwise).
func (c *Client) CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []CompletePart) (ObjectInfo, error) {
	if err := checkNames(bucket, key); err != nil {
		return ObjectInfo{}, err
	}
	if err := ops.CheckUploadID(uploadID); err != nil {
		return ObjectInfo{}, err
	}
	refs := make([]*osdpb.PartRef, len(parts))
	for i, p := range parts {
		refs[i] = &osdpb.PartRef{Number: uint32(p.PartNumber), Etag: strings.Trim(p.ETag, `"`)}
	}
	var rep osdpb.UploadReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_COMPLETE_UPLOAD, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key, UploadId: uploadID, Parts: refs}
	}, nil, &rep, false)
	if err != nil {
		return ObjectInfo{}, err
	}
	return objectInfo(key, rep.Meta), nil
}

// AbortMultipartUpload ends an upload and deletes its parts.
func (c *Client) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	if err := checkNames(bucket, key); err != nil {
		return err
	}
	if err := ops.CheckUploadID(uploadID); err != nil {
		return err
	}
	var rep osdpb.UploadReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_ABORT_UPLOAD, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key, UploadId: uploadID}
	}, nil, &rep, false)
	if err != nil {
		return err
	}
	return c.removeParts(ctx, uploadID)
}

// removeParts deletes every part of an upload that is gone.
func (c *Client) removeParts(ctx context.Context, uploadID string) error {
	var keys []string
	for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: uploadID + "/"}) {
		if err != nil {
			return err
		}
		keys = append(keys, o.Key)
	}
	for _, k := range keys {
		var rep osdpb.ObjectReply
		if _, err := c.do(ctx, osdpb.MsgType_MSG_DELETE_OBJECT, target{bucket: ops.MultipartBucket, key: k}, func(h *osdpb.Header) proto.Message {
			return &osdpb.ObjectRequest{Header: h, Bucket: ops.MultipartBucket, Key: k}
		}, nil, &rep, false); err != nil {
			return err
		}
	}
	return nil
}

// uploadExists checks that an upload's record is there (NoSuchUpload).
func (c *Client) uploadExists(ctx context.Context, bucket, key, uploadID string) error {
	var rep osdpb.ObjectReply
	rec := ops.UploadKey(bucket, key, uploadID)
	_, err := c.do(ctx, osdpb.MsgType_MSG_HEAD_OBJECT, target{bucket: ops.MultipartBucket, key: rec}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: ops.MultipartBucket, Key: rec}
	}, nil, &rep, false)
	if errors.Is(err, ErrNoSuchKey) {
		return ops.Errorf(osdpb.Status_NO_SUCH_UPLOAD, "no upload %s of %s/%s", uploadID, bucket, key)
	}
	return err
}

// ListObjectParts lists an upload's parts in part number order.
func (c *Client) ListObjectParts(ctx context.Context, bucket, key, uploadID string) ([]ObjectPart, error) {
	if err := checkNames(bucket, key); err != nil {
		return nil, err
	}
	if err := ops.CheckUploadID(uploadID); err != nil {
		return nil, err
	}
	if err := c.uploadExists(ctx, bucket, key, uploadID); err != nil {
		return nil, err
	}
	var parts []ObjectPart
	for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: uploadID + "/"}) {
		if err != nil {
			return nil, err
		}
		_, n, ok := ops.ParsePartKey(o.Key)
		if !ok {
			continue
		}
		parts = append(parts, ObjectPart{PartNumber: int(n), ETag: o.ETag, Size: o.Size, CRC32C: o.CRC32C, LastModified: o.LastModified})
	}
	return parts, nil
}

// ListMultipartUploads lists the uploads in progress in bucket whose keys
// start with prefix, by key.
func (c *Client) ListMultipartUploads(ctx context.Context, bucket, prefix string) ([]MultipartUpload, error) {
	if err := ops.CheckBucketName(bucket); err != nil {
		return nil, err
	}
	var ups []MultipartUpload
	for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: bucket + "/" + prefix}) {
		if err != nil {
			return nil, err
		}
		if b, k, id, ok := ops.ParseUploadKey(o.Key); ok && b == bucket {
			ups = append(ups, MultipartUpload{Key: k, UploadID: id, Initiated: o.LastModified})
		}
	}
	return ups, nil
}
