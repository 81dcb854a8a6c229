package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	"golang.org/x/net/http/httpguts"
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
	CRC32C       uint32 // of the whole object, a multipart one's too (combined from its parts')
	LastModified time.Time
	ContentType  string
	UserMetadata map[string]string
	IsPrefix     bool
	// Parts are a multipart object's parts, in order (PartNumber, ETag,
	// Size and CRC32C); nil for an object put whole (with
	// PutOptions.WholeETag, one larger than an op too). S3's GET of one
	// partNumber needs their sizes.
	Parts []ObjectPart
	// internal: an upload record of the SDK's own (MultipartUpload.Internal).
	internal bool
	// meta is what the OSD said of the object (CollectGarbage reads the
	// hidden keys of its parts).
	meta *osdpb.ObjectMeta
}

func objectInfo(key string, m *osdpb.ObjectMeta) ObjectInfo {
	info := ObjectInfo{Key: key, Size: int64(m.GetSize()), ETag: m.GetEtag(), CRC32C: wholeCRC32C(m),
		LastModified: time.Unix(0, m.GetMtimeUnixNano()), ContentType: m.GetContentType(), UserMetadata: m.GetUserMeta(),
		internal: m.GetInternal(), meta: m}
	// A part in pieces is named by its pieces, in a row, each with the
	// part's number and ETag; an object put whole in pieces has none
	// (number 0).
	for _, p := range m.GetParts() {
		n := int(p.GetNumber())
		if n == 0 {
			continue
		}
		if last := len(info.Parts) - 1; last >= 0 && info.Parts[last].PartNumber == n {
			info.Parts[last].Size += int64(p.GetSize())
			info.Parts[last].CRC32C = ops.CRC32CCombine(info.Parts[last].CRC32C, p.GetCrc32C(), int64(p.GetSize()))
			continue
		}
		info.Parts = append(info.Parts, ObjectPart{PartNumber: n, ETag: p.GetEtag(), Size: int64(p.GetSize()),
			CRC32C: p.GetCrc32C(), LastModified: info.LastModified})
	}
	return info
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

// RemoveBucket deletes a bucket that holds no objects. Its multipart
// uploads in progress go with it, with their parts, as on S3.
func (c *Client) RemoveBucket(ctx context.Context, bucket string) error {
	if err := ops.CheckBucketName(bucket); err != nil {
		return err
	}
	var rep osdpb.BucketReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_DELETE_BUCKET, target{bucket: bucket, meta: true}, func(h *osdpb.Header) proto.Message {
		return &osdpb.BucketRequest{Header: h, Bucket: bucket}
	}, nil, &rep, false)
	if err != nil {
		return err
	}
	c.dropUploads(ctx, bucket)
	return nil
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

// ListBuckets lists the buckets the client may read, in ascending name
// order.
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

// PutOptions are an object's metadata and how it is uploaded.
type PutOptions struct {
	ContentType  string
	UserMetadata map[string]string
	// PartSize: objects larger than this (or of unknown size) go by
	// multipart upload in parts of this size. Default 16 MiB; at least
	// 5 MiB (S3's smallest part) and at most 64 MiB (one message).
	PartSize int64
	// Concurrency is the number of parts in flight: 0 for the default,
	// 4; negative is InvalidArgument.
	Concurrency int
	// WholeETag keeps an object larger than PartSize one part, stored in
	// pieces of PartSize, so that it is what S3 makes of a single PUT:
	// its ETag that of an object put in one op (the MD5 of the body, with
	// Options.MD5) rather than the multipart "MD5-of-MD5s-N", and no
	// parts (ObjectInfo.Parts nil). The S3 gateway puts with it.
	WholeETag bool
	// IfMatch makes the put conditional (S3's If-Match): it replaces the
	// object only if the key holds one whose ETag is this one (quotes
	// optional; a comma-separated list of them, as in HTTP, or "*" for
	// any object), else ErrPreconditionFailed, or ErrNoSuchKey if the key
	// holds none.
	IfMatch string
	// IfNoneMatch "*" makes the put conditional (S3's If-None-Match): it
	// writes only if the key holds no object, else ErrPreconditionFailed.
	// Any other value but "" is ErrInvalidArgument.
	IfNoneMatch string
}

// condition is the OSD's form of an IfMatch and IfNoneMatch pair (nil
// when both are empty): the PG's primary checks it atomically with the
// write, so of two puts with If-None-Match "*" to one key one fails. A
// large object's condition is checked when its upload is completed,
// after its parts went up.
func condition(ifMatch, ifNoneMatch string) (*osdpb.Condition, error) {
	if ifMatch == "" && ifNoneMatch == "" {
		return nil, nil
	}
	c := &osdpb.Condition{}
	switch ifNoneMatch {
	case "":
	case "*":
		c.IfNoneMatchStar = true
	default:
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "If-None-Match %.40q: a write takes only *", ifNoneMatch)
	}
	if ifMatch != "" {
		tags, err := ops.ParseETagList(ifMatch)
		if err != nil {
			return nil, err
		}
		c.IfMatch = tags
	}
	return c, nil
}

