package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// MaxPartSize is the largest part PutObjectPart takes, S3's 5 GiB.
const MaxPartSize = 5 << 30

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
	// Internal: the SDK's own upload of an object put whole in pieces
	// (PutOptions.WholeETag, a PUT above 64 MiB through the S3 gateway),
	// which ListMultipartUploads does not show (AbortStaleUploads does).
	Internal bool
	// IsPrefix: a common prefix of ListUploads' delimiter (Key), not an
	// upload.
	IsPrefix bool
}

// cleanupTimeout bounds the removal of what a failed or completed upload
// leaves behind, which outlives the caller's context (a client that hung
// up must not leave its pieces) but not by more than this.
const cleanupTimeout = time.Minute

// cleanupContext is ctx without its cancellation, bounded by
// cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// NewMultipartUpload starts a multipart upload of bucket/key and returns
// its id. The object appears only when the upload completes.
func (c *Client) NewMultipartUpload(ctx context.Context, bucket, key string, opts PutOptions) (string, error) {
	return c.newUpload(ctx, bucket, key, opts, false)
}

// newUpload starts an upload; internal: the SDK's own (MultipartUpload.Internal).
func (c *Client) newUpload(ctx context.Context, bucket, key string, opts PutOptions, internal bool) (string, error) {
	if err := checkNames(bucket, key); err != nil {
		return "", err
	}
	meta, err := checkUserMetadata(opts.UserMetadata)
	if err != nil {
		return "", err
	}
	var rep osdpb.UploadReply
	_, err = c.do(ctx, osdpb.MsgType_MSG_CREATE_UPLOAD, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key,
			Meta: &osdpb.ObjectMeta{ContentType: opts.ContentType, UserMeta: meta, Internal: internal}}
	}, nil, &rep, false)
	return rep.UploadId, err
}

// PutObjectPart uploads part partNumber (1 to 10000) of an upload: size
// bytes of r, at most 5 GiB. Parts go to different PGs, so they can be
// uploaded in parallel. A part up to 64 MiB (one op) goes in one op; a
// larger one in pieces of 16 MiB, 4 in flight (see putPieces), so memory
// stays 64 MiB at most whatever its size, and its ETag is still the MD5
// of the whole part (with Options.MD5).
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
	if size < 0 {
		// S3's UploadPart needs its Content-Length too.
		return ObjectPart{}, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "part size %d: a part's length must be known", size)
	}
	if size > MaxPartSize {
		return ObjectPart{}, ops.Errorf(ErrEntityTooLarge.Status, "part of %d bytes: at most %d", size, MaxPartSize)
	}
	// A part of an unknown or aborted upload is NoSuchUpload, not an
	// orphan, before its body is read (as RGW reads an upload's meta
	// object before each part; an S3 client waiting for 100 Continue
	// sends none). The part's OSD asks the record again, which is what
	// keeps one user from writing the parts of another's upload. (An
	// abort racing this part can still leave one behind.)
	if err := c.uploadExists(ctx, bucket, key, uploadID); err != nil {
		return ObjectPart{}, err
	}
	// A part uploaded again replaces the one before: its OSD drops the
	// pieces of that one the new part does not overwrite.
	partKey := ops.PartKey(uploadID, uint32(partNumber))
	r = &bodyReader{ctx: ctx, r: r, left: size}
	if size <= ops.MaxPutSize {
		bd, rerr := c.readBody(r, c.payloadBuffer(ctx, target{bucket: ops.MultipartBucket, key: partKey}, int(size)))
		if rerr != nil {
			bd.release()
			return ObjectPart{}, fmt.Errorf("client: reading part %d: %w", partNumber, noneIsShort(rerr))
		}
		return c.putPart(ctx, bucket, key, uploadID, partNumber, "", 0, bd)
	}
	var opts PutOptions
	_ = opts.defaults()
	whole := c.newWholeDigest()
	defer whole.close()
	r = io.TeeReader(r, whole)
	set := ops.NewPieceSet()
	tg := target{bucket: ops.MultipartBucket, key: ops.PieceKey(uploadID, uint32(partNumber), set, 1)}
	bd, err := c.readBody(r, c.payloadBuffer(ctx, tg, int(opts.PartSize)))
	if err != nil {
		bd.release()
		return ObjectPart{}, fmt.Errorf("client: reading part %d: %w", partNumber, noneIsShort(err))
	}
	return c.putPieces(ctx, bucket, key, uploadID, partNumber, set, bd, r, size, whole, opts)
}

