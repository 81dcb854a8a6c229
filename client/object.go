package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// GetOptions select what GetObject reads.
type GetOptions struct {
	// Range limits the object to Length bytes from Offset (Length -1: to
	// the end). An Offset at or past the end (but 0 of an empty object),
	// a negative Offset or a Length below -1 is InvalidRange, as in S3.
	Range          bool
	Offset, Length int64
}

// readWindow is the most a get asks for at once: a sequential Read's
// window, a piece of a ReadAt. It bounds every reply, and so what an open
// Object keeps, and is far below a session's receive window (recvWindow).
const readWindow = 8 << 20

// windowAlign is the grid a window of a read that did not start on it is
// cut back to, so that the windows after it start on it: the store's
// chunks (1 MiB at most, a power of two) have a recorded CRC32C only for
// ranges on their boundaries, and only such ranges come without a CRC
// pass in the OSD (GetObject.client_checks).
const windowAlign = 1 << 20

// windowAt is the most one window at pos (of a stored object) asks for:
// readWindow, cut back to end on windowAlign.
func windowAt(pos int64) int64 { return readWindow - pos%windowAlign }

// Object is an object being read: an io.ReadSeekCloser that is also an
// io.ReaderAt and an io.WriterTo. Reads fetch ranges from the primary as
// needed (a multipart object's from each part's primary), a window at a
// time. A window is the reply's data, kept where the messenger received
// it until the next window or Close, so the bytes are not copied before
// Read copies them out (and WriteTo, which io.Copy uses, not even then);
// Close must be called. Read, ReadAt and WriteTo after Close fail with
// ErrObjectClosed.
//
// A read that fetches an object (each part, for a multipart object) from
// its start to its end, as a sequential read of the whole does, checks its
// CRC32C and fails with BadDigest rather than return the window that does
// not match.
type Object struct {
	c           *Client
	ctx         context.Context
	bucket, key string
	meta        *osdpb.ObjectMeta
	info        ObjectInfo
	start, size int64 // the range read, within the object

	mu     sync.Mutex
	off    int64  // Read's position, relative to start
	win    window // the last window fetched
	ck     crcCheck
	closed bool
	hold   partHold
	// wholeParts counts the spans (parts, or a plain object) checked
	// whole against their CRC32C, and crcBytes the bytes the client
	// checksummed itself for that, where the messenger had not (tests).
	wholeParts atomic.Int32
	crcBytes   atomic.Int64
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
	if opts.Range && opts.Length < -1 {
		return nil, ops.Errorf(ErrInvalidRange.Status, "length %d: a count of bytes, or -1 for to the end", opts.Length)
	}
	if !opts.Range {
		opts.Offset, opts.Length = 0, -1
	}
	first := windowAt(opts.Offset)
	if opts.Length >= 0 {
		first = min(first, opts.Length)
	}
	o := &Object{c: c, ctx: ctx, bucket: bucket, key: key, start: opts.Offset}
	rep, msg, err := c.getRange(ctx, bucket, key, opts.Offset, first, nil, &o.crcBytes)
	if err != nil {
		return nil, err
	}
	meta := rep.Meta
	o.meta, o.info = meta, objectInfo(key, meta)
	o.size = int64(meta.Size) - opts.Offset
	if opts.Length >= 0 && opts.Length < o.size {
		o.size = opts.Length
	}
	if len(meta.Parts) > 0 {
		msg.Release() // a manifest: the bytes come from the parts
		if size := int64(meta.Size); opts.Offset > size || opts.Offset == size && size > 0 && opts.Length != 0 {
			// The store's rule for an object in one op (its OSD
			// checked it); a manifest's OSD returns the parts instead.
			// No byte at the end is a part of none (an empty last
			// part, GET ?partNumber=N), which S3 answers.
			return nil, ops.Errorf(ErrInvalidRange.Status, "invalid range: offset %d, object size %d", opts.Offset, size)
		}
		o.hold.start(ctx, time.Duration(rep.HoldMs)*time.Millisecond)
		return o, nil
	}
	if err := o.ck.add(o, o.spanAt(o.start), o.start, msg); err != nil {
		msg.Release()
		return nil, err
	}
	o.win = c.keep(0, msg)
	return o, nil
}

// Stat is the object's info (of the whole object, not the range).
func (o *Object) Stat() (ObjectInfo, error) { return o.info, nil }