func (o *PutOptions) defaults() error {
	if o.PartSize == 0 {
		o.PartSize = 16 << 20
	}
	if o.PartSize < ops.MinPartSize || o.PartSize > ops.MaxPutSize {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "PartSize %d: must be %d to %d", o.PartSize, ops.MinPartSize, ops.MaxPutSize)
	}
	if o.Concurrency < 0 {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "Concurrency %d: the parts in flight, or 0 for the default", o.Concurrency)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	return nil
}

// checkUserMetadata returns m with its keys lower-cased, as S3 keeps them
// (x-amz-meta-* names are case-insensitive), or ErrInvalidArgument for
// what could not travel through the S3 gateway whole: a key that is not
// an HTTP header name (it goes as x-amz-meta-KEY), a value with a line
// break or another control character, two keys that differ in case only.
// A key may begin with ":" only as the gateway's record of one of the
// standard headers it keeps (ops.StoredHeaders: ":cache-control"), which
// it sends back as that header.
func checkUserMetadata(m map[string]string) (map[string]string, error) {
	lower := true
	for k, v := range m {
		if strings.HasPrefix(k, ":") {
			if _, ok := ops.StoredHeaderOf(strings.ToLower(k)); !ok {
				return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "user metadata key %q: a key that begins with ':' names a header the S3 gateway keeps (:cache-control, :content-disposition, :content-encoding, :content-language, :expires)", k)
			}
		} else if !httpguts.ValidHeaderFieldName(k) {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "user metadata key %q: not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", k)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "user metadata %q: its value holds a line break or another control character", k)
		}
		lower = lower && strings.ToLower(k) == k
	}
	if lower {
		return m, nil // the common case, with no copy
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		lk := strings.ToLower(k)
		if _, dup := out[lk]; dup {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "user metadata keys differ in case only (%q): S3 keeps them lower-cased, as one", lk)
		}
		out[lk] = v
	}
	return out, nil
}

// checkPut checks a put of size bytes (-1: unknown) as bucket/key before
// anything is read or sent, fills in opts' defaults and returns its
// condition, if any.
func checkPut(bucket, key string, size int64, opts *PutOptions) (*osdpb.Condition, error) {
	if err := checkNames(bucket, key); err != nil {
		return nil, err
	}
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	cond, err := condition(opts.IfMatch, opts.IfNoneMatch)
	if err != nil {
		return nil, err
	}
	if opts.UserMetadata, err = checkUserMetadata(opts.UserMetadata); err != nil {
		return nil, err
	}
	if !httpguts.ValidHeaderFieldValue(opts.ContentType) {
		// It goes back as a Content-Type header through the gateway.
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "content type %q: holds a line break or another control character", opts.ContentType)
	}
	if size < -1 {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "size %d: the body's length, or -1 for one read to its end", size)
	}
	if size > int64(ops.MaxParts)*opts.PartSize {
		return nil, ops.Errorf(ErrEntityTooLarge.Status, "%d bytes: more than %d parts of %d", size, ops.MaxParts, opts.PartSize)
	}
	return cond, nil
}

