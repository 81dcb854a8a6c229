package s3gw

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ospreystore/osprey/internal/sigv4"
)

// aws-chunked bodies
// (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html):
// the body comes in chunks, each "SIZE-IN-HEX[;chunk-signature=SIG]\r\n",
// SIZE bytes, "\r\n", and ends with a chunk of size 0. Signed
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), each chunk carries a signature
// chained from the request's own over the chunk's SHA-256; unsigned with
// a trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER, what current SDKs send
// over HTTPS), the last chunk is followed by trailer lines, "NAME:VALUE\r\n",
// among them the checksum x-amz-trailer named, and an empty line. Signed
// with a trailer (STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
// (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming-trailers.html)),
// the chunks are signed as in the signed form and the trailer ends with
// x-amz-trailer-signature, chained from the final chunk's signature over
// the SHA-256 of the other trailer lines, "name:value\n" each, sorted.
//
// A chunk streams through as it arrives: its signature is checked at its
// end, and a chunk that fails, a bad framing, a short body or a trailer
// checksum that does not match is an error returned before the body's
// end, so the SDK, which reads the whole body before it commits, stores
// nothing.

const (
	streamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	streamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	chunkSigAlgorithm        = "AWS4-HMAC-SHA256-PAYLOAD"
	trailerSigAlgorithm      = "AWS4-HMAC-SHA256-TRAILER"
	trailerSigHeader         = "x-amz-trailer-signature"
	// maxChunkLine bounds a chunk's header line and a trailer line: far
	// above "SIZE;chunk-signature=SIG" or a checksum, small enough that a
	// garbage body costs little.
	maxChunkLine = 4 << 10
	maxTrailers  = 8
)

// chunkSigner computes the chain of chunk signatures of a signed
// streaming body.
type chunkSigner struct {
	key     *sigv4.Key // the request's signing key
	amzDate string
	scope   string
	prev    string // hex: the request's signature, then each chunk's
}

// next is the signature of the chunk whose data hashes to sum, and
// becomes the previous one.
func (s *chunkSigner) next(sum []byte) string {
	sts := chunkSigAlgorithm + "\n" + s.amzDate + "\n" + s.scope + "\n" + s.prev + "\n" + emptySHA256 + "\n" + hex.EncodeToString(sum)
	s.prev = hex.EncodeToString(s.key.AppendMAC(nil, []byte(sts)))
	return s.prev
}

// trailer is the signature of a trailer whose canonical lines hash to
// sum, chained from the final chunk's. It ends the chain.
func (s *chunkSigner) trailer(sum []byte) string {
	sts := trailerSigAlgorithm + "\n" + s.amzDate + "\n" + s.scope + "\n" + s.prev + "\n" + hex.EncodeToString(sum)
	return hex.EncodeToString(s.key.AppendMAC(nil, []byte(sts)))
}

// chunkedBufSize is a decoder's read buffer: a whole chunk of the size
// SDKs send (64 KiB) in one read.
const chunkedBufSize = 64 << 10

// chunkedBufs holds decoders' read buffers between requests: one per PUT
// would be 64 KiB of garbage each.
var chunkedBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, chunkedBufSize) }}

// errChunkedClosed is what a decoder's Read returns after Close.
var errChunkedClosed = errors.New("s3gw: read of an aws-chunked body after it was closed")

// chunkedReader decodes an aws-chunked body.
type chunkedReader struct {
	src       io.Reader
	body      io.Closer     // closed by Close; nil: none
	pooled    bool          // br comes from chunkedBufs (a request's decoder)
	br        *bufio.Reader // taken at the first Read, back to the pool at Close
	signer    *chunkSigner  // nil: unsigned chunks
	trailer   string        // the checksum header the trailer must carry (canonical form); "" none
	trailerH  hash.Hash     // its algorithm, over the decoded bytes
	trailers  http.Header   // the trailer lines read
	remaining int64         // decoded bytes still allowed (x-amz-decoded-content-length)

	left   int64     // bytes of the current chunk not yet read
	sig    string    // the current chunk's claimed signature
	chunkH hash.Hash // SHA-256 of the current chunk, signed only
	err    error     // sticky; io.EOF after the last chunk and trailers
}

// newChunkedReader decodes r. decoded is the body's decoded length;
// trailer the checksum header that must come in the trailer ("" for
// none), hashed by mk.
func newChunkedReader(r io.Reader, signer *chunkSigner, decoded int64, trailer string, mk func() hash.Hash) *chunkedReader {
	c := &chunkedReader{src: r, signer: signer, remaining: decoded, trailers: http.Header{}}
	if trailer != "" {
		c.trailer, c.trailerH = http.CanonicalHeaderKey(trailer), mk()
	}
	if signer != nil {
		c.chunkH = sha256.New()
	}
	return c
}