// ErrObjectClosed is the error of a read of an Object after its Close.
var ErrObjectClosed = errors.New("client: read of a closed object")

// Close ends reading and releases the window.
func (o *Object) Close() error {
	o.mu.Lock()
	o.closed = true
	o.c.drop(&o.win)
	o.mu.Unlock()
	o.hold.stop()
	return nil
}

// Read reads on from the position, a window at a time.
func (o *Object) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, err := o.next(len(p))
	return copy(p, b), err
}

// WriteTo writes the object from the position to its end to w straight
// from the windows, with no copy in between (io.WriterTo: io.Copy uses it).
func (o *Object) WriteTo(w io.Writer) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var total int64
	for {
		n := readWindow
		if o.hold.on() {
			n = holdSlice
		}
		b, err := o.next(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		k, err := w.Write(b)
		total += int64(k)
		if err == nil && k < len(b) {
			err = io.ErrShortWrite
		}
		if err != nil {
			o.off -= int64(len(b) - k)
			return total, err
		}
	}
}

// next returns up to max bytes from the position, fetching the window
// that holds it if need be, and moves the position past them. The bytes
// live in the window: valid until the next fetch or Close. REQUIRES: o.mu.
func (o *Object) next(max int) ([]byte, error) {
	if o.closed {
		return nil, ErrObjectClosed
	}
	if o.off >= o.size {
		// Read to the end: the window goes back now, not only at Close
		// (io.Copy and io.ReadAll read on to io.EOF).
		o.c.drop(&o.win)
		return nil, io.EOF
	}
	o.renewHold()
	if o.off < o.win.off || o.off >= o.win.off+int64(len(o.win.data)) {
		o.c.drop(&o.win)
		abs := o.start + o.off
		sp := o.spanAt(abs)
		msg, err := o.fetch(sp, abs, min(sp.start+sp.size-abs, windowAt(abs-sp.start), o.size-o.off))
		if err != nil {
			return nil, err
		}
		if err := o.ck.add(o, sp, abs, msg); err != nil {
			msg.Release()
			return nil, err
		}
		o.win = o.c.keep(o.off, msg)
	}
	b := o.win.data[o.off-o.win.off:]
	b = b[:min(len(b), max)]
	o.off += int64(len(b))
	return b, nil
}

// Seek sets Read's position (io.Seeker).
func (o *Object) Seek(offset int64, whence int) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return 0, ErrObjectClosed // as os.File's Seek after Close
	}
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
	o.off = abs
	return abs, nil
}