// PutObject stores size bytes from r as bucket/key, replacing any object
// there; size -1 reads r to its end. Objects up to PartSize go in one op,
// larger ones by multipart upload with Concurrency parts in flight (their
// ETag is S3's multipart one, "MD5-of-MD5s-N", unless WholeETag). The
// CRC32C of every body travels with it and the primary checks it before
// it commits.
func (c *Client) PutObject(ctx context.Context, bucket, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	cond, err := checkPut(bucket, key, size, &opts)
	if err != nil {
		return ObjectInfo{}, err
	}
	r = &bodyReader{ctx: ctx, r: r, left: size}
	var whole *wholeDigest // nil without Options.MD5
	wholeETag := opts.WholeETag && (size < 0 || size > opts.PartSize)
	if wholeETag {
		whole = c.newWholeDigest()
		defer whole.close()
		r = io.TeeReader(r, whole)
	}
	// Read the first part straight into a send buffer: if it is all
	// there is, one put does.
	first := int(opts.PartSize)
	if size >= 0 && size <= opts.PartSize {
		first = int(size)
	}
	tg := target{bucket: bucket, key: key}
	buf, via := c.payloadFor(ctx, tg, first)
	bd, err := c.readBody(r, buf)
	if size >= 0 && size <= opts.PartSize {
		if err != nil {
			bd.release()
			return ObjectInfo{}, fmt.Errorf("client: reading %d bytes of %s/%s: %w", size, bucket, key, noneIsShort(err))
		}
		return c.putSingle(ctx, bucket, key, bd, via, opts, cond)
	}
	var more [1]byte
	k := 0
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
	case err != nil:
		return ObjectInfo{}, err
	default:
		// A full part: one byte more says whether there is a second.
		k, err = io.ReadFull(r, more[:])
		if err != nil && !errors.Is(err, io.EOF) {
			bd.release()
			return ObjectInfo{}, err
		}
	}
	if k == 0 {
		if size >= 0 && int64(bd.n) != size {
			bd.release()
			return ObjectInfo{}, shortBody(bucket+"/"+key, int64(bd.n), size)
		}
		return c.putSingle(ctx, bucket, key, bd, via, opts, cond)
	}
	rest := io.MultiReader(bytes.NewReader(more[:]), r)
	if wholeETag {
		return c.putWhole(ctx, bucket, key, bd, rest, size, whole, opts, cond)
	}
	return c.putMultipart(ctx, bucket, key, bd, rest, size, opts, cond)
}

// bodyReader is PutObject's body as the put reads it: it ends the put once
// ctx ends, checked before each Read of the caller's reader (a Read under
// way is not interrupted), and reads no more than a known size, as a put
// in one op always did: the bytes after it are the caller's. It passes on
// the reader's MD5 (MD5Reader).
type bodyReader struct {
	ctx  context.Context
	r    io.Reader
	left int64 // bytes still to read; -1: to the end
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	return n, err
}

// ReadMD5 implements MD5Reader: the caller's reader's, if it has one.
func (b *bodyReader) ReadMD5() (sum []byte, n int64, ok bool) {
	if mr, is := b.r.(MD5Reader); is {
		return mr.ReadMD5()
	}
	return nil, 0, false
}

