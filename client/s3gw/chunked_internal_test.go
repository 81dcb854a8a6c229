package s3gw

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// AWS's published example of a signed streaming upload ("Signature
// Calculations for the Authorization Header: Transferring Payload in
// Multiple Chunks"): 66560 bytes of 'a' in a chunk of 65536 and one of
// 1024, with the signatures the page gives, chained from the request's.
func docChunkSigner() *chunkSigner {
	s := sigV4{Date: "20130524", Region: "us-east-1", Service: "s3"}
	return &chunkSigner{key: signingKey(docCreds["AKIAIOSFODNN7EXAMPLE"], s), amzDate: "20130524T000000Z", scope: s.scope(),
		prev: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"}
}

func docChunkedBody(sigs ...string) []byte {
	var b bytes.Buffer
	for i, n := range []int{65536, 1024, 0} {
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n%s\r\n", n, sigs[i], strings.Repeat("a", n))
	}
	return b.Bytes()
}

var docChunkSigs = []string{
	"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
	"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
	"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
}

func TestChunkedAWSExample(t *testing.T) {
	body := docChunkedBody(docChunkSigs...)
	if len(body) != 66824 {
		t.Fatalf("encoded %d bytes, the example's Content-Length is 66824", len(body))
	}
	got, err := io.ReadAll(newChunkedReader(bytes.NewReader(body), docChunkSigner(), 66560, "", nil))
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte("a"), 66560)) {
		t.Fatalf("decoding the example: %v, %d bytes", err, len(got))
	}
	// Each signature matters, the final empty chunk's too, and the
	// error comes before the body's last byte.
	for i := range docChunkSigs {
		sigs := append([]string(nil), docChunkSigs...)
		sigs[i] = strings.Repeat("0", 64)
		got, err := io.ReadAll(newChunkedReader(bytes.NewReader(docChunkedBody(sigs...)), docChunkSigner(), 66560, "", nil))
		if !errors.Is(err, ErrSignatureDoesNotMatch) || len(got) >= 66560 {
			t.Fatalf("chunk %d's signature wrong: %v after %d bytes", i, err, len(got))
		}
	}
}

// encodeChunked frames data as aws-chunked, unsigned, in chunks of size,
// with trailer lines after the last.
func encodeChunked(data []byte, size int, trailer string) []byte {
	var b bytes.Buffer
	for len(data) > 0 {
		n := min(size, len(data))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, data[:n])
		data = data[n:]
	}
	b.WriteString("0\r\n" + trailer + "\r\n")
	return b.Bytes()
}

func crc32cTrailer(data []byte) string {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.Checksum(data, crc32cTable))
	return "x-amz-checksum-crc32c:" + base64.StdEncoding.EncodeToString(c[:]) + "\r\n"
}