// putPart uploads bd (and releases it) as part partNumber, or as its
// piece piece (from 1) of set set when piece > 0. With Options.MD5 the
// OSD's ETag for it, its MD5, is checked against the client's; without,
// the OSD's is taken: it is of bytes whose CRC32C the OSD checked.
func (c *Client) putPart(ctx context.Context, bucket, key, uploadID string, partNumber int, set string, piece int, bd body) (ObjectPart, error) {
	defer bd.release()
	hidden := ops.PartKey(uploadID, uint32(partNumber))
	if piece > 0 {
		hidden = ops.PieceKey(uploadID, uint32(partNumber), set, uint32(piece))
	}
	meta := &osdpb.ObjectMeta{Size: uint64(bd.n), Crc32C: bd.crc}
	var rep osdpb.UploadReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_UPLOAD_PART, target{bucket: ops.MultipartBucket, key: hidden}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key, UploadId: uploadID, PartNumber: uint32(partNumber), Piece: uint32(piece),
			PieceSet: set, Meta: meta}
	}, bd.buf, &rep, false)
	if err != nil {
		return ObjectPart{}, err
	}
	if got := rep.Part.GetEtag(); bd.md5 != nil && got != bd.etag() {
		return ObjectPart{}, ops.Errorf(ErrBadDigest.Status, "part %d: the OSD computed ETag %s, we %s", partNumber, got, bd.etag())
	}
	return ObjectPart{PartNumber: partNumber, ETag: rep.Part.GetEtag(), Size: int64(bd.n), CRC32C: bd.crc}, nil
}