// noneIsShort is readBody's error for a body of a known size > 0: io.EOF
// (no byte) is as short as any, io.ErrUnexpectedEOF, so that no caller
// takes a put that failed for a body's normal end.
func noneIsShort(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// shortBody is the error of a put whose body ended before its size: it
// wraps io.ErrUnexpectedEOF, as io.ReadFull's does.
func shortBody(what string, got, size int64) error {
	return fmt.Errorf("client: %s: the body ended after %d of its %d bytes: %w", what, got, size, io.ErrUnexpectedEOF)
}

// PutObjectBytes stores data as bucket/key, as PutObject of a reader of
// data does, but sends the bytes from data itself, with no copy, where
// the transport can (TCP writes them to the socket from there; RDMA
// copies them into registered memory, as PutObject reads into it), in one
// op or, above PartSize, in parts of it. So data must not change until
// PutObjectBytes returns, and it returns only once the messenger has let
// go of all of it: once the put is answered, or, when ctx ends first or
// the put fails, once every send of it was written or its connection
// failed.
func (c *Client) PutObjectBytes(ctx context.Context, bucket, key string, data []byte, opts PutOptions) (ObjectInfo, error) {
	size := int64(len(data))
	if size == 0 {
		return c.PutObject(ctx, bucket, key, bytes.NewReader(nil), 0, opts)
	}
	cond, err := checkPut(bucket, key, size, &opts)
	if err != nil {
		return ObjectInfo{}, err
	}
	src := &inPlace{data: data}
	defer waitReleased(src.held.Wait)
	first, _ := src.next(c, int(min(size, opts.PartSize)))
	if size <= opts.PartSize {
		_, via := c.payloadFor(ctx, target{bucket: bucket, key: key}, 0)
		return c.putSingle(ctx, bucket, key, first, via, opts, cond)
	}
	if opts.WholeETag {
		whole := c.newWholeDigest()
		defer whole.close()
		whole.Write(data)
		return c.putWhole(ctx, bucket, key, first, src, size, whole, opts, cond)
	}
	return c.putMultipart(ctx, bucket, key, first, src, size, opts, cond)
}

// waitReleased waits (wait) until the messenger has let go of a
// PutObjectBytes' bytes; a variable so that a test can see a put get
// there.
var waitReleased = func(wait func()) { wait() }

// putSingle puts bd (and releases it) as bucket/key in one op, first
// through via when its map is still the current one; cond, when not nil,
// goes as a conditional put (MSG_PUT_OBJECT_IF, which an OSD without
// conditions refuses rather than ignores).
func (c *Client) putSingle(ctx context.Context, bucket, key string, bd body, via *routed, opts PutOptions, cond *osdpb.Condition) (ObjectInfo, error) {
	defer bd.release()
	meta := &osdpb.ObjectMeta{Size: uint64(bd.n), Crc32C: bd.crc,
		ContentType: opts.ContentType, UserMeta: opts.UserMetadata, Etag: bd.etag()}
	t := osdpb.MsgType_MSG_PUT_OBJECT
	if cond != nil {
		t = osdpb.MsgType_MSG_PUT_OBJECT_IF
	}
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, t, target{bucket: bucket, key: key, via: via}, func(h *osdpb.Header) proto.Message {
		return &osdpb.PutObject{Header: h, Bucket: bucket, Key: key, Meta: meta, Condition: cond}
	}, bd.buf, &rep, false)
	if err != nil {
		return ObjectInfo{}, err
	}
	return objectInfo(key, rep.Meta), nil
}

// putMultipart uploads first and then the rest of the object from r in
// parts of opts.PartSize, Concurrency at a time, and completes the
// upload; on failure it aborts it.
func (c *Client) putMultipart(ctx context.Context, bucket, key string, first body, r io.Reader, size int64, opts PutOptions, cond *osdpb.Condition) (ObjectInfo, error) {
	id, err := c.startOwnUpload(ctx, bucket, key, opts, false)
	if err != nil {
		first.release()
		return ObjectInfo{}, err
	}
	var (
		mu    sync.Mutex
		parts []CompletePart
	)
	total, err := c.putStream(ctx, first, r, opts, func(n int) target {
		return target{bucket: ops.MultipartBucket, key: ops.PartKey(id, uint32(n))}
	}, func(ctx context.Context, n int, bd body) error {
		p, err := c.putPart(ctx, bucket, key, id, n, "", 0, bd)
		if err != nil {
			return fmt.Errorf("part %d: %w", n, err)
		}
		mu.Lock()
		parts = append(parts, CompletePart{PartNumber: n, ETag: p.ETag})
		mu.Unlock()
		return nil
	})
	if err == nil && size >= 0 && total != size {
		err = shortBody(bucket+"/"+key, total, size)
	}
	if err != nil {
		c.abortFailed(ctx, bucket, key, id)
		return ObjectInfo{}, err
	}
	slices.SortFunc(parts, func(a, b CompletePart) int { return a.PartNumber - b.PartNumber })
	meta, err := c.complete(ctx, bucket, key, id, parts, false, cond)
	if err != nil {
		c.abortRefused(ctx, bucket, key, id, err)
		return ObjectInfo{}, err
	}
	return objectInfo(key, meta), nil
}