func TestChunkedMalformed(t *testing.T) {
	data := []byte("hello, chunked world")
	good := encodeChunked(data, 7, crc32cTrailer(data))
	decode := func(body []byte, decoded int64) ([]byte, error) {
		return io.ReadAll(newChunkedReader(bytes.NewReader(body), nil, decoded, "x-amz-checksum-crc32c", checksumAlgorithms["crc32c"]))
	}
	if got, err := decode(good, int64(len(data))); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("good body: %v %q", err, got)
	}
	for _, tc := range []struct {
		what    string
		body    []byte
		decoded int64
		want    *Error
	}{
		{"cut in a chunk", good[:12], int64(len(data)), ErrIncompleteBody},
		{"cut before the trailer", good[:bytes.Index(good, []byte("0\r\n"))], int64(len(data)), ErrIncompleteBody},
		{"cut in the trailer", good[:len(good)-3], int64(len(data)), ErrIncompleteBody},
		{"a wrong trailer checksum", encodeChunked(data, 7, crc32cTrailer([]byte("other"))), int64(len(data)), ErrBadDigest},
		{"no trailer", encodeChunked(data, 7, ""), int64(len(data)), ErrInvalidRequest},
		{"a garbage trailer value", encodeChunked(data, 7, "x-amz-checksum-crc32c:!!\r\n"), int64(len(data)), ErrInvalidRequest},
		{"more than the decoded length", good, int64(len(data)) - 1, ErrIncompleteBody},
		{"less than the decoded length", good, int64(len(data)) + 1, ErrIncompleteBody},
		{"a size that is not hex", []byte("zz\r\n"), 10, ErrIncompleteBody},
		{"a negative size", []byte("-1\r\n"), 10, ErrIncompleteBody},
		{"a huge size", []byte("7fffffffffffffff\r\n"), 10, ErrIncompleteBody},
		{"a signature in an unsigned body", []byte("1;chunk-signature=" + strings.Repeat("0", 64) + "\r\na\r\n"), 1, ErrIncompleteBody},
		{"a chunk longer than its size", []byte("1\r\nab\r\n0\r\n\r\n"), 1, ErrIncompleteBody},
		{"a bare LF", []byte("1\na\r\n"), 1, ErrIncompleteBody},
		{"a line without end", bytes.Repeat([]byte("1"), 100<<10), 10, ErrIncompleteBody},
		{"bytes after the end", append(bytes.Clone(good), 'x'), int64(len(data)), ErrIncompleteBody},
		{"too many trailer lines", encodeChunked(data, 7, strings.Repeat("a:b\r\n", 20)+crc32cTrailer(data)), int64(len(data)), ErrIncompleteBody},
	} {
		got, err := decode(tc.body, tc.decoded)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %s", tc.what, err, tc.want.Code)
		}
		if int64(len(got)) >= tc.decoded && tc.decoded > 0 {
			t.Errorf("%s: all %d bytes handed over before the error", tc.what, len(got))
		}
	}
	// A signed chunk without its signature.
	_, err := io.ReadAll(newChunkedReader(bytes.NewReader([]byte("1\r\na\r\n")), docChunkSigner(), 1, "", nil))
	if !errors.Is(err, ErrIncompleteBody) {
		t.Fatalf("a signed body's chunk without a signature: %v", err)
	}
}

// encodeSignedTrailer frames data as STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
// does, signed by s, with a CRC32C trailer: the fuzz target's seed. (The
// tests that check the signatures sign with aws-sdk-go-v2's signer and
// by hand, in chunked_test.go.)
func encodeSignedTrailer(s *chunkSigner, data []byte, size int) []byte {
	var b bytes.Buffer
	for {
		n := min(size, len(data))
		sum := sha256.Sum256(data[:n])
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n%s", n, s.next(sum[:]), data[:n])
		if n == 0 {
			break
		}
		b.WriteString("\r\n")
		data = data[n:]
	}
	return b.Bytes()
}

func TestChunkedSignedTrailer(t *testing.T) {
	data := []byte("hello, signed trailer")
	s := docChunkSigner()
	body := encodeSignedTrailer(s, data, 8)
	line := strings.TrimSuffix(crc32cTrailer(data), "\r\n")
	sum := sha256.Sum256([]byte(line + "\n"))
	body = fmt.Appendf(body, "%s\r\nx-amz-trailer-signature:%s\r\n\r\n", line, s.trailer(sum[:]))
	decode := func(body []byte) ([]byte, error) {
		return io.ReadAll(newChunkedReader(bytes.NewReader(body), docChunkSigner(), int64(len(data)), "x-amz-checksum-crc32c", checksumAlgorithms["crc32c"]))
	}
	if got, err := decode(body); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("good body: %v %q", err, got)
	}
	sigAt := bytes.LastIndex(body, []byte("signature:")) + len("signature:")
	for _, tc := range []struct {
		what string
		body []byte
		want *Error
	}{
		{"no trailer signature", bytes.Replace(body, body[bytes.LastIndex(body, []byte("x-amz-trailer")):len(body)-2], nil, 1), ErrSignatureDoesNotMatch},
		{"a wrong trailer signature", slices.Concat(body[:sigAt], []byte(strings.Repeat("0", 64)), body[sigAt+64:]), ErrSignatureDoesNotMatch},
		{"two trailer signatures", slices.Concat(body[:len(body)-2], body[sigAt-len("x-amz-trailer-signature:"):]), ErrIncompleteBody},
		{"a malformed trailer signature", slices.Concat(body[:sigAt], []byte("zz"), body[sigAt+64:]), ErrIncompleteBody},
		{"a trailer line added", slices.Concat(body[:len(body)-2], []byte("x-amz-meta-a:b\r\n\r\n")), ErrSignatureDoesNotMatch},
	} {
		got, err := decode(tc.body)
		if !errors.Is(err, tc.want) || len(got) >= len(data) {
			t.Errorf("%s: %v after %d bytes, want %s before the last", tc.what, err, len(got), tc.want.Code)
		}
	}
}