// putPieces uploads a part larger than one op (MaxPutSize) in pieces:
// first, already read, and the rest of r, each of opts.PartSize read
// straight into a send buffer, Concurrency in flight (putStream), each a
// hidden object of its own (ops.PieceKey, of set) placed by its own key; then the
// part's record, at the part's key, which lists them. The messenger
// carries at most MaxPutSize a message, and an S3 part may be 5 GiB: so
// no op carries a part whole, and memory is bounded by Concurrency pieces,
// not by the part. The part's ETag is whole's digest of all its bytes
// (S3's: the MD5 of the part); its CRC32C is combined from its pieces'.
// Completing the upload names the pieces in the object, each with the
// part's number and ETag, so reads, GET of a partNumber and the
// multipart ETag are as for a part in one op.
func (c *Client) putPieces(ctx context.Context, bucket, key, uploadID string, partNumber int, set string, first body, r io.Reader, size int64,
	whole *wholeDigest, opts PutOptions) (ObjectPart, error) {
	var (
		mu   sync.Mutex
		refs []*osdpb.PartRef
		sent int // pieces 1 to sent were sent, or are on their way
	)
	total, err := c.putStream(ctx, first, r, opts, func(n int) target {
		return target{bucket: ops.MultipartBucket, key: ops.PieceKey(uploadID, uint32(partNumber), set, uint32(n))}
	}, func(ctx context.Context, n int, bd body) error {
		mu.Lock()
		sent = max(sent, n)
		mu.Unlock()
		p, err := c.putPart(ctx, bucket, key, uploadID, partNumber, set, n, bd)
		if err != nil {
			return fmt.Errorf("part %d, piece %d: %w", partNumber, n, err)
		}
		mu.Lock()
		refs = append(refs, &osdpb.PartRef{Number: uint32(n), Key: ops.PieceKey(uploadID, uint32(partNumber), set, uint32(n)),
			Size: uint64(p.Size), Etag: p.ETag, Crc32C: p.CRC32C})
		mu.Unlock()
		return nil
	})
	if err == nil && size >= 0 && total != size {
		err = shortBody(fmt.Sprintf("part %d", partNumber), total, size)
	}
	if err != nil {
		// No record names this set's pieces: remove them. They are this
		// attempt's alone (its own set), so an upload of the same part
		// by another attempt, before or at once, keeps its own. A piece
		// still on its way when its delete lands stays, until the
		// upload is completed or aborted (removeUnlisted, removeParts).
		keys := make([]string, sent)
		for i := range keys {
			keys[i] = ops.PieceKey(uploadID, uint32(partNumber), set, uint32(i+1))
		}
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if rerr := c.removeHiddenKeys(cctx, keys); rerr != nil {
			c.log.Warn("client: removing a failed part's pieces", "upload", uploadID, "part", partNumber, "err", rerr)
		}
		return ObjectPart{}, err
	}
	slices.SortFunc(refs, func(a, b *osdpb.PartRef) int { return int(a.Number) - int(b.Number) })
	var crc uint32
	for _, ref := range refs {
		crc = ops.CRC32CCombine(crc, ref.Crc32C, int64(ref.Size))
	}
	etag := whole.etag(crc)
	meta := &osdpb.ObjectMeta{Size: uint64(total), Crc32C: crc, Etag: etag, Parts: refs}
	partKey := ops.PartKey(uploadID, uint32(partNumber))
	var rep osdpb.UploadReply
	if _, err := c.do(ctx, osdpb.MsgType_MSG_UPLOAD_PART, target{bucket: ops.MultipartBucket, key: partKey}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key, UploadId: uploadID, PartNumber: uint32(partNumber), Meta: meta}
	}, nil, &rep, false); err != nil {
		return ObjectPart{}, fmt.Errorf("part %d's record: %w", partNumber, err)
	}
	return ObjectPart{PartNumber: partNumber, ETag: rep.Part.GetEtag(), Size: total, CRC32C: crc}, nil
}

// CompleteMultipartUpload makes the object from the parts listed, which
// must be in ascending order, all but the last at least 5 MiB, with the
// ETags their uploads returned (InvalidPartOrder, EntityTooSmall,
// InvalidPart otherwise). As on S3, the parts uploaded and not listed are
// discarded: once the object is made, every part and piece of the upload
// it does not name is removed (best effort, within a minute even if ctx
// is cancelled; what fails is logged and stays, hidden).
//
// At most one opts: a condition on the key (S3's conditional writes),
// checked by the OSD atomically with the completion. If it is false the
// upload stays, to be completed again or aborted.
func (c *Client) CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []CompletePart, opts ...CompleteOptions) (ObjectInfo, error) {
	var o CompleteOptions
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return ObjectInfo{}, fmt.Errorf("client: CompleteMultipartUpload takes at most one CompleteOptions, not %d", len(opts))
	}
	cond, err := condition(o.IfMatch, o.IfNoneMatch)
	if err != nil {
		return ObjectInfo{}, err
	}
	meta, err := c.complete(ctx, bucket, key, uploadID, parts, false, cond)
	if err != nil {
		return ObjectInfo{}, err
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := c.removeUnlisted(cctx, uploadID, meta); err != nil {
		c.log.Warn("client: removing the parts a completion did not list", "upload", uploadID, "err", err)
	}
	return objectInfo(key, meta), nil
}

