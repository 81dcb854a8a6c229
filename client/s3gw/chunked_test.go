package s3gw_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestSDKTrailingChecksums: over HTTPS, aws-sdk-go-v2 sends PutObject and
// UploadPart bodies as it does to AWS by default, aws-chunked with
// STREAMING-UNSIGNED-PAYLOAD-TRAILER and the checksum in a trailer; the
// gateway decodes and checks them.
func TestSDKTrailingChecksums(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	var mu sync.Mutex
	seen := map[string]int{} // x-amz-content-sha256 of the bodies with a trailer
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tr := r.Header.Get("X-Amz-Trailer"); tr != "" {
			mu.Lock()
			seen[r.Header.Get("X-Amz-Content-Sha256")+" "+tr]++
			mu.Unlock()
		}
		e.gw.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true, HTTPClient: srv.Client(),
		Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "")})
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("chk")}); err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(1<<20+17, 21)
	for _, alg := range []types.ChecksumAlgorithm{"", types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmSha256} {
		key := "obj-" + string(alg)
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("chk"), Key: aws.String(key), Body: bytes.NewReader(data),
			ChecksumAlgorithm: alg, ContentType: aws.String("text/x-chunked")})
		if err != nil {
			t.Fatalf("put with %q: %v", alg, err)
		}
		if *out.ETag != `"`+md5hex(data)+`"` {
			t.Fatalf("ETag %s, want the decoded body's MD5", *out.ETag)
		}
		got, g := e.get(t, "chk", key, "")
		if !bytes.Equal(got, data) || g.ContentEncoding != nil || *g.ContentType != "text/x-chunked" {
			t.Fatalf("read back: %d bytes (equal %v), Content-Encoding %v", len(got), bytes.Equal(got, data), g.ContentEncoding)
		}
	}
	// A multipart upload's parts go the same way.
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("chk"), Key: aws.String("mp"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
	if err != nil {
		t.Fatal(err)
	}
	parts := [][]byte{osdtest.Payload(5<<20, 22), osdtest.Payload(100, 23)}
	var done []types.CompletedPart
	for i, p := range parts {
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("chk"), Key: aws.String("mp"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
		if err != nil {
			t.Fatal(err)
		}
		// The part's checksum comes back, as S3 answers it (and a
		// PutObject's).
		if up.ChecksumCRC32C == nil || *up.ChecksumCRC32C != *crc32cOf(p) {
			t.Fatalf("part %d: checksum %v, want %s", i+1, up.ChecksumCRC32C, *crc32cOf(p))
		}
		done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: up.ETag})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("chk"), Key: aws.String("mp"),
		UploadId: cr.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.get(t, "chk", "mp", ""); !bytes.Equal(got, slices.Concat(parts...)) {
		t.Fatal("the multipart object differs")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-sha256"} {
		if seen["STREAMING-UNSIGNED-PAYLOAD-TRAILER "+want] == 0 {
			t.Fatalf("the SDK sent no body with a %s trailer: %v", want, seen)
		}
	}
}

// chunkedRequest is a PUT of data as an aws-chunked body, header-signed
// with payload hash mode by aws-sdk-go-v2's signer, its chunks (of size
// bytes) signed by the SDK's stream signer when mode is signed. mutate
// changes the encoded chunks before they are joined.
func chunkedRequest(t *testing.T, url string, data []byte, size int, mode, trailer string, mutate func(chunks [][]byte)) *http.Request {
	t.Helper()
	return chunkedRequestDecoded(t, url, data, len(data), size, mode, trailer, mutate)
}