// TestChunkedTrailerLineEnds: trailer lines that end as minio-go ends
// them (LF, then CRLF: MinIO takes them) or in a lone LF (the canonical
// form AWS's documentation signs) decode as CRLF-ended ones, signed or
// not, read a byte at a time too (a Peek past the line refills the
// buffer); an empty line that ends in a lone LF does not end the trailer.
func TestChunkedTrailerLineEnds(t *testing.T) {
	data := []byte("hello, minio-go trailer")
	line := strings.TrimSuffix(crc32cTrailer(data), "\r\n")
	unsigned := func(body []byte, r func(io.Reader) io.Reader) ([]byte, error) {
		return io.ReadAll(newChunkedReader(r(bytes.NewReader(body)), nil, int64(len(data)), "x-amz-checksum-crc32c", checksumAlgorithms["crc32c"]))
	}
	signedBody := func(end string) []byte {
		s := docChunkSigner()
		body := encodeSignedTrailer(s, data, 8)
		sum := sha256.Sum256([]byte(line + "\n"))
		return fmt.Appendf(body, "%s%sx-amz-trailer-signature:%s\r\n\r\n", line, end, s.trailer(sum[:]))
	}
	signed := func(body []byte, r func(io.Reader) io.Reader) ([]byte, error) {
		return io.ReadAll(newChunkedReader(r(bytes.NewReader(body)), docChunkSigner(), int64(len(data)), "x-amz-checksum-crc32c", checksumAlgorithms["crc32c"]))
	}
	whole := func(r io.Reader) io.Reader { return r }
	for _, r := range []func(io.Reader) io.Reader{whole, iotest.OneByteReader} {
		for _, end := range []string{"\r\n", "\n\r\n", "\n"} {
			if got, err := unsigned(encodeChunked(data, 5, line+end), r); err != nil || !bytes.Equal(got, data) {
				t.Errorf("unsigned, trailer line ended %q: %v %q", end, err, got)
			}
			if got, err := signed(signedBody(end), r); err != nil || !bytes.Equal(got, data) {
				t.Errorf("signed, trailer line ended %q: %v %q", end, err, got)
			}
		}
		body := append(encodeChunked(data, 5, line+"\r\n")[:0:0], encodeChunked(data, 5, line+"\r\n")...)
		body = append(body[:len(body)-2], '\n') // the last, empty, line
		if _, err := unsigned(body, r); !errors.Is(err, ErrIncompleteBody) {
			t.Errorf("an empty last line ended in a lone LF: %v", err)
		}
	}
}