// removeUnlisted removes the hidden objects of a completed upload that
// its object, of metadata meta, does not name: parts not listed, their
// pieces, pieces of failed uploads of a part, and the records of parts in
// pieces (which the OSD removes too: removing a record drops no pieces).
func (c *Client) removeUnlisted(ctx context.Context, uploadID string, meta *osdpb.ObjectMeta) error {
	if len(meta.GetParts()) == 0 {
		// A completed upload's object names its parts: without them
		// there is nothing to tell the unlisted ones by.
		return fmt.Errorf("client: the completion of upload %s answered no parts", uploadID)
	}
	named := make(map[string]bool, len(meta.GetParts()))
	for _, p := range meta.GetParts() {
		named[p.GetKey()] = true
	}
	keys, err := c.hiddenKeys(ctx, uploadID)
	keys = slices.DeleteFunc(keys, func(k string) bool { return named[k] })
	return errors.Join(err, c.removeHiddenKeys(ctx, keys))
}

// CompleteOptions are CompleteMultipartUpload's options.
type CompleteOptions struct {
	// IfMatch and IfNoneMatch are PutOptions' conditions, on the object
	// the completion would replace.
	IfMatch     string
	IfNoneMatch string
}

// complete completes an upload and returns the object's metadata; whole:
// as an object put whole, of its one part (PutOptions.WholeETag); cond,
// when not nil, makes it MSG_COMPLETE_UPLOAD_IF.
func (c *Client) complete(ctx context.Context, bucket, key, uploadID string, parts []CompletePart, whole bool, cond *osdpb.Condition) (*osdpb.ObjectMeta, error) {
	if err := checkNames(bucket, key); err != nil {
		return nil, err
	}
	if err := ops.CheckUploadID(uploadID); err != nil {
		return nil, err
	}
	refs := make([]*osdpb.PartRef, len(parts))
	for i, p := range parts {
		// Checked before the conversion: 2^32+1 must not name part 1.
		if p.PartNumber < 1 || p.PartNumber > ops.MaxParts {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "part number %d: must be 1 to %d", p.PartNumber, ops.MaxParts)
		}
		refs[i] = &osdpb.PartRef{Number: uint32(p.PartNumber), Etag: strings.Trim(p.ETag, `"`)}
	}
	t := osdpb.MsgType_MSG_COMPLETE_UPLOAD
	if cond != nil {
		t = osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF
	}
	var rep osdpb.UploadReply
	_, err := c.do(ctx, t, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.UploadRequest{Header: h, Bucket: bucket, Key: key, UploadId: uploadID, Parts: refs, Whole: whole, Condition: cond}
	}, nil, &rep, false)
	if err != nil {
		return nil, err
	}
	return rep.Meta, nil
}

// AbortMultipartUpload ends an upload and deletes its parts (within a
// minute once the upload is ended, even if ctx is cancelled).
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
	// The record is gone: its parts must go too, or nothing would ever
	// find them, even if ctx is cancelled now (a gateway's client that
	// hung up, a sweep stopped).
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	err = c.removeParts(cctx, uploadID)
	if errors.Is(err, ErrAccessDenied) {
		// A user whose caps name its buckets may not delete hidden
		// objects (docs/auth.md): the upload is aborted, and its parts
		// are garbage that osprey gc removes.
		c.log.Warn("client: the aborted upload's parts stay for osprey gc: this entity may not delete them", "upload", uploadID, "err", err)
		return nil
	}
	return err
}

// removeParts deletes every part of an upload that is gone.
func (c *Client) removeParts(ctx context.Context, uploadID string) error {
	keys, err := c.hiddenKeys(ctx, uploadID)
	if err != nil {
		return err
	}
	return c.removeHiddenKeys(ctx, keys)
}