// chunkedRequestDecoded is chunkedRequest with x-amz-decoded-content-length
// decoded, which may lie about data.
func chunkedRequestDecoded(t *testing.T, url string, data []byte, decoded, size int, mode, trailer string, mutate func(chunks [][]byte)) *http.Request {
	t.Helper()
	now := time.Now()
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pieces [][]byte
	for off := 0; off < len(data); off += size {
		pieces = append(pieces, data[off:min(off+size, len(data))])
	}
	pieces = append(pieces, nil) // the final, empty chunk
	// The encoded length, which the request's signature covers, first.
	sigLen := 0
	signedTrailer := mode == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	if mode == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" || signedTrailer {
		sigLen = len(";chunk-signature=") + 64
	}
	encLen := 0
	if trailer != "" {
		encLen = len(trailer) + 2 // and the CRLF the last chunk has anyway ends the trailer section
	}
	if signedTrailer {
		encLen += len("x-amz-trailer-signature:") + 64 + 2
	}
	for _, p := range pieces {
		encLen += len(strconv.FormatInt(int64(len(p)), 16)) + sigLen + 2 + len(p) + 2
	}
	req.ContentLength = int64(encLen)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(decoded))
	req.Header.Set("X-Amz-Content-Sha256", mode)
	if trailer != "" {
		name, _, _ := strings.Cut(trailer, ":")
		req.Header.Set("X-Amz-Trailer", name)
	}
	creds := aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, mode, "s3", "us-east-1", now); err != nil {
		t.Fatal(err)
	}
	_, seed, _ := strings.Cut(req.Header.Get("Authorization"), "Signature=")
	seedBytes, _ := hex.DecodeString(seed)
	ss := v4.NewStreamSigner(creds, "s3", "us-east-1", seedBytes)
	var (
		chunks [][]byte
		prev   = seed
	)
	for i, p := range pieces {
		var b bytes.Buffer
		fmt.Fprintf(&b, "%x", len(p))
		if sigLen > 0 {
			// An S3 chunk's signature is an event stream message's
			// with no headers: the hash of nothing in their place.
			sig, err := ss.GetSignature(context.Background(), nil, p, now)
			if err != nil {
				t.Fatal(err)
			}
			prev = hex.EncodeToString(sig)
			b.WriteString(";chunk-signature=" + prev)
		}
		b.WriteString("\r\n")
		b.Write(p)
		if i < len(pieces)-1 || trailer == "" {
			b.WriteString("\r\n")
		}
		chunks = append(chunks, b.Bytes())
	}
	if trailer != "" {
		last := trailer + "\r\n"
		if signedTrailer {
			last += "x-amz-trailer-signature:" + trailerSignature(now, prev, trailer) + "\r\n"
		}
		chunks[len(chunks)-1] = append(chunks[len(chunks)-1], last+"\r\n"...)
	}
	if mutate != nil {
		mutate(chunks)
	}
	body := bytes.Join(chunks, nil)
	req.Body = http.NoBody
	if len(body) > 0 {
		req.Body = readCloser{bytes.NewReader(body)}
	}
	req.ContentLength = int64(len(body))
	return req
}