// putWhole puts an object larger than one op as S3 puts a single PUT
// (PutOptions.WholeETag): an upload of one part, stored in pieces, whose
// completion gives the object that part's ETag, the whole body's digest.
func (c *Client) putWhole(ctx context.Context, bucket, key string, first body, r io.Reader, size int64, whole *wholeDigest, opts PutOptions, cond *osdpb.Condition) (ObjectInfo, error) {
	// Internal: S3 shows no upload for a PUT (ListMultipartUploads
	// skips it), and one left by a writer that died is AbortStaleUploads'.
	id, err := c.startOwnUpload(ctx, bucket, key, opts, true)
	if err != nil {
		first.release()
		return ObjectInfo{}, err
	}
	p, err := c.putPieces(ctx, bucket, key, id, 1, ops.NewPieceSet(), first, r, size, whole, opts)
	if err != nil {
		c.abortFailed(ctx, bucket, key, id)
		return ObjectInfo{}, err
	}
	meta, err := c.complete(ctx, bucket, key, id, []CompletePart{{PartNumber: 1, ETag: p.ETag}}, true, cond)
	if err != nil {
		c.abortRefused(ctx, bucket, key, id, err)
		return ObjectInfo{}, err
	}
	return objectInfo(key, meta), nil
}

// abortRefused aborts an upload the SDK made for a conditional put whose
// completion err says the condition was false: the OSD wrote nothing, so
// the parts are garbage. Any other failure of a completion may be one
// that was applied and whose answer was lost, whose parts are the
// object's: those uploads stay.
func (c *Client) abortRefused(ctx context.Context, bucket, key, id string, err error) {
	if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrNoSuchKey) {
		c.abortFailed(ctx, bucket, key, id)
	}
}

// ownCreateGrace is how long startOwnUpload still waits for a create's
// answer once its caller has given up.
const ownCreateGrace = 5 * time.Second

// startOwnUpload starts an upload the SDK itself finishes or aborts (a
// PutObject in parts). A create the caller gives up on while it is in
// flight may still make the upload at its OSD, and then nobody would
// know its ID to abort it: a user's Ctrl-C would leave an upload in the
// bucket's listing. So the create outlives the caller's context by up to
// ownCreateGrace for its answer, and an upload made for a caller who has
// gone is aborted at once.
func (c *Client) startOwnUpload(ctx context.Context, bucket, key string, opts PutOptions, internal bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(ownCreateGrace, cancel) })
	defer stop()
	id, err := c.newUpload(cctx, bucket, key, opts, internal)
	var oe *ops.Error
	switch {
	case ctx.Err() == nil || errors.As(err, &oe): // the OSD's answer stands
		return id, err
	case err == nil:
		c.abortFailed(ctx, bucket, key, id)
	case cctx.Err() != nil:
		c.log.Warn("client: a cancelled put's upload was still being made when its wait ended; if it was made, a stale-upload cleanup (osprey rm --incomplete --internal) removes it",
			"bucket", bucket, "key", key, "internal", internal, "err", err)
	}
	return "", ctx.Err()
}

// abortFailed aborts an upload the SDK made and could not finish.
func (c *Client) abortFailed(ctx context.Context, bucket, key, id string) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := c.AbortMultipartUpload(ctx, bucket, key, id); err != nil {
		c.log.Warn("client: could not abort a failed put's upload: it stays, with its parts, until aborted (osprey rm --incomplete, or S3's AbortMultipartUpload)",
			"bucket", bucket, "key", key, "upload", id, "err", err)
	}
}

