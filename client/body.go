package client

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	md5simd "github.com/minio/md5-simd"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr/wire"
)

// A put's body goes from the caller's io.Reader straight into a messenger
// payload buffer (Conn.AllocPayload: registered memory on RDMA, which then
// moves with no further copy; on TCP the link writes large payloads to the
// socket from it): one copy in all, where the SDK used to read into a
// fresh allocation first. Its CRC32C (and, with Options.MD5, its MD5) is
// taken a chunk at a time as the bytes arrive, while they are still in the
// cache, and it is the only checksum of those bytes in the client: the
// messenger sends them without a data CRC (see Options.DisableDataCRC).

// NewMD5 starts an MD5 of about size bytes (-1: not known): crypto/md5
// on the caller's goroutine for small bodies, else a lane of the
// process's md5-simd server, shared with the SDK's ETags and the OSDs
// (internal/ops.NewMD5 says when each). Close releases its lane.
func NewMD5(size int64) md5simd.Hasher { return ops.NewMD5(size) }

// MD5Reader is a body that takes the MD5 of the bytes it returns, as the
// S3 gateway's, which checks them against Content-MD5. A put of one op
// (Options.MD5) that reads such a body from its start takes that MD5 for
// its ETag rather than hashing every byte a second time.
type MD5Reader interface {
	io.Reader
	// ReadMD5 says whether the reader takes the MD5 (ok) and how many
	// bytes it has returned (n); sum is their MD5 once it has returned
	// its last, nil before.
	ReadMD5() (sum []byte, n int64, ok bool)
}

// digestChunk is how much is read before it is checksummed: small enough
// to be in the cache still, large enough that a read costs nothing.
const digestChunk = 256 << 10

// body is a put's bytes in a payload buffer, with their digests.
type body struct {
	buf *wire.Buffer // one reference, the body's own; nil for no bytes
	n   int
	crc uint32 // CRC32C
	md5 []byte // with Options.MD5
}

// release drops the body's reference on its buffer; the messenger may
// hold others until it is done sending.
func (b *body) release() {
	if b.buf != nil {
		b.buf.Release()
		b.buf = nil
	}
}

// etag is the ETag of an object put in one op: S3's hex MD5 with
// Options.MD5, else the CRC32C (see Options.MD5).
func (b *body) etag() string {
	if b.md5 != nil {
		return hex.EncodeToString(b.md5)
	}
	return fmt.Sprintf("crc32c:%08x", b.crc)
}

// wholeDigest is the digest of a body put in pieces, taken in order as
// its bytes are read (an io.TeeReader into it): the MD5 with Options.MD5,
// on the md5-simd server as every body's; nothing without, where the
// ETag is the CRC32C, combined from the pieces'.
type wholeDigest struct{ h md5simd.Hasher }

func (c *Client) newWholeDigest() *wholeDigest {
	if !c.opts.MD5 {
		return nil
	}
	return &wholeDigest{NewMD5(-1)}
}

func (w *wholeDigest) Write(p []byte) (int, error) {
	if w == nil {
		return len(p), nil
	}
	return w.h.Write(p)
}

// etag is the ETag of the bytes written, as body.etag has it for a body
// of CRC32C crc.
func (w *wholeDigest) etag(crc uint32) string {
	b := body{crc: crc}
	if w != nil {
		b.md5 = w.h.Sum(nil)
	}
	return b.etag()
}

func (w *wholeDigest) close() {
	if w != nil {
		w.h.Close()
	}
}

// payloadBuffer returns a buffer of n bytes to send to the primary of tg:
// registered memory of that connection's link where it has any, else a
// pooled buffer. Nil for n == 0.
func (c *Client) payloadBuffer(ctx context.Context, tg target, n int) *wire.Buffer {
	if n == 0 {
		return nil
	}
	b, _ := c.payloadFor(ctx, tg, n)
	return b
}

// payloadFor is payloadBuffer that also returns where the op goes under
// the current map (nil when the primary could not be reached), for the
// op's first attempt (target.via): a small put would otherwise route and
// connect twice, which costs it several allocations.
func (c *Client) payloadFor(ctx context.Context, tg target, n int) (*wire.Buffer, *routed) {
	mp := c.Map()
	pool, pg := c.route(mp, tg)
	conn, err := c.primaryConn(ctx, mp, pool.Id, pg)
	if err != nil {
		conn = nil
	}
	var via *routed
	if conn != nil {
		via = &routed{mp: mp, pool: pool, pg: pg, conn: conn}
	}
	if n == 0 {
		return nil, via
	}
	if conn != nil {
		if b, err := conn.AllocPayload(n); err == nil {
			return b, via
		}
	}
	// The op will fail or go elsewhere; a buffer of any link will do.
	return wire.GetBuffer(n), via
}