// hiddenKeys lists the keys of an upload's parts and pieces.
func (c *Client) hiddenKeys(ctx context.Context, uploadID string) ([]string, error) {
	var keys []string
	for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: uploadID + "/"}) {
		if err != nil {
			return keys, err
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// removeHiddenKeys deletes objects of the multipart bucket (a missing one
// is no error), all it can: it returns the errors of those it could not.
func (c *Client) removeHiddenKeys(ctx context.Context, keys []string) error {
	var errs []error
	for _, k := range keys {
		if err := c.removeHidden(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// removeHidden deletes an object of the multipart bucket.
func (c *Client) removeHidden(ctx context.Context, k string) error {
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_DELETE_OBJECT, target{bucket: ops.MultipartBucket, key: k}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: ops.MultipartBucket, Key: k}
	}, nil, &rep, false)
	return err
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
// start with prefix; not the SDK's internal ones
// (MultipartUpload.Internal), as S3 shows none for a PUT. ListUploads
// streams them, with a delimiter and markers.
func (c *Client) ListMultipartUploads(ctx context.Context, bucket, prefix string) ([]MultipartUpload, error) {
	var ups []MultipartUpload
	for u, err := range c.ListUploads(ctx, bucket, UploadListOptions{Prefix: prefix}) {
		if err != nil {
			return nil, err
		}
		ups = append(ups, u)
	}
	return ups, nil
}

// UploadListOptions select a listing of uploads in progress, with S3
// ListMultipartUploads' semantics.
type UploadListOptions struct {
	Prefix string
	// Delimiter rolls the uploads of keys that have it after Prefix up
	// into one entry (IsPrefix) per common prefix: the key up to and
	// including its first Delimiter after Prefix.
	Delimiter string
	// KeyMarker and UploadIDMarker resume a listing after the upload
	// UploadIDMarker of KeyMarker; KeyMarker alone resumes after all of
	// that key's uploads (or, when it is a common prefix of Delimiter, as
	// NextKeyMarker is after one, after all the prefix rolled up).
	// UploadIDMarker without KeyMarker is ignored, as in S3.
	KeyMarker      string
	UploadIDMarker string
	// MaxUploads bounds one ListUploadsPage (0: 1000), uploads and common
	// prefixes together; ListUploads yields them all.
	MaxUploads int
}

// UploadsPage is one page of a listing of uploads, as S3
// ListMultipartUploads returns it.
type UploadsPage struct {
	Uploads     []MultipartUpload // and, with a delimiter, common prefixes (IsPrefix), in order
	IsTruncated bool
	// NextKeyMarker and NextUploadIDMarker (empty after a common prefix)
	// continue the listing as UploadListOptions' markers when IsTruncated.
	NextKeyMarker, NextUploadIDMarker string
}

// ListUploadsPage returns up to MaxUploads entries (1000 by default) of a
// listing of uploads and, when more remain, the markers that continue it.
func (c *Client) ListUploadsPage(ctx context.Context, bucket string, opts UploadListOptions) (UploadsPage, error) {
	ups, truncated, err := takePage(c.ListUploads(ctx, bucket, opts), pageSize(opts.MaxUploads))
	if err != nil {
		return UploadsPage{}, err
	}
	page := UploadsPage{Uploads: ups, IsTruncated: truncated}
	if len(ups) > 0 {
		last := ups[len(ups)-1]
		page.NextKeyMarker, page.NextUploadIDMarker = last.Key, last.UploadID
	}
	return page, nil
}

// ListUploads yields bucket's uploads in progress (and common prefixes,
// with a delimiter), not the SDK's internal ones, in the order of their
// records ("KEY/UPLOADID"): by key, then by upload id, except that a key
// comes after the keys it starts followed by a byte below '/' ("a" after
// "a.txt" and "a-1"); a common prefix comes after the last record it
// rolled up. The records are read a page at a time from where the markers
// point, not all at once, and those a common prefix rolls up are skipped
// over, not read.
func (c *Client) ListUploads(ctx context.Context, bucket string, opts UploadListOptions) iter.Seq2[MultipartUpload, error] {
	return inBucket(ctx, c, bucket, c.uploads(ctx, bucket, opts, false))
}

// pastRecords is where a listing of the multipart bucket goes on after
// the upload records under common prefix p. That listing has no
// delimiter (uploads applies it), so the OSDs cannot skip p for being a
// common prefix: it goes on after p + U+10FFFF, the largest rune.
func pastRecords(p string) string { return p + "\U0010FFFF" }

// uploadIDMax sorts after every upload id.
var uploadIDMax = strings.Repeat("f", len(ops.NewUploadID()))

// uploads lists bucket's upload records from the multipart bucket, the
// SDK's internal ones too with internal. The delimiter is applied here,
// not by the OSDs: a record's key goes on after the upload's key
// ("/UPLOADID"), where a delimiter may match too. A common prefix comes
// where its records end, and the listing then resumes after them, so its
// uploads are not read; resuming after it (ops.IsCommonPrefix) is
// resuming there.
func (c *Client) uploads(ctx context.Context, bucket string, opts UploadListOptions, internal bool) iter.Seq2[MultipartUpload, error] {
	return func(yield func(MultipartUpload, error) bool) {
		base := bucket + "/"
		after := ""
		switch {
		case opts.KeyMarker == "":
		case opts.UploadIDMarker != "":
			after = ops.UploadKey(bucket, opts.KeyMarker, opts.UploadIDMarker)
		default:
			// After the key's last upload, or, when the marker is a
			// common prefix (NextKeyMarker after one), after everything
			// it rolled up.
			after = ops.UploadKey(bucket, opts.KeyMarker, uploadIDMax)
			if ops.IsCommonPrefix(opts.KeyMarker, opts.Prefix, opts.Delimiter) {
				after = pastRecords(base + opts.KeyMarker)
			}
		}
		// last is the common prefix yielded last, or the marker when it is
		// one: a record that still rolls up into it is skipped. Going on
		// after p + U+10FFFF leaves out p's records but those of keys that
		// go on after p with U+10FFFF, which would yield p again, forever.
		last := ""
		if opts.KeyMarker != "" && opts.UploadIDMarker == "" && ops.IsCommonPrefix(opts.KeyMarker, opts.Prefix, opts.Delimiter) {
			last = opts.KeyMarker
		}
		// upload is the record o as an upload to yield: one of bucket's,
		// visible, under the prefix (a record of a shorter key can sort
		// under it: "a/0..." of key "a" under prefix "a/0"), and p, if
		// it rolls up into common prefix p.
		upload := func(o ObjectInfo) (u MultipartUpload, p string, ok bool) {
			b, k, id, ok := ops.ParseUploadKey(o.Key)
			if !ok || b != bucket || o.internal && !internal || !strings.HasPrefix(k, opts.Prefix) {
				return MultipartUpload{}, "", false
			}
			p, _ = ops.CommonPrefix(k, opts.Prefix, opts.Delimiter)
			return MultipartUpload{Key: k, UploadID: id, Initiated: o.LastModified, Internal: o.internal}, p, true
		}
		// endPrefix yields what is left of common prefix p's records
		// after from: the records of shorter keys that do not roll up
		// but sort among p's ("a/UPLOADID" of key "a" among those of
		// "a/b", delimiter "/"), then p, if any record rolls up into it
		// (seen: one did). Those shorter keys' records have no '/' after
		// p, where each of p's has one: the OSDs roll p's up by it and
		// seek past them. It returns where the listing goes on.
		endPrefix := func(p, from string, seen bool) (string, bool) {
			if mayHideUploads(p, opts.Prefix) {
				for h, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: base + p, Delimiter: "/"}) {
					if err != nil {
						yield(MultipartUpload{}, err)
						return "", false
					}
					if h.IsPrefix {
						seen = true
						continue
					}
					if u, up, ok := upload(h); ok && up == "" && h.Key > from && !yield(u, nil) {
						return "", false
					}
				}
			}
			if seen && !yield(MultipartUpload{Key: p, IsPrefix: true}, nil) {
				return "", false
			}
			last = p
			return pastRecords(base + p), true
		}
		// A marker among a common prefix's records (an upload of a
		// shorter key, as above) ends that prefix first.
		if rel, ok := strings.CutPrefix(after, base); ok && opts.KeyMarker != "" {
			if _, rolls := ops.CommonPrefix(opts.KeyMarker, opts.Prefix, opts.Delimiter); !rolls {
				if p, ok := ops.CommonPrefix(rel, opts.Prefix, opts.Delimiter); ok {
					if after, ok = endPrefix(p, after, false); !ok {
						return
					}
				}
			}
		}
		for {
			jumped := false
			// A page asks for its size (and one more, to tell whether it
			// is truncated) in records, the fewest it can use.
			for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: base + opts.Prefix, StartAfter: after, batch: pageSize(opts.MaxUploads) + 1}) {
				if err != nil {
					yield(MultipartUpload{}, err)
					return
				}
				u, p, ok := upload(o)
				if !ok || p != "" && p == last {
					continue
				}
				if p == "" {
					if !yield(u, nil) {
						return
					}
					continue
				}
				if after, ok = endPrefix(p, o.Key, true); !ok {
					return
				}
				jumped = true
				break
			}
			if !jumped {
				return
			}
		}
	}
}

