package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"github.com/ospreystore/osprey/osd/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// GetOptions select what GetObject reads.
type GetOptions struct {
	// Range limits the object to Length bytes from Offset (Length -1: to
	// the end). An Offset past the end is InvalidRange, as in S3.
	Range          bool
	Offset, Length int64
}

// readWindow is how much a sequential Read fetches at once.
const readWindow = 8 << 20

// Object is an object being read: an io.ReadSeekCloser that is also an
// io.ReaderAt. Reads fetch ranges from the primary as needed (a multipart
// object's from each part's primary). A sequential read of a whole object
// checks its CRC32C at the end (each part's, for a multipart object) and
// fails with BadDigest rather than return wrong bytes.
type Object struct {
	c           *Client
	ctx         context.Context
	bucket, key string
	meta        *osdpb.ObjectMeta
	info        ObjectInfo
	start, size int64 // the range read, within the object

	mu     sync.Mutex
	off    int64  // Read's position, relative to start
	buf    []byte // bytes from bufOff on
	bufOff int64
	crc    uint32 // of the bytes Read returned from 0, while sequential
	crcOK  bool
	closed bool
	// wholeParts counts parts fetched whole, so checked against their
	// CRC32C (tests).
	wholeParts atomic.Int32
}

// GetObject opens bucket/key for reading. It fetches the metadata and the
// first window of bytes in one op (NoSuchKey and InvalidRange come here),
// so an object up to the window size is read from one consistent state;
// later windows come as they are read.
func (c *Client) GetObject(ctx context.Context, bucket, key string, opts GetOptions) (*Object, error) {
	if err := checkNames(bucket, key); err != nil {
		return nil, err
	}
	if opts.Range && opts.Offset < 0 {
		return nil, ops.Errorf(ErrInvalidRange.Status, "negative offset %d", opts.Offset)
	}
	if !opts.Range {
		opts.Offset, opts.Length = 0, -1
	}
	first := int64(readWindow)
	if opts.Length >= 0 {
		first = min(first, opts.Length)
	}
	meta, data, err := c.getRange(ctx, bucket, key, opts.Offset, first, nil)
	if err != nil {
		return nil, err
	}
	o := &Object{c: c, ctx: ctx, bucket: bucket, key: key, meta: meta, info: objectInfo(key, meta), start: opts.Offset, crcOK: true}
	o.size = int64(meta.Size) - opts.Offset
	if opts.Length >= 0 && opts.Length < o.size {
		o.size = opts.Length
	}
	o.crcOK = o.start == 0 && o.size == int64(meta.Size)
	if len(meta.Parts) == 0 {
		o.buf = data
	}
	return o, nil
}

// Stat is the object's info (of the whole object, not the range).
func (o *Object) Stat() (ObjectInfo, error) { return o.info, nil }

// Close ends reading.
func (o *Object) Close() error {
	o.mu.Lock()
	o.closed, o.buf = true, nil
	o.mu.Unlock()
	return nil
}

// Read reads on from the position, a window at a time.
func (o *Object) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return 0, errors.New("client: read of a closed object")
	}
	if o.off >= o.size {
		return 0, io.EOF
	}
	if o.off < o.bufOff || o.off >= o.bufOff+int64(len(o.buf)) {
		w := min(o.size-o.off, max(int64(len(p)), readWindow))
		if len(o.meta.Parts) > 0 {
			// A multipart object is read a part at a time (parts are at
			// most 64 MiB), so each part read from its start is checked
			// against its CRC32C as a whole.
			w = o.partRest(o.off)
		}
		buf, err := o.fetch(o.off, w)
		if err != nil {
			return 0, err
		}
		o.buf, o.bufOff = buf, o.off
	}
	n := copy(p, o.buf[o.off-o.bufOff:])
	if o.crcOK {
		o.crc = crc32.Update(o.crc, castagnoli, p[:n])
	}
	o.off += int64(n)
	if o.off == o.size && o.crcOK && len(o.meta.Parts) == 0 && o.crc != o.meta.Crc32C {
		return n, ops.Errorf(ErrBadDigest.Status, "%s/%s: read bytes have CRC32C %08x, the object %08x", o.bucket, o.key, o.crc, o.meta.Crc32C)
	}
	return n, nil
}