// trailerSignature signs a trailer of one line, "name:value", as AWS's
// sigv4-streaming-trailers page has it, by hand (aws-sdk-go-v2 has no
// signer for it): HMAC-SHA256 with the request's signing key over
// "AWS4-HMAC-SHA256-TRAILER", the date, the scope, the final chunk's
// signature and the SHA-256 of the trailer's lines, "name:value\n" each.
func trailerSignature(now time.Time, prev, line string) string {
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	date := now.UTC().Format("20060102")
	key := mac(mac(mac(mac([]byte("AWS4"+testSecret), date), "us-east-1"), "s3"), "aws4_request")
	sum := sha256.Sum256([]byte(line + "\n"))
	sts := strings.Join([]string{"AWS4-HMAC-SHA256-TRAILER", now.UTC().Format("20060102T150405Z"), date + "/us-east-1/s3/aws4_request",
		prev, hex.EncodeToString(sum[:])}, "\n")
	return hex.EncodeToString(mac(key, sts))
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// TestChunkedRequests: signed streaming bodies (which aws-sdk-go-v2 does
// not send; signed here with its signer and stream signer) and unsigned
// ones with trailers, good and bad. A bad body is refused and stores
// nothing.
func TestChunkedRequests(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "chunks")
	data := osdtest.Payload(200<<10+3, 31)
	url := e.url + "/chunks/"
	const signed, trailing = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	const signedTrailer = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	crc := func(b []byte) string {
		return "x-amz-checksum-crc32c:" + *crc32cOf(b)
	}

	resp, body := send(t, chunkedRequest(t, url+"signed", data, 64<<10, signed, "", nil), "")
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"`+md5hex(data)+`"` {
		t.Fatalf("signed chunks: %d %s", resp.StatusCode, body)
	}
	if got, _ := e.get(t, "chunks", "signed", ""); !bytes.Equal(got, data) {
		t.Fatal("signed chunks: stored bytes differ")
	}
	resp, body = send(t, chunkedRequest(t, url+"trailing", data, 8<<10, trailing, crc(data), nil), "")
	if resp.StatusCode != 200 || resp.Header.Get("x-amz-checksum-crc32c") != *crc32cOf(data) {
		t.Fatalf("unsigned chunks with a trailer: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	if got, _ := e.get(t, "chunks", "trailing", ""); !bytes.Equal(got, data) {
		t.Fatal("trailing: stored bytes differ")
	}
	resp, body = send(t, chunkedRequest(t, url+"signed-trailer", data, 64<<10, signedTrailer, crc(data), nil), "")
	if resp.StatusCode != 200 || resp.Header.Get("x-amz-checksum-crc32c") != *crc32cOf(data) || resp.Header.Get("ETag") != `"`+md5hex(data)+`"` {
		t.Fatalf("signed chunks with a signed trailer: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	if got, _ := e.get(t, "chunks", "signed-trailer", ""); !bytes.Equal(got, data) {
		t.Fatal("signed-trailer: stored bytes differ")
	}
	empty := chunkedRequest(t, url+"empty", nil, 1, signed, "", nil)
	if resp, body := send(t, empty, ""); resp.StatusCode != 200 {
		t.Fatalf("an empty signed body: %d %s", resp.StatusCode, body)
	}

	cutTrailer := chunkedRequest(t, url+"signed-trailer", data, 64<<10, signedTrailer, crc(data), nil)
	flip := func(i, at int) func([][]byte) {
		return func(c [][]byte) { c[i][at] ^= 1 }
	}
	// hexFlip changes a signature's hex digit to another hex digit (flip
	// could make 'a' or 'f' a non-digit, a malformed chunk rather than a
	// wrong signature, in one run out of eight).
	hexFlip := func(i, at int) func([][]byte) {
		return func(c [][]byte) { c[i][at] = "10"[min(c[i][at]-'0', 1)] }
	}
	for _, tc := range []struct {
		what   string
		key    string
		req    *http.Request
		code   string
		status int
		cut    int // bytes of the body sent before the connection is half-closed; 0 all
	}{
		{"a signed body cut short", "signed", chunkedRequest(t, url+"signed", data, 64<<10, signed, "", nil), "IncompleteBody", 400, 100 << 10},
		{"an unsigned body cut short", "trailing", chunkedRequest(t, url+"trailing", data, 8<<10, trailing, crc(data), nil), "IncompleteBody", 400, 100 << 10},
		{"a chunk's bytes changed", "signed", chunkedRequest(t, url+"signed", data, 64<<10, signed, "", func(c [][]byte) { c[1][len(c[1])-10] ^= 1 }),
			"SignatureDoesNotMatch", 403, 0},
		{"a chunk's signature changed", "signed", chunkedRequest(t, url+"signed", data, 64<<10, signed, "", func(c [][]byte) { c[2][30] = "10"[min(c[2][30]-'0', 1)] }),
			"SignatureDoesNotMatch", 403, 0},
		{"the final chunk's signature changed", "signed", chunkedRequest(t, url+"signed", data, 64<<10, signed, "", hexFlip(4, 30)),
			"SignatureDoesNotMatch", 403, 0},
		{"chunks reordered", "signed", chunkedRequest(t, url+"signed", data, 64<<10, signed, "", func(c [][]byte) { c[0], c[1] = c[1], c[0] }),
			"SignatureDoesNotMatch", 403, 0},
		{"a wrong trailer checksum", "trailing", chunkedRequest(t, url+"trailing", data, 8<<10, trailing, crc([]byte("x")), nil),
			"BadDigest", 400, 0},
		{"an unsigned chunk changed", "trailing", chunkedRequest(t, url+"trailing", data, 8<<10, trailing, crc(data), flip(3, 100)),
			"BadDigest", 400, 0},
		{"no trailer", "trailing", chunkedRequest(t, url+"trailing", data, 8<<10, trailing, "", nil),
			"InvalidRequest", 400, 0},
		{"a signed trailer's signature changed", "signed-trailer", chunkedRequest(t, url+"signed-trailer", data, 64<<10, signedTrailer, crc(data),
			func(c [][]byte) { l := c[len(c)-1]; l[len(l)-10] = "10"[min(l[len(l)-10]-'0', 1)] }), "SignatureDoesNotMatch", 403, 0},
		{"a signed trailer's checksum changed", "signed-trailer", chunkedRequest(t, url+"signed-trailer", data, 64<<10, signedTrailer, crc(data),
			func(c [][]byte) { l := c[len(c)-1]; copy(l[bytes.IndexByte(l, ':')+1:], "AAAAAA==") }), "SignatureDoesNotMatch", 403, 0},
		{"a wrong checksum, signed", "signed-trailer", chunkedRequest(t, url+"signed-trailer", data, 64<<10, signedTrailer, crc([]byte("x")), nil),
			"BadDigest", 400, 0},
		{"a signed trailer's chunk changed", "signed-trailer", chunkedRequest(t, url+"signed-trailer", data, 64<<10, signedTrailer, crc(data),
			flip(1, 100)), "SignatureDoesNotMatch", 403, 0},
		{"a signed trailer cut in its signature", "signed-trailer", cutTrailer, "IncompleteBody", 400, int(cutTrailer.ContentLength) - 20},
	} {
		var resp *http.Response
		var body []byte
		if tc.cut > 0 {
			resp, body = sendTruncated(t, tc.req, tc.cut)
		} else {
			resp, body = send(t, tc.req, "")
		}
		if resp.StatusCode != tc.status || !bytes.Contains(body, []byte("<Code>"+tc.code+"</Code>")) {
			t.Errorf("%s: %d %s, want %s %d", tc.what, resp.StatusCode, body, tc.code, tc.status)
		}
		if got, _ := e.get(t, "chunks", tc.key, ""); !bytes.Equal(got, data) {
			t.Fatalf("%s: the object changed", tc.what)
		}
	}
}

// crc32cOf is the base64 CRC32C of b, as x-amz-checksum-crc32c.
func crc32cOf(b []byte) *string {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	return aws.String(base64.StdEncoding.EncodeToString(c[:]))
}

// TestEmptyBodiesChecked: a PUT of no bytes gets every check a body gets
// (they run at the body's end, which no handler reads to when there is
// nothing to store): refused, it stores nothing; passed, its checksum is
// answered.
func TestEmptyBodiesChecked(t *testing.T) {
	var mu sync.Mutex
	var refusedOps []string // the operations the access log and metrics name for refused requests
	e := newEnvWith(t, func(o *s3gw.Options) {
		o.OnRequest = func(r s3gw.RequestInfo) {
			if r.Status >= 400 {
				mu.Lock()
				refusedOps = append(refusedOps, r.Op)
				mu.Unlock()
			}
		}
	})
	e.mb(t, "empty")
	e.put(t, "empty", "k", []byte("keep"))
	url := e.url + "/empty/k"
	const signed, trailing = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	crc := func(b []byte) string { return "x-amz-checksum-crc32c:" + *crc32cOf(b) }
	hashed := func(claimed string) *http.Request {
		req, _ := http.NewRequest(http.MethodPut, url, http.NoBody)
		req.Header.Set("X-Amz-Content-Sha256", claimed)
		if err := v4.NewSigner().SignHTTP(e.ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
			req, claimed, "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		return req
	}
	_, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("empty"), Key: aws.String("k"), Body: bytes.NewReader(nil),
		ChecksumCRC32C: crc32cOf([]byte("abc"))})
	wantCode(t, "an empty PUT with the CRC32C of abc", err, "BadDigest", 400)
	for _, tc := range []struct {
		what, code string
		status     int
		req        *http.Request
	}{
		{"the payload hash of abc", "XAmzContentSHA256Mismatch", 400, hashed(sha256hex([]byte("abc")))},
		{"a final chunk's signature changed", "SignatureDoesNotMatch", 403,
			chunkedRequest(t, url, nil, 1, signed, "", func(c [][]byte) { c[0][30] = "10"[min(c[0][30]-'0', 1)] })},
		{"a trailer with the CRC32C of x", "BadDigest", 400, chunkedRequest(t, url, nil, 1, trailing, crc([]byte("x")), nil)},
		{"a chunk of 5 bytes past the decoded length 0", "", 400, chunkedRequestDecoded(t, url, []byte("hello"), 0, 5, trailing, crc(nil), nil)},
	} {
		resp, body := send(t, tc.req, "")
		if resp.StatusCode != tc.status || !bytes.Contains(body, []byte("<Code>"+tc.code)) {
			t.Errorf("an empty PUT with %s: %d %s, want %s %d", tc.what, resp.StatusCode, body, tc.code, tc.status)
		}
		if got, _ := e.get(t, "empty", "k", ""); string(got) != "keep" {
			t.Fatalf("an empty PUT with %s: the object is now %q", tc.what, got)
		}
	}
	mu.Lock()
	for _, op := range refusedOps {
		if op != "PutObject" {
			t.Errorf("refused empty PUTs counted as %q", refusedOps)
			break
		}
	}
	mu.Unlock()
	resp, body := send(t, chunkedRequest(t, url, nil, 1, trailing, crc(nil), nil), "")
	if resp.StatusCode != 200 || resp.Header.Get("X-Amz-Checksum-Crc32c") != "AAAAAA==" {
		t.Fatalf("an empty PUT with its trailer: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	if got, _ := e.get(t, "empty", "k", ""); len(got) != 0 {
		t.Fatalf("after an empty PUT: %q", got)
	}
}
