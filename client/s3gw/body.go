package s3gw

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/ospreystore/osprey/client"
)

// A request body is checked as it streams: its SHA-256 when the signature
// covers one, Content-MD5 and any x-amz-checksum-* the client sent. The
// check ends with the last byte, and a body that fails it withholds that
// last read and returns the error instead, so the SDK, which must read
// the whole body before it commits anything, never stores it.

// digestCheck is one digest a body must have.
type digestCheck struct {
	h    hash.Hash
	want []byte
	err  *Error // the answer if it does not match
}

// verifiedBody is a request body being checked.
type verifiedBody struct {
	r      io.ReadCloser
	size   int64 // Content-Length; -1 unknown
	n      int64
	checks []digestCheck
	// checksBuf backs checks for the usual body, which has at most
	// these.
	checksBuf [2]digestCheck
	closer    func() // releases hashers
	// contentMD5 is Content-MD5, and md5 the same once the body has
	// been read whole and matched it: the SDK takes it for the ETag
	// (client.MD5Reader) rather than hashing the bytes again.
	contentMD5, md5 []byte
	// deadline is the connection's read deadline, moved on at each read
	// and cleared once the body has been read whole: net/http then reads on in the
	// background to notice a client that hangs up, and a deadline left
	// behind would cancel the request while the cluster stores the
	// body. nil: none.
	deadline *movingDeadline
	err      error // sticky
}

var (
	crc32cTable  = crc32.MakeTable(crc32.Castagnoli)
	crc64NVMETab = crc64.MakeTable(0x9a6c9329ac4bc9b5) // CRC-64/NVME, reflected
)

// checksumAlgorithms are the x-amz-checksum-* S3 defines. CRC32C is the
// one Osprey keeps for every object.
//
// checksumHeaders are their headers' names, canonical, so that looking
// for them costs no canonicalization per request.
var checksumAlgorithms = map[string]func() hash.Hash{
	"crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"crc32c":    func() hash.Hash { return crc32.New(crc32cTable) },
	"crc64nvme": func() hash.Hash { return crc64.New(crc64NVMETab) },
	"sha1":      sha1.New,
	"sha256":    sha256.New,
}

var checksumHeaders = func() map[string]string {
	m := map[string]string{}
	for name := range checksumAlgorithms {
		m[name] = http.CanonicalHeaderKey("X-Amz-Checksum-" + name)
	}
	return m
}()