// FuzzChunkedReader: any body, signed or not, with a trailer or not,
// decodes without panicking to at most its decoded length, all of it when
// it succeeds; and any data framed in any chunk size decodes back to
// itself.
func FuzzChunkedReader(f *testing.F) {
	f.Add(docChunkedBody(docChunkSigs...), uint32(66560), uint8(2))
	data := []byte("hello, chunked world")
	f.Add(encodeChunked(data, 7, crc32cTrailer(data)), uint32(len(data)), uint8(1))
	f.Add([]byte("0\r\n\r\n"), uint32(0), uint8(0))
	// Signed chunks with a signed trailer (its signature wrong: the
	// fuzzer mutates from there).
	signed := encodeSignedTrailer(docChunkSigner(), data, 7)
	f.Add(append(signed, crc32cTrailer(data)+"x-amz-trailer-signature:"+strings.Repeat("0", 64)+"\r\n\r\n"...), uint32(len(data)), uint8(3))
	f.Add(append(encodeSignedTrailer(docChunkSigner(), nil, 1), "x-amz-checksum-crc32c:AAAAAA==\r\n\r\n"...), uint32(0), uint8(3))
	// minio-go's trailer line ends.
	f.Add(encodeChunked(data, 7, strings.TrimSuffix(crc32cTrailer(data), "\r\n")+"\n\r\n"), uint32(len(data)), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, decoded uint32, mode uint8) {
		var cr *chunkedReader
		switch mode % 4 {
		case 0:
			cr = newChunkedReader(bytes.NewReader(body), nil, int64(decoded), "", nil)
		case 1:
			cr = newChunkedReader(bytes.NewReader(body), nil, int64(decoded), "x-amz-checksum-crc32c", checksumAlgorithms["crc32c"])
		case 2:
			cr = newChunkedReader(bytes.NewReader(body), docChunkSigner(), int64(decoded), "", nil)
		case 3:
			cr = newChunkedReader(bytes.NewReader(body), docChunkSigner(), int64(decoded), "x-amz-checksum-crc32c", checksumAlgorithms["crc32c"])
		}
		got, err := io.ReadAll(cr)
		if len(got) > int(decoded) || err == nil && len(got) != int(decoded) {
			t.Fatalf("decoded %d bytes of %d, err %v", len(got), decoded, err)
		}
		size := int(mode)/4 + 1
		back, err := io.ReadAll(newChunkedReader(bytes.NewReader(encodeChunked(body, size, crc32cTrailer(body))), nil, int64(len(body)),
			"x-amz-checksum-crc32c", checksumAlgorithms["crc32c"]))
		if err != nil || !bytes.Equal(back, body) {
			t.Fatalf("round trip in chunks of %d: %v, %d of %d bytes", size, err, len(back), len(body))
		}
	})
}

// chunkedRequestBody is the verified body the gateway makes of a PUT of
// data sent aws-chunked (unsigned, CRC32C trailer), and the request's own
// body under it.
func chunkedRequestBody(t testing.TB, data []byte) (*verifiedBody, *closeCount) {
	t.Helper()
	under := &closeCount{Reader: bytes.NewReader(encodeChunked(data, 7, crc32cTrailer(data)))}
	r := httptest.NewRequest(http.MethodPut, "http://gw/b/k", under)
	r.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(data)))
	r.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32c")
	vb := new(verifiedBody)
	if err := (&Gateway{}).newVerifiedBody(vb, r, authResult{Streaming: streamingUnsignedTrailer}); err != nil {
		t.Fatal(err)
	}
	return vb, under
}

// TestChunkedBodiesReuseBuffers: aws-chunked requests one after another
// share one read buffer instead of leaving 64 KiB each to the GC.
func TestChunkedBodiesReuseBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	data := []byte("hello, chunked world")
	const requests = 100
	bodies := make([]*verifiedBody, requests)
	for i := range bodies {
		bodies[i], _ = chunkedRequestBody(t, data)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, vb := range bodies {
		if _, err := io.Copy(io.Discard, vb); err != nil {
			t.Fatal(err)
		}
		vb.Close()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / requests; per > chunkedBufSize/4 {
		t.Fatalf("%d bytes allocated per request's body read: a read buffer each", per)
	}
}

// closeCount is a body that counts its closes.
type closeCount struct {
	io.Reader
	n int
}

func (c *closeCount) Close() error { c.n++; return nil }

// TestChunkedBodyClose: a request's aws-chunked body gives its read buffer
// back to the pool once, however often it is closed (twice back, two
// requests would share it), closes the request's body, and fails a read
// after Close instead of touching the buffer; a body not read takes none.
func TestChunkedBodyClose(t *testing.T) {
	data := []byte("hello, chunked world")
	vb, under := chunkedRequestBody(t, data)
	if got, err := io.ReadAll(vb); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decoded %q: %v", got, err)
	}
	cr := vb.r.(*chunkedReader)
	for range 2 {
		if err := vb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if under.n == 0 {
		t.Fatal("Close left the request's body open")
	}
	if n, err := cr.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errChunkedClosed) {
		t.Fatalf("read after Close: %d bytes, %v", n, err)
	}
	a, b := chunkedBufs.Get(), chunkedBufs.Get()
	if a == b {
		t.Fatal("the pool handed one buffer out twice: it went back twice")
	}
	chunkedBufs.Put(a)
	chunkedBufs.Put(b)
	if unread, _ := chunkedRequestBody(t, data); unread.r.(*chunkedReader).br != nil {
		t.Fatal("an unread body holds a buffer")
	}
}