// putStream reads r in spans of opts.PartSize, first already read, each
// straight into a send buffer for the object tgOf(n) names, and hands span
// n (from 1) to put, which releases it, with Concurrency in flight: so
// memory is Concurrency spans whatever the size. It returns the bytes
// read, and the first error, after which it stops reading and cancels the
// puts in flight.
func (c *Client) putStream(ctx context.Context, first body, r io.Reader, opts PutOptions, tgOf func(n int) target,
	put func(ctx context.Context, n int, bd body) error) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, opts.Concurrency)
		total    int64
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	for n := 1; ; n++ {
		if n > ops.MaxParts {
			fail(ops.Errorf(ErrEntityTooLarge.Status, "more than %d spans of %d bytes", ops.MaxParts, opts.PartSize))
			break
		}
		bd, rerr := first, error(nil)
		if n > 1 {
			bd, rerr = c.nextBody(ctx, r, tgOf(n), int(opts.PartSize))
			if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
				fail(rerr)
				break
			}
			if bd.n == 0 {
				bd.release()
				break
			}
		}
		total += int64(bd.n)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			bd.release()
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := put(ctx, n, bd); err != nil {
				fail(err)
			}
		})
		if rerr != nil {
			break
		}
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return total, firstErr
}

// StatObject returns an object's info.
func (c *Client) StatObject(ctx context.Context, bucket, key string) (ObjectInfo, error) {
	if err := checkNames(bucket, key); err != nil {
		return ObjectInfo{}, err
	}
	meta, err := c.head(ctx, bucket, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	return objectInfo(key, meta), nil
}

// RemoveObject deletes an object; deleting a missing key succeeds, as in S3.
func (c *Client) RemoveObject(ctx context.Context, bucket, key string) error {
	return c.remove(ctx, bucket, key, nil)
}

// RemoveObjectIf deletes an object only if the key holds one whose ETag is
// ifMatch (S3's conditional delete, If-Match on DELETE): quotes optional, a
// comma-separated list of ETags as in HTTP, or "*" for any object. A false
// condition is ErrPreconditionFailed, a key that holds no object
// ErrNoSuchKey; either way nothing is deleted. The PG's primary checks the
// condition atomically with the delete, so a put that replaced the object
// in between makes it fail rather than be deleted.
func (c *Client) RemoveObjectIf(ctx context.Context, bucket, key, ifMatch string) error {
	if ifMatch == "" {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "a conditional delete without If-Match")
	}
	cond, err := condition(ifMatch, "")
	if err != nil {
		return err
	}
	return c.remove(ctx, bucket, key, cond)
}

// remove deletes bucket/key, as a conditional delete (MSG_DELETE_OBJECT_IF,
// which an OSD without conditional deletes refuses rather than ignores)
// when cond is not nil.
func (c *Client) remove(ctx context.Context, bucket, key string, cond *osdpb.Condition) error {
	if err := checkNames(bucket, key); err != nil {
		return err
	}
	t := osdpb.MsgType_MSG_DELETE_OBJECT
	if cond != nil {
		t = osdpb.MsgType_MSG_DELETE_OBJECT_IF
	}
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, t, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: bucket, Key: key, Condition: cond}
	}, nil, &rep, false)
	return err
}

// ListOptions select a listing, with S3 ListObjectsV2's semantics.
type ListOptions struct {
	Prefix     string
	Delimiter  string
	StartAfter string
	// ContinuationToken resumes a listing where a ListObjectsPage with
	// IsTruncated stopped (its NextContinuationToken); it takes precedence
	// over StartAfter, as in S3.
	ContinuationToken string
	// MaxKeys bounds the listing: the whole of ListObjects (0: no bound),
	// or one ListObjectsPage (0 or more than 1000: 1000, as S3 caps a
	// page), objects and common prefixes together.
	MaxKeys int

	// batch, when set, is how many entries the listing's first round
	// asks each primary for, where MaxKeys cannot say it: a page of
	// uploads needs its size in upload records, but skips records it
	// does not show. Each further round asks for twice as many, up to
	// ops.MaxListKeys.
	batch int
}