// Seek sets Read's position (io.Seeker).
func (o *Object) Seek(offset int64, whence int) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = o.off + offset
	case io.SeekEnd:
		abs = o.size + offset
	default:
		return 0, fmt.Errorf("client: seek: bad whence %d", whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("client: seek to %d: negative position", abs)
	}
	if abs != o.off {
		o.crcOK = false // the whole-object check needs one sequential pass
	}
	o.off = abs
	return abs, nil
}

// partRest is how many bytes from off (relative to the range start) to the
// end of the part that holds it, within the range.
func (o *Object) partRest(off int64) int64 {
	abs, end := o.start+off, int64(0)
	for _, p := range o.meta.Parts {
		end += int64(p.Size)
		if abs < end {
			break
		}
	}
	return min(end-abs, o.size-off)
}

// ReadAt reads len(p) bytes at off (io.ReaderAt).
func (o *Object) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("client: read at %d: negative offset", off)
	}
	if off >= o.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), o.size-off)
	b, err := o.fetch(off, n)
	if err != nil {
		return 0, err
	}
	copy(p, b)
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// fetch reads n bytes at off (relative to the range start).
func (o *Object) fetch(off, n int64) ([]byte, error) {
	abs := o.start + off
	if len(o.meta.Parts) == 0 {
		_, b, err := o.c.getRange(o.ctx, o.bucket, o.key, abs, n, o.meta)
		return b, err
	}
	// A multipart object: the parts covering [abs, abs+n).
	out := make([]byte, 0, n)
	pos := int64(0)
	for _, p := range o.meta.Parts {
		ps := int64(p.Size)
		if abs+int64(len(out)) >= pos+ps || len(out) == int(n) {
			pos += ps
			continue
		}
		from := abs + int64(len(out)) - pos
		want := min(ps-from, n-int64(len(out)))
		_, b, err := o.c.getRange(o.ctx, ops.MultipartBucket, p.Key, from, want, nil)
		if err != nil {
			return nil, fmt.Errorf("%s/%s part %d: %w", o.bucket, o.key, p.Number, err)
		}
		if from == 0 && want == ps {
			if crc32.Checksum(b, castagnoli) != p.Crc32C {
				return nil, ops.Errorf(ErrBadDigest.Status, "%s/%s: part %d does not match its CRC32C", o.bucket, o.key, p.Number)
			}
			o.wholeParts.Add(1)
		}
		out = append(out, b...)
		pos += ps
	}
	if int64(len(out)) != n {
		return nil, fmt.Errorf("client: %s/%s: parts hold %d of the %d bytes asked", o.bucket, o.key, len(out), n)
	}
	return out, nil
}

// head reads an object's metadata.
func (c *Client) head(ctx context.Context, bucket, key string) (*osdpb.ObjectMeta, error) {
	var rep osdpb.ObjectReply
	_, err := c.do(ctx, osdpb.MsgType_MSG_HEAD_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.ObjectRequest{Header: h, Bucket: bucket, Key: key}
	}, nil, &rep, false)
	if err != nil {
		return nil, err
	}
	return rep.Meta, nil
}

// getRange reads up to n bytes at off of one stored object (n -1: to the
// end) and its metadata. With want set, the object must still be that
// version: a read in windows never mixes two versions of an object.
func (c *Client) getRange(ctx context.Context, bucket, key string, off, n int64, want *osdpb.ObjectMeta) (*osdpb.ObjectMeta, []byte, error) {
	var rep osdpb.ObjectReply
	msg, err := c.do(ctx, osdpb.MsgType_MSG_GET_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		return &osdpb.GetObject{Header: h, Bucket: bucket, Key: key, HasRange: true, Offset: uint64(off), Length: n}
	}, nil, &rep, true)
	if err != nil {
		return nil, nil, err
	}
	defer msg.Release()
	meta := rep.Meta
	if want != nil && (meta.GetMtimeUnixNano() != want.MtimeUnixNano || meta.GetSize() != want.Size || meta.GetCrc32C() != want.Crc32C) {
		return nil, nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%s/%s was overwritten while being read; read it again", bucket, key)
	}
	if len(meta.GetParts()) == 0 {
		avail := int64(meta.GetSize()) - off
		if n >= 0 {
			avail = min(avail, n)
		}
		if int64(len(msg.Data)) != avail {
			return nil, nil, fmt.Errorf("client: %s/%s: %d bytes at %d expected, %d came", bucket, key, avail, off, len(msg.Data))
		}
	}
	// The message's data lives in the messenger's receive buffer.
	return meta, append([]byte(nil), msg.Data...), nil
}