func malformedChunk(format string, args ...any) error {
	return errf(ErrIncompleteBody, "malformed aws-chunked body: "+format, args...)
}

// line reads one CRLF-terminated line, without the CRLF.
func (c *chunkedReader) line() ([]byte, error) {
	b, err := c.rawLine()
	if err != nil {
		return nil, err
	}
	b, ok := bytes.CutSuffix(b, []byte("\r\n"))
	if !ok {
		return nil, malformedChunk("a line that does not end in CRLF")
	}
	return b, nil
}

// trailerLine reads one trailer line, without its end: CRLF, or what
// minio-go (and MinIO, which takes it) ends one with, LF then CRLF, or a
// lone LF (the canonical form AWS's documentation signs). bareLF says the
// line ended in a lone LF; last, that the CRLF after its LF ended the
// body, so it was the trailer's empty line.
func (c *chunkedReader) trailerLine() (b []byte, bareLF, last bool, err error) {
	if b, err = c.rawLine(); err != nil {
		return nil, false, false, err
	}
	if b, ok := bytes.CutSuffix(b, []byte("\r\n")); ok {
		return b, false, false, nil
	}
	// A copy: the Peek may refill the buffer that b is in.
	b = bytes.Clone(b[:len(b)-1])
	if next, err := c.br.Peek(2); err == nil && string(next) == "\r\n" {
		c.br.Discard(2)
		_, err := c.br.Peek(1)
		return b, false, err == io.EOF, nil
	}
	return b, true, false, nil
}

// rawLine reads one line, with its LF, of at most maxChunkLine bytes.
func (c *chunkedReader) rawLine() ([]byte, error) {
	b, err := c.br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || err == nil && len(b) > maxChunkLine:
		return nil, malformedChunk("a line longer than %d bytes", maxChunkLine)
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, errf(ErrIncompleteBody, "the aws-chunked body ended early")
	case err != nil:
		return nil, err
	}
	if len(b) > maxChunkLine {
		return nil, malformedChunk("a line longer than %d bytes", maxChunkLine)
	}
	return b, nil
}