// bytesBody is data as a put's body where it lies (PutObjectBytes): its
// buffer wraps data, with one reference, and free runs when the last is
// released.
func (c *Client) bytesBody(data []byte, free func(*wire.Buffer)) body {
	buf := wire.NewExternalBuffer(data, free)
	buf.Owner = callersBytes{}
	bd := body{buf: buf, n: len(data), crc: crc32.Checksum(data, castagnoli)}
	if c.opts.MD5 {
		h := NewMD5(int64(len(data)))
		h.Write(data)
		bd.md5 = h.Sum(nil)
		h.Close()
	}
	return bd
}

// callersBytes owns (wire.Buffer.Owner) a buffer of a caller's bytes that
// PutObjectBytes lends the messenger and waits for (abandon).
type callersBytes struct{}

// inPlace is a PutObjectBytes body as the reader of a put's bodies
// (nextBody): each body is the next bytes of data where they lie, and
// held counts those the messenger may still read. Read, for any other
// reader of it, copies.
type inPlace struct {
	data []byte
	held sync.WaitGroup
}

func (p *inPlace) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.data)
	p.data = p.data[n:]
	return n, nil
}

// next takes up to size bytes as a body, with readBody's errors: io.EOF
// for none, io.ErrUnexpectedEOF for fewer.
func (p *inPlace) next(c *Client, size int) (body, error) {
	if len(p.data) == 0 {
		return body{}, io.EOF
	}
	n := min(size, len(p.data))
	p.held.Add(1)
	bd := c.bytesBody(p.data[:n], func(*wire.Buffer) { p.held.Done() })
	p.data = p.data[n:]
	if n < size {
		return bd, io.ErrUnexpectedEOF
	}
	return bd, nil
}

// nextBody is a put's next body, up to size bytes of r: read into a send
// buffer for tg, or taken in place from PutObjectBytes' bytes.
func (c *Client) nextBody(ctx context.Context, r io.Reader, tg target, size int) (body, error) {
	if p, ok := r.(*inPlace); ok {
		return p.next(c, size)
	}
	return c.readBody(r, c.payloadBuffer(ctx, tg, size))
}

// readBody reads up to len(buf.B) bytes of r into buf (which the body then
// owns, and releases on an error) and checksums them. It returns what
// io.ReadFull would: io.EOF for no bytes, io.ErrUnexpectedEOF for fewer.
func (c *Client) readBody(r io.Reader, buf *wire.Buffer) (body, error) {
	bd := body{buf: buf}
	var h md5simd.Hasher
	mr, _ := r.(MD5Reader)
	if mr != nil {
		if _, n, ok := mr.ReadMD5(); !ok || n != 0 {
			mr = nil // none, or not of these bytes alone
		}
	}
	var p []byte
	if buf != nil {
		p = buf.B
	}
	if c.opts.MD5 && mr == nil {
		h = NewMD5(int64(len(p)))
		defer h.Close()
	}
	var err error
	for bd.n < len(p) && err == nil {
		var k int
		k, err = io.ReadFull(r, p[bd.n:min(bd.n+digestChunk, len(p))])
		chunk := p[bd.n : bd.n+k]
		bd.crc = crc32.Update(bd.crc, castagnoli, chunk)
		if h != nil {
			h.Write(chunk)
		}
		bd.n += k
	}
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF && bd.n > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF, err == nil:
	default:
		bd.release()
		return body{}, err
	}
	switch {
	case h != nil:
		bd.md5 = h.Sum(nil)
	case c.opts.MD5:
		// The reader's MD5, if it covers exactly these bytes: it has
		// none when it holds more than the buffer took.
		if sum, n, _ := mr.ReadMD5(); sum != nil && n == int64(bd.n) {
			bd.md5 = sum
		} else {
			sum := md5.Sum(p[:bd.n])
			bd.md5 = sum[:]
		}
	}
	if bd.n == 0 && bd.buf != nil {
		bd.release()
	}
	if bd.buf != nil {
		bd.buf.B = bd.buf.B[:bd.n]
	}
	return bd, err
}