// ListPage is one page of a listing, as S3 ListObjectsV2 returns it.
type ListPage struct {
	Objects               []ObjectInfo // keys and, with a delimiter, common prefixes (IsPrefix), in order
	IsTruncated           bool
	NextContinuationToken string // set when IsTruncated
}

// ListObjectsPage returns up to MaxKeys entries (1000 by default and at
// most) of a listing and, when more remain, the token that continues it.
func (c *Client) ListObjectsPage(ctx context.Context, bucket string, opts ListOptions) (ListPage, error) {
	max := pageSize(opts.MaxKeys)
	opts.MaxKeys = max + 1 // one more tells whether the page is truncated
	objs, truncated, err := takePage(c.ListObjects(ctx, bucket, opts), max)
	if err != nil {
		return ListPage{}, err
	}
	page := ListPage{Objects: objs, IsTruncated: truncated}
	if truncated {
		page.NextContinuationToken = continuationToken(resumeAfter(objs[max-1]))
	}
	return page, nil
}

// pageSize is a page's size for a max asked for: 1000 for 0 or less, and
// at most 1000, as S3 caps a page of a listing (of objects or uploads).
func pageSize(max int) int {
	if max <= 0 || max > ops.MaxListKeys {
		return ops.MaxListKeys
	}
	return max
}

// takePage takes the first max entries of a listing and reports whether
// more remain.
func takePage[T any](list iter.Seq2[T, error], max int) ([]T, bool, error) {
	var page []T
	for v, err := range list {
		if err != nil {
			return nil, false, err
		}
		if len(page) == max {
			return page, true, nil
		}
		page = append(page, v)
	}
	return page, false, nil
}

// A continuation token is the position after which the listing resumes,
// versioned and encoded so callers treat it as opaque.
const tokenPrefix = "v1:"

func continuationToken(after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tokenPrefix + after))
}

func parseToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !strings.HasPrefix(string(b), tokenPrefix) {
		return "", ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "the continuation token is not valid")
	}
	return string(b[len(tokenPrefix):]), nil
}

// resumeAfter is where a listing goes on after entry o: its key. For a
// common prefix that is the prefix itself, which the OSDs take as after
// everything it rolled up (a StartAfter that is a common prefix of the
// listing's Prefix and Delimiter, store.ListOptions); no key would do, as
// a key may go on after the prefix with any rune, U+10FFFF too.
func resumeAfter(o ObjectInfo) string { return o.Key }

// ListObjects yields the bucket's objects (and common prefixes, with a
// delimiter) in ascending byte order of key. The PGs are spread over their
// primaries: each primary lists its PGs and the pages are merged.
func (c *Client) ListObjects(ctx context.Context, bucket string, opts ListOptions) iter.Seq2[ObjectInfo, error] {
	return inBucket(ctx, c, bucket, c.list(ctx, bucket, opts))
}

// inBucket is list, a listing of bucket, once bucket's name is checked
// and it is found: a missing bucket is an error, not an empty listing.
func inBucket[T any](ctx context.Context, c *Client, bucket string, list iter.Seq2[T, error]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		if err := ops.CheckBucketName(bucket); err != nil {
			yield(zero, err)
			return
		}
		if _, err := c.StatBucket(ctx, bucket); err != nil {
			yield(zero, err)
			return
		}
		for v, err := range list {
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// list is ListObjects without the checks: the multipart bucket is listed
// through it too.
func (c *Client) list(ctx context.Context, bucket string, opts ListOptions) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		after := opts.StartAfter
		if opts.ContinuationToken != "" {
			var err error
			if after, err = parseToken(opts.ContinuationToken); err != nil {
				yield(ObjectInfo{}, err)
				return
			}
		}
		// Each primary is asked for no more than the listing can use (a
		// page of 3 asks for 4, not 1000, from each): a truncated round
		// yields at least that many, all of the limiting primary's.
		batch := ops.MaxListKeys
		if opts.batch > 0 {
			batch = min(opts.batch, ops.MaxListKeys)
		}
		sent := 0
		for {
			n := batch
			if opts.MaxKeys > 0 {
				n = min(n, opts.MaxKeys-sent)
			}
			page, truncated, err := c.listPage(ctx, bucket, opts.Prefix, opts.Delimiter, after, n)
			if err != nil {
				yield(ObjectInfo{}, err)
				return
			}
			for _, o := range page {
				if err := ctx.Err(); err != nil {
					// A page fetched is not yielded past its caller's end.
					yield(ObjectInfo{}, err)
					return
				}
				if !yield(o, nil) {
					return
				}
				sent++
				if opts.MaxKeys > 0 && sent >= opts.MaxKeys {
					return
				}
				after = resumeAfter(o)
			}
			if !truncated || len(page) == 0 {
				return
			}
			batch = min(2*batch, ops.MaxListKeys)
		}
	}
}