// parseChunkHeader parses "SIZE[;chunk-signature=SIG]"; the signature is
// required when signed, refused when not.
func parseChunkHeader(b []byte, signed bool) (size int64, sig string, err error) {
	sz, ext, hasExt := bytes.Cut(b, []byte(";"))
	if len(sz) == 0 || len(sz) > 15 {
		return 0, "", malformedChunk("chunk size %q", sz)
	}
	for _, ch := range sz {
		if !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f' || 'A' <= ch && ch <= 'F') {
			return 0, "", malformedChunk("chunk size %q", sz)
		}
	}
	size, err = strconv.ParseInt(string(sz), 16, 64)
	if err != nil {
		return 0, "", malformedChunk("chunk size %q", sz)
	}
	if !signed {
		if hasExt {
			return 0, "", malformedChunk("a chunk extension in an unsigned body")
		}
		return size, "", nil
	}
	v, ok := bytes.CutPrefix(ext, []byte("chunk-signature="))
	if !hasExt || !ok || !validSignature(string(v)) {
		return 0, "", malformedChunk("a chunk without a chunk-signature")
	}
	return size, string(v), nil
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.br == nil {
		c.takeBuffer()
	}
	if c.left == 0 {
		if c.err = c.nextChunk(); c.err != nil {
			return 0, c.err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.br.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	if c.chunkH != nil {
		c.chunkH.Write(p[:n])
	}
	if c.trailerH != nil {
		c.trailerH.Write(p[:n])
	}
	switch {
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		if c.left > 0 {
			c.err = errf(ErrIncompleteBody, "the aws-chunked body ended in a chunk")
			return 0, c.err
		}
	case err != nil:
		c.err = err
		return 0, err
	}
	if c.left == 0 {
		// The chunk's end: its CRLF and signature before its last bytes
		// go out; after the body's last chunk, the final one and the
		// trailer too, so the whole body is checked before its end.
		if c.err = c.endChunk(); c.err != nil {
			return 0, c.err
		}
		if c.remaining == 0 {
			if c.err = c.nextChunk(); c.err != io.EOF {
				return 0, c.err
			}
			return n, io.EOF
		}
	}
	return n, nil
}

// takeBuffer gives the decoder its read buffer: at the first Read, so that
// a request refused before its body is read takes none. Only a request's
// decoder takes it from the pool: tests and fuzzing make their own, as the
// pool's paths, which vary with the P and the GC, would pass for new
// coverage and stall the fuzzer minimizing inputs.
func (c *chunkedReader) takeBuffer() {
	if !c.pooled {
		c.br = bufio.NewReaderSize(c.src, chunkedBufSize)
		return
	}
	c.br = chunkedBufs.Get().(*bufio.Reader)
	c.br.Reset(c.src)
}

// Close gives the read buffer back, once, and closes the body under the
// decoder. Reads after it fail.
func (c *chunkedReader) Close() error {
	if c.br != nil && c.pooled {
		c.br.Reset(nil) // holds no request's body while pooled
		chunkedBufs.Put(c.br)
	}
	c.br = nil
	c.err = errChunkedClosed
	if c.body == nil {
		return nil
	}
	return c.body.Close()
}

// nextChunk reads a chunk's header; after the last chunk (size 0), the
// trailer, and then the sticky error is io.EOF.
func (c *chunkedReader) nextChunk() error {
	for c.left == 0 {
		b, err := c.line()
		if err != nil {
			return err
		}
		size, sig, err := parseChunkHeader(b, c.signer != nil)
		if err != nil {
			return err
		}
		if size > c.remaining {
			return malformedChunk("the chunks hold more than x-amz-decoded-content-length")
		}
		c.remaining -= size
		c.left, c.sig = size, sig
		if size == 0 {
			if err := c.checkSignature(); err != nil {
				return err
			}
			return c.finish()
		}
	}
	return nil
}

// endChunk checks the CRLF after a chunk's data and its signature.
func (c *chunkedReader) endChunk() error {
	b, err := c.line()
	if err != nil {
		return err
	}
	if len(b) != 0 {
		return malformedChunk("a chunk longer than its size")
	}
	return c.checkSignature()
}

func (c *chunkedReader) checkSignature() error {
	if c.signer == nil {
		return nil
	}
	want := c.signer.next(c.chunkH.Sum(nil))
	c.chunkH.Reset()
	if subtle.ConstantTimeCompare([]byte(want), []byte(c.sig)) != 1 {
		return errf(ErrSignatureDoesNotMatch, "the chunk signature we calculated does not match the one you provided")
	}
	return nil
}

// finish reads what follows the last chunk: the trailer lines, if any,
// and the empty line; then checks the trailer's signature, when the
// chunks are signed, and its checksum.
func (c *chunkedReader) finish() error {
	if c.remaining != 0 {
		return errf(ErrIncompleteBody, "the chunks hold %d bytes fewer than x-amz-decoded-content-length", c.remaining)
	}
	var (
		canonical []string // "name:value\n" of each line but the signature, names in lower case
		sig       string
	)
	for i, last := 0, false; !last; i++ {
		b, bareLF, end, err := c.trailerLine()
		if err != nil {
			return err
		}
		if len(b) == 0 {
			if bareLF || end {
				return malformedChunk("a line that does not end in CRLF")
			}
			break
		}
		last = end
		name, val, ok := bytes.Cut(b, []byte(":"))
		if !ok || i == maxTrailers || c.trailer == "" {
			return malformedChunk("trailer line %q", b)
		}
		n, v := strings.ToLower(strings.TrimSpace(string(name))), strings.TrimSpace(string(val))
		if c.signer != nil && n == trailerSigHeader {
			if sig != "" || !validSignature(v) {
				return malformedChunk("trailer line %q", b)
			}
			sig = v
			continue
		}
		canonical = append(canonical, n+":"+v+"\n")
		c.trailers.Add(n, v)
	}
	if _, err := c.br.Peek(1); err != io.EOF {
		return malformedChunk("bytes after the last chunk")
	}
	if c.trailer == "" {
		return io.EOF
	}
	if c.signer != nil {
		if sig == "" {
			return errf(ErrSignatureDoesNotMatch, "the trailer has no %s", trailerSigHeader)
		}
		slices.Sort(canonical)
		h := sha256.Sum256([]byte(strings.Join(canonical, "")))
		if subtle.ConstantTimeCompare([]byte(c.signer.trailer(h[:])), []byte(sig)) != 1 {
			return errf(ErrSignatureDoesNotMatch, "the trailer signature we calculated does not match the one you provided")
		}
	}
	v := c.trailers.Get(c.trailer)
	if v == "" {
		return errf(ErrInvalidRequest, "x-amz-trailer named %s, which the trailer does not carry", c.trailer)
	}
	want, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(want) != c.trailerH.Size() {
		return errf(ErrInvalidRequest, "value for %s trailer is invalid", c.trailer)
	}
	if !bytes.Equal(c.trailerH.Sum(nil), want) {
		return errf(ErrBadDigest, "the %s you specified did not match the calculated checksum", c.trailer)
	}
	return io.EOF
}