// headerOf is h.Get(key) for a key already canonical.
func headerOf(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// newVerifiedBody makes b r's body, wrapped in the checks its headers ask
// for.
func (g *Gateway) newVerifiedBody(b *verifiedBody, r *http.Request, auth authResult) error {
	*b = verifiedBody{r: r.Body, size: r.ContentLength}
	b.checks = b.checksBuf[:0]
	if b.r == nil {
		b.r = http.NoBody
	}
	if auth.Streaming != "" {
		if err := decodeChunked(r, b, auth); err != nil {
			return err
		}
	} else if r.Header.Get("X-Amz-Trailer") != "" {
		// A trailer comes only in an aws-chunked body: one promised
		// otherwise would go unchecked.
		return errf(ErrInvalidRequest, "x-amz-trailer needs an aws-chunked body (x-amz-content-sha256 %s or %s)", streamingUnsignedTrailer, streamingSignedTrailer)
	}
	dropAWSChunked(r)
	if auth.PayloadHash != "" {
		want, _ := hex.DecodeString(auth.PayloadHash)
		b.checks = append(b.checks, digestCheck{sha256.New(), want,
			errf(ErrContentSHA256Mismatch, "the provided x-amz-content-sha256 does not match what was computed")})
	}
	if v, ok := r.Header["Content-Md5"]; ok {
		want, err := base64.StdEncoding.DecodeString(strings.TrimSpace(strings.Join(v, "")))
		if err != nil || len(want) != 16 {
			return errf(ErrInvalidDigest, "the Content-MD5 you specified is not valid")
		}
		h := client.NewMD5(b.size)
		b.closer = h.Close
		b.contentMD5 = want
		b.checks = append(b.checks, digestCheck{h, want, errf(ErrBadDigest, "the Content-MD5 you specified did not match what was received")})
	}
	if err := unknownChecksums(r.Header); err != nil {
		return err
	}
	if completesUpload(r) {
		// Its x-amz-checksum-* is the object's, not the XML's:
		// completeMultipartUpload checks it.
		return nil
	}
	sums := 0
	if auth.Streaming != "" && strings.TrimSpace(r.Header.Get("X-Amz-Trailer")) != "" {
		sums = 1 // the aws-chunked body's trailer carries one
	}
	for name, mk := range checksumAlgorithms {
		v := headerOf(r.Header, checksumHeaders[name])
		if v == "" {
			continue
		}
		if sums++; sums > 1 {
			return errf(ErrInvalidRequest, "expecting a single x-amz-checksum- header; multiple checksum types are not allowed")
		}
		h := mk()
		want, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(want) != h.Size() {
			return errf(ErrInvalidRequest, "value for x-amz-checksum-%s header is invalid", name)
		}
		b.checks = append(b.checks, digestCheck{h, want,
			errf(ErrBadDigest, "the %s you specified did not match the calculated checksum", strings.ToUpper(name))})
	}
	return nil
}

// unknownChecksums refuses a checksum the gateway does not check, in an
// x-amz-checksum-* header or named by x-amz-checksum-algorithm (MD5,
// SHA-512 and the XXHash ones of 2026, say): stored unchecked, the object
// would pass for checked. S3 and MinIO check them; the code is the one
// minio-go's suite takes for a server without them.
func unknownChecksums(h http.Header) error {
	for key, v := range h {
		alg, ok := strings.CutPrefix(key, "X-Amz-Checksum-")
		if !ok {
			continue
		}
		switch alg {
		case "Algorithm":
			if a := strings.ToLower(strings.TrimSpace(strings.Join(v, ""))); a != "" && checksumAlgorithms[a] == nil {
				return errf(ErrInvalidArgument, "x-amz-checksum-algorithm %s: the gateway checks crc32, crc32c, crc64nvme, sha1 and sha256 only", a)
			}
		case "Type", "Mode":
		default:
			if checksumAlgorithms[strings.ToLower(alg)] == nil {
				return errf(ErrInvalidArgument, "x-amz-checksum-%s: the gateway checks crc32, crc32c, crc64nvme, sha1 and sha256 only", strings.ToLower(alg))
			}
		}
	}
	return nil
}

// decodeChunked puts the decoding of an aws-chunked body under b, and
// makes r what the handlers would have seen of a plain body: its
// ContentLength the decoded length, and r.Trailer the trailer's headers
// once the body has been read.
func decodeChunked(r *http.Request, b *verifiedBody, auth authResult) error {
	decoded, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || decoded < 0 {
		return errf(ErrMissingContentLength, "an aws-chunked body needs x-amz-decoded-content-length")
	}
	trailer := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Amz-Trailer")))
	var mk func() hash.Hash
	withTrailer := auth.Streaming == streamingUnsignedTrailer || auth.Streaming == streamingSignedTrailer
	switch alg, ok := strings.CutPrefix(trailer, "x-amz-checksum-"); {
	case trailer == "" && withTrailer:
		return errf(ErrInvalidRequest, "%s needs an x-amz-trailer naming an x-amz-checksum-*", auth.Streaming)
	case trailer != "" && !withTrailer:
		return errf(ErrInvalidRequest, "x-amz-trailer with %s, which has no trailer: send %s or %s", auth.Streaming, streamingSignedTrailer, streamingUnsignedTrailer)
	case trailer != "" && (!ok || checksumAlgorithms[alg] == nil):
		return errf(ErrInvalidRequest, "x-amz-trailer %q: want one x-amz-checksum-* (crc32, crc32c, crc64nvme, sha1, sha256)", trailer)
	case trailer != "":
		mk = checksumAlgorithms[alg]
	}
	cr := newChunkedReader(b.r, auth.chunks, decoded, trailer, mk)
	cr.body, cr.pooled, b.r = b.r, true, cr
	b.size = decoded
	r.ContentLength = decoded
	r.Trailer = cr.trailers
	return nil
}

// completesUpload reports whether r is a CompleteMultipartUpload (a POST
// with an uploadId).
func completesUpload(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.Contains(r.URL.RawQuery, "uploadId") && r.URL.Query().Has("uploadId")
}

// dropAWSChunked takes aws-chunked out of r's Content-Encoding, which S3
// never stores: it names how this request's body was sent, whether or not
// the body is in fact aws-chunked (a client may send the coding with an
// unsigned payload), not how the object is encoded.
func dropAWSChunked(r *http.Request) {
	v := r.Header.Values("Content-Encoding")
	if len(v) == 0 {
		return
	}
	var enc []string
	for _, line := range v {
		for e := range strings.SplitSeq(line, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
				enc = append(enc, e)
			}
		}
	}
	if len(enc) == 0 {
		r.Header.Del("Content-Encoding")
	} else {
		r.Header.Set("Content-Encoding", strings.Join(enc, ", "))
	}
}