// mayHideUploads reports whether records of keys under prefix that do
// not start with common prefix p can sort among p's records: a key
// p[:j] whose record p[:j] + "/" + UPLOADID starts with p, where p[j] is
// '/' and the rest of p the start of an upload id.
func mayHideUploads(p, prefix string) bool {
	for j := len(p) - 1; j >= len(prefix) && len(p)-j-1 <= len(uploadIDMax); j-- {
		if p[j] == '/' {
			return j > 0
		}
		if !strings.ContainsRune("0123456789abcdef", rune(p[j])) {
			return false
		}
	}
	return false
}

// DefaultStaleUploadAge is how old an upload must be for AbortStaleUploads
// to take it by default: a day, as S3 lifecycle rules'
// AbortIncompleteMultipartUpload commonly and MinIO's stale upload expiry.
const DefaultStaleUploadAge = 24 * time.Hour

// StaleUploadOptions choose the uploads AbortStaleUploads aborts.
type StaleUploadOptions struct {
	// Prefix: only uploads of keys that start with it.
	Prefix string
	// Age: only uploads initiated longer ago than this; default
	// DefaultStaleUploadAge; negative: every upload, whatever its age
	// (and whatever the skew between this clock and the OSDs').
	Age time.Duration
	// All takes the users' multipart uploads too, not only the SDK's
	// internal ones (which nobody else can complete or abort: those of
	// a gateway that died during a PUT above 64 MiB).
	All bool
	// DryRun aborts nothing, only returns what it would abort.
	DryRun bool
	// Now is the clock; default time.Now (tests).
	Now func() time.Time
}