// ReadAt reads len(p) bytes at off (io.ReaderAt), straight from the
// replies into p, a window at a time.
func (o *Object) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("client: read at %d: negative offset", off)
	}
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return 0, ErrObjectClosed
	}
	if off >= o.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), o.size-off))
	o.renewHold()
	var ck crcCheck // the pieces of one ReadAt are sequential
	for done := 0; done < n; {
		abs := o.start + off + int64(done)
		sp := o.spanAt(abs)
		msg, err := o.fetch(sp, abs, min(sp.start+sp.size-abs, windowAt(abs-sp.start), int64(n-done)))
		if err != nil {
			return done, err
		}
		err = ck.add(o, sp, abs, msg)
		if err == nil {
			done += copy(p[done:], msg.Data)
		}
		msg.Release()
		if err != nil {
			return done, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// span is what one get reads from: a plain object, or the part of a
// multipart object that holds a position. Its bytes are [start,
// start+size) of the object and have CRC32C crc.
type span struct {
	bucket, key string
	start, size int64
	crc         uint32
	part        int               // the part's index; 0 for a plain object
	want        *osdpb.ObjectMeta // the version a plain object must still be
}

// spanAt is the span that holds abs (a position in the object).
func (o *Object) spanAt(abs int64) span {
	if len(o.meta.Parts) == 0 {
		return span{bucket: o.bucket, key: o.key, size: int64(o.meta.Size), crc: o.meta.Crc32C, want: o.meta}
	}
	pos := int64(0)
	for i, p := range o.meta.Parts {
		if abs < pos+int64(p.Size) || i == len(o.meta.Parts)-1 {
			return span{bucket: ops.MultipartBucket, key: p.Key, start: pos, size: int64(p.Size), crc: p.Crc32C, part: i}
		}
		pos += int64(p.Size)
	}
	return span{}
}

// fetch gets n bytes at abs, all within sp. The caller releases the
// reply, whose data they are.
func (o *Object) fetch(sp span, abs, n int64) (*msgr.Message, error) {
	_, msg, err := o.c.getRange(o.ctx, sp.bucket, sp.key, abs-sp.start, n, sp.want, &o.crcBytes)
	if err != nil && sp.want == nil {
		err = fmt.Errorf("%s/%s part %d: %w", o.bucket, o.key, o.meta.Parts[sp.part].GetNumber(), err)
	}
	return msg, err
}

// crcCheck checksums what is fetched of a span from its start on, in
// order, and compares it with the span's CRC32C once it reaches the end;
// a fetch anywhere else ends the check of that span.
type crcCheck struct {
	on   bool
	part int
	pos  int64 // bytes of the span checksummed
	crc  uint32
}

// add checks msg's data, fetched at abs within sp, into c. Where the
// messenger checked the data against a CRC the OSD sent (msgr's
// Message.DataCRC), that CRC is the data's and is combined in without
// reading the bytes again: they are checksummed once in the client.
func (c *crcCheck) add(o *Object, sp span, abs int64, msg *msgr.Message) error {
	data := msg.Data
	switch rel := abs - sp.start; {
	case rel == 0:
		*c = crcCheck{on: true, part: sp.part}
	case !c.on || c.part != sp.part || c.pos != rel:
		c.on = false
		return nil
	}
	if crc, ok := msg.DataCRC(); ok {
		c.crc = ops.CRC32CCombine(c.crc, crc, int64(len(data)))
	} else {
		c.crc = crc32.Update(c.crc, castagnoli, data)
		o.crcBytes.Add(int64(len(data)))
	}
	c.pos += int64(len(data))
	if c.pos < sp.size {
		return nil
	}
	c.on = false
	if c.crc != sp.crc {
		if sp.want == nil {
			return ops.Errorf(ErrBadDigest.Status, "%s/%s: part %d does not match its CRC32C", o.bucket, o.key, o.meta.Parts[sp.part].GetNumber())
		}
		return ops.Errorf(ErrBadDigest.Status, "%s/%s: read bytes have CRC32C %08x, the object %08x", o.bucket, o.key, c.crc, sp.crc)
	}
	o.wholeParts.Add(1)
	return nil
}

// window is the bytes of an object an Object fetched last: a get reply's
// data, kept (msgr's Message.KeepData) after the reply is released, until
// the next window or Close.
type window struct {
	off      int64 // of data, relative to the range start
	data     []byte
	buf      *wire.Buffer // data is in it; the window holds a reference
	external bool         // buf is a transport's memory (holds.external)
}

// A kept window holds no receive credit and none of its session's receive
// window or of the messenger's receive budget: the reply is released as
// soon as its data is kept, so any number of open, unread Objects leave
// an OSD room for the next reply. What a window holds is memory: a pooled
// buffer of the heap, or, for a large reply over RDMA, the registered
// rendezvous buffer it arrived in, which comes out of the transport's
// budget (rdma.Config.MemBudget, 1 GiB by default) that every link of the
// process shares. So windows keep at most keepExternal bytes of a
// transport's memory in all; past that a window is a copy into a pooled
// buffer.
const keepExternal = 128 << 20

// holds counts the bytes of the windows Objects keep.
type holds struct {
	bytes    atomic.Int64 // all (tests)
	external atomic.Int64 // in a transport's memory
}

// keep makes msg, a get reply of off's bytes, an Object's window, and
// releases msg.
func (c *Client) keep(off int64, msg *msgr.Message) window {
	buf, data := msg.KeepData()
	msg.Release()
	w := window{off: off, data: data, buf: buf}
	if buf == nil {
		return w
	}
	n := int64(len(data))
	if buf.External() {
		if c.held.external.Add(n) <= keepExternal {
			w.external = true
		} else {
			c.held.external.Add(-n)
			cp := wire.GetBuffer(len(data))
			copy(cp.B, data)
			buf.Release()
			w.buf, w.data = cp, cp.B
		}
	}
	c.held.bytes.Add(n)
	return w
}

// drop releases a window, once: it is empty afterwards.
func (c *Client) drop(w *window) {
	if w.buf != nil {
		n := int64(len(w.data))
		c.held.bytes.Add(-n)
		if w.external {
			c.held.external.Add(-n)
		}
		w.buf.Release()
	}
	*w = window{}
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
// end) and its metadata; the reply message, which the caller releases,
// holds the bytes as its data. With want set, the object must still be
// that version: a read in windows never mixes two versions of an object.
//
// The OSD may send bytes of a data file it did not check, with the CRC32C
// its store recorded for them (GetObject.client_checks, the reply's
// data_crc32c): they are checked here, once, by the messenger as they
// arrive (Message.DataCRC) or else by this client (counted in crcd). A
// mismatch means the OSD's copy is damaged (on disk, or in its read cache)
// or the bytes were hurt on the way, so the range is asked for again
// (GetObject.recheck): the OSD reads it from the disk past its cache and
// checks it, and repairs its copy from a replica (docs/osd.md, "Reads").
func (c *Client) getRange(ctx context.Context, bucket, key string, off, n int64, want *osdpb.ObjectMeta, crcd *atomic.Int64) (*osdpb.ObjectReply, *msgr.Message, error) {
	rep, msg, err := c.getRangeOnce(ctx, bucket, key, off, n, want, true, crcd)
	if errors.Is(err, errSourceCRC) {
		c.ratelog.Log(c.log, slog.LevelWarn, "source crc mismatch", "client: an OSD sent bytes that do not match the CRC32C its store recorded for them; reading them again, checked by the OSD",
			"bucket", bucket, "key", key, "offset", off, "err", err)
		rep, msg, err = c.getRangeOnce(ctx, bucket, key, off, n, want, false, crcd)
	}
	return rep, msg, err
}

// errSourceCRC: a get's bytes did not match the CRC32C the OSD's store
// recorded for them (getRange asks again).
var errSourceCRC = errors.New("client: the bytes do not match the CRC32C the OSD's store recorded for them")

// getRangeOnce is one get of getRange; clientChecks asks the OSD for
// bytes this client checks (errSourceCRC when they do not match), and
// without it the OSD rechecks them, past its cache.
func (c *Client) getRangeOnce(ctx context.Context, bucket, key string, off, n int64, want *osdpb.ObjectMeta, clientChecks bool, crcd *atomic.Int64) (*osdpb.ObjectReply, *msgr.Message, error) {
	var rep osdpb.ObjectReply
	msg, err := c.do(ctx, osdpb.MsgType_MSG_GET_OBJECT, target{bucket: bucket, key: key}, func(h *osdpb.Header) proto.Message {
		g := &osdpb.GetObject{Header: h, Bucket: bucket, Key: key, HasRange: true, Offset: uint64(off), Length: n,
			ClientChecks: clientChecks, Recheck: !clientChecks}
		if want != nil {
			// The OSD may keep this version for us though it was replaced
			// since our first window (store.Options.KeepReplacedFor).
			g.Want = &osdpb.ObjectMeta{Size: want.Size, MtimeUnixNano: want.MtimeUnixNano, Crc32C: want.Crc32C}
		}
		return g
	}, nil, &rep, true)
	if err != nil {
		return nil, nil, err
	}
	meta := rep.Meta
	if want != nil && (meta.GetMtimeUnixNano() != want.MtimeUnixNano || meta.GetSize() != want.Size || meta.GetCrc32C() != want.Crc32C) {
		msg.Release()
		return nil, nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%s/%s was overwritten while being read; read it again", bucket, key)
	}
	if len(meta.GetParts()) == 0 {
		avail := int64(meta.GetSize()) - off
		if n >= 0 {
			avail = min(avail, n)
		}
		if int64(len(msg.Data)) != avail {
			msg.Release()
			return nil, nil, fmt.Errorf("client: %s/%s: %d bytes at %d expected, %d came", bucket, key, avail, off, len(msg.Data))
		}
	}
	if rep.DataCrc32C != nil && len(msg.Data) > 0 {
		crc, ok := msg.DataCRC()
		if !ok {
			// A secure session, or a link that does not checksum:
			// the one pass is the client's.
			crc = crc32.Checksum(msg.Data, castagnoli)
			crcd.Add(int64(len(msg.Data)))
			msg.SetDataCRC(crc)
		}
		if crc != rep.GetDataCrc32C() {
			msg.Release()
			return nil, nil, fmt.Errorf("%w: %s/%s at %d: %08x, recorded %08x", errSourceCRC, bucket, key, off, crc, rep.GetDataCrc32C())
		}
	}
	return &rep, msg, nil
}