func (b *verifiedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.deadline != nil {
		b.deadline.touch()
		defer func() {
			// Kept after an error: net/http may read on to discard
			// what is left of the body, and a stalled client must not
			// hold it.
			if b.err == io.EOF {
				b.deadline.clear()
			}
		}()
	}
	n, err := b.r.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = errf(ErrRequestTimeout, "your socket connection to the server was not read from or written to within the timeout period")
	}
	for _, c := range b.checks {
		c.h.Write(p[:n])
	}
	b.n += int64(n)
	switch {
	case (err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)) && b.size >= 0 && b.n < b.size:
		b.err = errf(ErrIncompleteBody, "the body ended after %d of %d bytes", b.n, b.size)
	case err == io.EOF || b.size >= 0 && b.n == b.size:
		b.err = b.finish()
		if b.err == nil {
			b.err = io.EOF
			return n, err
		}
	case err != nil:
		b.err = err
		return n, err
	default:
		return n, nil
	}
	return 0, b.err
}

// finish compares the digests of the whole body.
func (b *verifiedBody) finish() error {
	for _, c := range b.checks {
		if !bytes.Equal(c.h.Sum(nil), c.want) {
			return c.err
		}
	}
	b.md5 = b.contentMD5
	return nil
}

// ReadMD5 implements client.MD5Reader: the MD5 of a body sent with
// Content-MD5, which it matched.
func (b *verifiedBody) ReadMD5() (sum []byte, n int64, ok bool) {
	return b.md5, b.n, b.contentMD5 != nil
}

func (b *verifiedBody) Close() error {
	if b.closer != nil {
		b.closer()
		b.closer = nil
	}
	return b.r.Close()
}

// maxXMLBody bounds the XML bodies of DeleteObjects and
// CompleteMultipartUpload, read whole: the largest valid one is under
// it (1,000 keys of 1,024 bytes, each byte escaped as an entity of up to
// 6, and their entries; 10,000 parts with a checksum each, about 2 MB).
// Read into memory, each takes its length of Options.MaxBodyMemory.
const maxXMLBody = 8 << 20

// readSmall reads a body the gateway parses itself (XML), at most limit
// bytes, checked. A body of known length (the request's ContentLength,
// size; -1 if unknown) is read into one buffer of about that size: grown
// by doubling, as io.ReadAll does, it would take up to twice the memory
// that Options.MaxBodyMemory charged it.
func readSmall(r io.Reader, size, limit int64) ([]byte, error) {
	if size > limit {
		return nil, errTooBig(limit)
	}
	var b bytes.Buffer
	if size >= 0 {
		b.Grow(int(size) + bytes.MinRead)
	}
	if _, err := b.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, err
	}
	if int64(b.Len()) > limit {
		return nil, errTooBig(limit)
	}
	return b.Bytes(), nil
}

func errTooBig(limit int64) error {
	return errf(ErrMaxMessageLengthExceeded, "your request was too big: its body is over %d bytes", limit)
}