// AbortStaleUploads aborts bucket's uploads older than opts.Age, with
// their parts and pieces: the SDK's internal ones only (a PUT above
// 64 MiB whose writer died half-way), or every one with opts.All. It
// returns those it aborted; an upload that is gone by the time it is
// aborted (completed, or aborted by someone else) is skipped.
func (c *Client) AbortStaleUploads(ctx context.Context, bucket string, opts StaleUploadOptions) ([]MultipartUpload, error) {
	if opts.Age == 0 {
		opts.Age = DefaultStaleUploadAge
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if err := ops.CheckBucketName(bucket); err != nil {
		return nil, err
	}
	cutoff := now().Add(-opts.Age)
	var aborted []MultipartUpload
	// Aborted as listed, not all read first: the listing goes on after
	// the last record it read, which an abort does not move.
	for u, err := range c.uploads(ctx, bucket, UploadListOptions{Prefix: opts.Prefix}, true) {
		if err != nil {
			return aborted, err
		}
		if opts.Age > 0 && !u.Initiated.Before(cutoff) || !u.Internal && !opts.All {
			continue
		}
		if !opts.DryRun {
			err := c.AbortMultipartUpload(ctx, bucket, u.Key, u.UploadID)
			if errors.Is(err, ErrNoSuchUpload) {
				continue
			}
			if err != nil {
				return aborted, fmt.Errorf("client: aborting upload %s of %s/%s: %w", u.UploadID, bucket, u.Key, err)
			}
		}
		aborted = append(aborted, u)
	}
	return aborted, nil
}