// listPage lists up to n entries (at most ops.MaxListKeys) after `after`
// from every primary and merges them; truncated when any primary has
// more. A map change that moved a PG's primary (an OSD down, pg_temp)
// makes it ask again, grouping the PGs by their primaries anew, for up to
// RetryFor.
func (c *Client) listPage(ctx context.Context, bucket, prefix, delim, after string, n int) ([]ObjectInfo, bool, error) {
	deadline := time.Now().Add(c.opts.RetryFor)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		page, truncated, err := c.listPageOnce(ctx, bucket, prefix, delim, after, n)
		var oe *ops.Error
		if !errors.As(err, &oe) || !mapMoved(oe) || time.Now().After(deadline) {
			return page, truncated, err
		}
		// do adopted the newer map; a primary that answers before it has
		// it itself gets a moment.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-t.C:
		}
	}
}

// listPageOnce is one round of listPage under the map held.
func (c *Client) listPageOnce(ctx context.Context, bucket, prefix, delim, after string, n int) ([]ObjectInfo, bool, error) {
	mp := c.Map()
	pool := c.pool(mp)
	// One op per primary, for all its PGs. A PG with no OSD up and in
	// gets an op of its own, which waits (the SDK's retries, up to
	// RetryFor) for a map that gives it a primary and then fails
	// ServiceUnavailable: a listing that skipped it would be short with
	// no error, and what trusts a listing (gc, a sync, a recursive copy
	// or delete) would take the objects it lacks for absent.
	byPrimary := map[uint32][]uint32{}
	var groups [][]uint32
	for pg := range pool.PgCount {
		if p, ok := mp.Primary(pool.Id, pg); ok {
			byPrimary[p] = append(byPrimary[p], pg)
		} else {
			groups = append(groups, []uint32{pg})
		}
	}
	for _, pgs := range byPrimary {
		groups = append(groups, pgs)
	}
	type result struct {
		rep *osdpb.ListObjectsReply
		err error
	}
	results := make(chan result, len(groups))
	for _, pgs := range groups {
		go func() {
			var rep osdpb.ListObjectsReply
			// The first PG routes the op to their primary.
			_, err := c.do(ctx, osdpb.MsgType_MSG_LIST_OBJECTS, target{bucket: bucket, pg: pgs[0], hasPG: true, regroup: true}, func(h *osdpb.Header) proto.Message {
				return &osdpb.ListObjects{Header: h, Bucket: bucket, Prefix: prefix, Delimiter: delim, StartAfter: after,
					MaxKeys: uint32(n), Pgs: pgs}
			}, nil, &rep, false)
			results <- result{&rep, err}
		}()
	}
	var all []ObjectInfo
	truncated := false
	limit := ""
	var firstErr error
	for range groups {
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

// checkNames checks a user's bucket and key (the multipart bucket is not
// one).
func checkNames(bucket, key string) error {
	if err := ops.CheckBucketName(bucket); err != nil {
		return err
	}
	return ops.CheckKey(key)
}

// RemoveObjects deletes keys of bucket, Concurrency at a time; the error
// joins every key's failure.
func (c *Client) RemoveObjects(ctx context.Context, bucket string, keys []string) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 8)
	)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.RemoveObject(ctx, bucket, k); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
