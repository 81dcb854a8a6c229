package s3gw_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

func TestCopyObject(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "src")
	e.mb(t, "dst")
	data := osdtest.Payload(3<<20+17, 7)
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("src"), Key: aws.String("a/b c.bin"),
		Body: bytes.NewReader(data), ContentType: aws.String("application/x-src"), Metadata: map[string]string{"color": "red"}}); err != nil {
		t.Fatal(err)
	}

	// COPY (the default): bytes, content type and metadata come along;
	// the source key's space and slash survive the header's URL encoding.
	before := time.Now().Add(-time.Second)
	out, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"),
		CopySource: aws.String("src/a/b%20c.bin")})
	if err != nil {
		t.Fatal(err)
	}
	if got := *out.CopyObjectResult.ETag; got != `"`+md5hex(data)+`"` {
		t.Fatalf("copy's ETag %s, want the body's MD5", got)
	}
	if lm := out.CopyObjectResult.LastModified; lm == nil || lm.Before(before) {
		t.Fatalf("copy's LastModified %v", lm)
	}
	b, got := e.get(t, "dst", "copy", "")
	if !bytes.Equal(b, data) || *got.ContentType != "application/x-src" || got.Metadata["color"] != "red" {
		t.Fatalf("the copy: %d bytes (equal %v), %s, %v", len(b), bytes.Equal(b, data), *got.ContentType, got.Metadata)
	}

	// REPLACE: the request's metadata instead; onto itself it is allowed.
	if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("src"), Key: aws.String("a/b c.bin"),
		CopySource: aws.String("src/a/b%20c.bin"), MetadataDirective: types.MetadataDirectiveReplace,
		ContentType: aws.String("text/plain"), Metadata: map[string]string{"shape": "round"}}); err != nil {
		t.Fatal(err)
	}
	b, got = e.get(t, "src", "a/b c.bin", "")
	if !bytes.Equal(b, data) || *got.ContentType != "text/plain" || got.Metadata["shape"] != "round" || got.Metadata["color"] != "" {
		t.Fatalf("after REPLACE onto itself: %s %v", *got.ContentType, got.Metadata)
	}

	for _, tc := range []struct {
		what   string
		in     *s3.CopyObjectInput
		code   string
		status int
	}{
		{"onto itself without REPLACE", &s3.CopyObjectInput{Bucket: aws.String("src"), Key: aws.String("a/b c.bin"), CopySource: aws.String("src/a/b%20c.bin")}, "InvalidRequest", http.StatusBadRequest},
		{"a missing source", &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src/nope")}, "NoSuchKey", http.StatusNotFound},
		{"a missing source bucket", &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("nobucket/k")}, "NoSuchBucket", http.StatusNotFound},
		{"a missing destination bucket", &s3.CopyObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("x"), CopySource: aws.String("src/a/b%20c.bin")}, "NoSuchBucket", http.StatusNotFound},
		{"a source without a key", &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src")}, "InvalidArgument", http.StatusBadRequest},
		{"a version", &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src/a/b%20c.bin?versionId=3")}, "NotImplemented", http.StatusNotImplemented},
		{"a condition that does not hold", &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src/a/b%20c.bin"), CopySourceIfMatch: aws.String(`"x"`)}, "PreconditionFailed", http.StatusPreconditionFailed},
		{"a source not modified since", &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src/a/b%20c.bin"), CopySourceIfModifiedSince: aws.Time(time.Now().Add(time.Hour))}, "PreconditionFailed", http.StatusPreconditionFailed},
	} {
		_, err := e.s3.CopyObject(ctx, tc.in)
		wantCode(t, tc.what, err, tc.code, tc.status)
	}
	if _, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("dst"), Key: aws.String("x")}); err == nil {
		t.Fatal("a refused copy left an object")
	}
	// A condition that holds: the copy goes.
	if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("y"),
		CopySource: aws.String("src/a/b%20c.bin"), CopySourceIfMatch: aws.String(`"` + md5hex(data) + `"`)}); err != nil {
		t.Fatalf("a copy whose condition holds: %v", err)
	}
}

// TestUploadPartCopy makes an object from parts copied out of two others
// (a range of one, the whole of the other) and an uploaded part, then
// reads it back whole and by partNumber.
func TestUploadPartCopy(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "upc")
	big := osdtest.Payload(12<<20+5, 11)
	small := osdtest.Payload(3000, 12)
	e.put(t, "upc", "big", big)
	e.put(t, "upc", "small", small)
	b, k := aws.String("upc"), aws.String("assembled")
	cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: k})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.UploadId
	copyPart := func(n int32, src, rng string) (*s3.UploadPartCopyOutput, error) {
		in := &s3.UploadPartCopyInput{Bucket: b, Key: k, UploadId: id, PartNumber: aws.Int32(n), CopySource: aws.String(src)}
		if rng != "" {
			in.CopySourceRange = aws.String(rng)
		}
		return e.s3.UploadPartCopy(ctx, in)
	}
	// Part 1: 6 MiB from the middle of big; part 2: uploaded; part 3:
	// all of small.
	p1, err := copyPart(1, "upc/big", "bytes=1048576-7340031")
	if err != nil {
		t.Fatal(err)
	}
	want1 := big[1<<20 : 7<<20]
	if *p1.CopyPartResult.ETag != `"`+md5hex(want1)+`"` || p1.CopyPartResult.LastModified == nil {
		t.Fatalf("part 1: ETag %s, want the range's MD5 %s", *p1.CopyPartResult.ETag, md5hex(want1))
	}
	mid := osdtest.Payload(5<<20, 13)
	p2, err := e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: b, Key: k, UploadId: id, PartNumber: aws.Int32(2), Body: bytes.NewReader(mid)})
	if err != nil {
		t.Fatal(err)
	}
	p3, err := copyPart(3, "upc/small", "")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		what, src, rng string
		n              int32
		code           string
		status         int
	}{
		{"a range past the source's end", "upc/big", "bytes=0-12582917", 4, "InvalidArgument", http.StatusBadRequest},
		{"a range starting past the end", "upc/small", "bytes=5000-5001", 4, "InvalidArgument", http.StatusBadRequest},
		{"an open range", "upc/big", "bytes=5-", 4, "InvalidArgument", http.StatusBadRequest},
		{"a suffix range", "upc/big", "bytes=-5", 4, "InvalidArgument", http.StatusBadRequest},
		{"an empty suffix range", "upc/big", "bytes=-0", 4, "InvalidArgument", http.StatusBadRequest},
		{"a missing source", "upc/nope", "", 4, "NoSuchKey", http.StatusNotFound},
		{"part 0", "upc/small", "", 0, "InvalidArgument", http.StatusBadRequest},
	} {
		_, err := copyPart(tc.n, tc.src, tc.rng)
		wantCode(t, tc.what, err, tc.code, tc.status)
	}
	// Said in S3's terms, not the store's.
	if _, err := copyPart(4, "upc/small", "bytes=3000-3001"); err == nil || !strings.Contains(err.Error(), "starts past the source's end") || strings.Contains(err.Error(), "store") {
		t.Errorf("a range starting at the source's end: %v", err)
	}
	_, err = e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: b, Key: k, UploadId: id, PartNumber: aws.Int32(4),
		CopySource: aws.String("upc/small"), CopySourceIfNoneMatch: aws.String(`"` + md5hex(small) + `"`)})
	wantCode(t, "a source condition that does not hold", err, "PreconditionFailed", http.StatusPreconditionFailed)
	_, err = e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: b, Key: k, UploadId: aws.String("0123456789abcdef0123456789abcdef"),
		PartNumber: aws.Int32(1), CopySource: aws.String("upc/small")})
	wantCode(t, "an unknown upload", err, "NoSuchUpload", http.StatusNotFound)
	lp, err := e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: k, UploadId: id})
	if err != nil || len(lp.Parts) != 3 {
		t.Fatalf("parts after refused copies: %v %d", err, len(lp.Parts))
	}

	if _, err := e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{PartNumber: aws.Int32(1), ETag: p1.CopyPartResult.ETag}, {PartNumber: aws.Int32(2), ETag: p2.ETag},
			{PartNumber: aws.Int32(3), ETag: p3.CopyPartResult.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	whole := slices.Concat(want1, mid, small)
	if got, _ := e.get(t, "upc", "assembled", ""); !bytes.Equal(got, whole) {
		t.Fatalf("assembled object: %d bytes, equal %v", len(got), bytes.Equal(got, whole))
	}

	// GET and HEAD of one part: its bytes, 206 with its Content-Range,
	// and the count of parts.
	for n, want := range [][]byte{want1, mid, small} {
		out, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: k, PartNumber: aws.Int32(int32(n + 1))})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		off := len(whole) - len(slices.Concat([][]byte{want1, mid, small}[n:]...))
		wantRange := fmt.Sprintf("bytes %d-%d/%d", off, off+len(want)-1, len(whole))
		if err != nil || !bytes.Equal(got, want) || *out.PartsCount != 3 || *out.ContentRange != wantRange {
			t.Fatalf("part %d: %v, %d bytes (equal %v), parts %v, range %v want %s", n+1, err, len(got), bytes.Equal(got, want),
				out.PartsCount, *out.ContentRange, wantRange)
		}
		h, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: k, PartNumber: aws.Int32(int32(n + 1))})
		if err != nil || *h.ContentLength != int64(len(want)) || *h.PartsCount != 3 {
			t.Fatalf("head of part %d: %v %+v", n+1, err, h)
		}
	}
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: k, PartNumber: aws.Int32(4)})
	wantCode(t, "a part past the last", err, "InvalidPartNumber", http.StatusRequestedRangeNotSatisfiable)
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: k, PartNumber: aws.Int32(1), Range: aws.String("bytes=0-1")})
	wantCode(t, "a part and a range", err, "InvalidRequest", http.StatusBadRequest)
	// An object put whole is its own part 1, and has no other.
	out, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("small"), PartNumber: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, small) || out.PartsCount != nil {
		t.Fatalf("part 1 of a plain object: %v %d bytes, parts %v", err, len(got), out.PartsCount)
	}
	_, err = e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String("small"), PartNumber: aws.Int32(2)})
	wantCode(t, "part 2 of a plain object", err, "RequestedRangeNotSatisfiable", http.StatusRequestedRangeNotSatisfiable)
}

// TestLongCopyAnswersEarly: a copy still running when its keep-alive is
// due (here at once) has its 200 and the XML declaration sent first, and a
// space at each interval while it runs, as AWS answers a long copy; the
// SDK reads the result after them, and an Error document after them as
// the failure it is. CopyObject and UploadPartCopy alike.
func TestLongCopyAnswersEarly(t *testing.T) {
	s3gw.SetCopyKeepAlive(t, 0, time.Millisecond)
	var mu sync.Mutex
	var seen []s3gw.RequestInfo
	e := newEnvWith(t, func(o *s3gw.Options) {
		o.OnRequest = func(r s3gw.RequestInfo) {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
		}
	})
	ctx := e.ctx
	e.mb(t, "src")
	e.mb(t, "dst")
	data := osdtest.Payload(3<<20+17, 8)
	e.put(t, "src", "obj", data)
	out, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("src/obj")})
	if err != nil {
		t.Fatal(err)
	}
	if got := *out.CopyObjectResult.ETag; got != `"`+md5hex(data)+`"` {
		t.Fatalf("copy's ETag %s, want the body's MD5", got)
	}
	if b, _ := e.get(t, "dst", "copy", ""); !bytes.Equal(b, data) {
		t.Fatalf("the copy: %d bytes, not the source's", len(b))
	}
	// Failures found once the 200 is out come in its body; the SDK
	// reports them as a 500 (and retries them, as AWS advises).
	_, err = e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("x"), CopySource: aws.String("src/obj")})
	if c, s := code(err); c != "NoSuchBucket" || s != http.StatusInternalServerError {
		t.Fatalf("a copy into a missing bucket, after its 200: %v (%q %d)", err, c, s)
	}
	// The metrics (and access log) count it as the failure it is.
	osdtest.Eventually(t, 10*time.Second, "the failed copy's RequestInfo", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(seen, func(r s3gw.RequestInfo) bool {
			return r.Op == "CopyObject" && r.Status == http.StatusNotFound && r.Error == "NoSuchBucket"
		})
	})
	_, err = e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("dst"), Key: aws.String("mp"), UploadId: aws.String("no-such-upload"),
		PartNumber: aws.Int32(1), CopySource: aws.String("src/obj")})
	if c, s := code(err); c != "NoSuchUpload" || s != http.StatusInternalServerError {
		t.Fatalf("a part copied into a missing upload, after its 200: %v (%q %d)", err, c, s)
	}
	up, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("dst"), Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("dst"), Key: aws.String("mp"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), CopySource: aws.String("src/obj")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("dst"), Key: aws.String("mp"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.CopyPartResult.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := e.get(t, "dst", "mp", ""); !bytes.Equal(b, data) {
		t.Fatalf("the object of a copied part: %d bytes, not the source's", len(b))
	}
}

// TestCopyOutlastsClientTimeout: a copy (a request without a body) that
// runs past ClientTimeout is not cut by it: nothing of the client can
// stall, and a read deadline left on the idle connection would end the
// request's context when it passed. The copy goes through a second
// gateway of 5 ms; the source is put, and the copy checked, through the
// first, whose minute no loaded machine's scheduling runs out.
func TestCopyOutlastsClientTimeout(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "src")
	data := osdtest.Payload(16<<20, 9)
	e.put(t, "src", "obj", data)
	short, err := s3gw.New(s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
		ClientTimeout: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(short)
	defer srv.Close()
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "")})
	start := time.Now()
	if _, err := c.CopyObject(e.ctx, &s3.CopyObjectInput{Bucket: aws.String("src"), Key: aws.String("copy"), CopySource: aws.String("src/obj")}); err != nil {
		t.Fatalf("a copy of %v, ClientTimeout 5ms: %v", time.Since(start), err)
	}
	if took := time.Since(start); took < 5*time.Millisecond {
		t.Skipf("the copy took %v, inside ClientTimeout: nothing tested", took)
	}
	if b, _ := e.get(t, "src", "copy", ""); !bytes.Equal(b, data) {
		t.Fatal("the copy differs from its source")
	}
}

// TestCopyChecksums: a copy that names x-amz-checksum-algorithm answers
// the copy's checksum of it, as S3 does: CRC32C, the store's own, and
// SHA-256, computed as the bytes pass.
func TestCopyChecksums(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "cks")
	data := osdtest.Payload(3<<20+5, 63)
	e.put(t, "cks", "src", data)
	sha := sha256.Sum256(data)
	crc := binary.BigEndian.AppendUint32(nil, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	for _, c := range []struct {
		alg  types.ChecksumAlgorithm
		want string
		got  func(*types.CopyObjectResult) *string
	}{
		{types.ChecksumAlgorithmSha256, base64.StdEncoding.EncodeToString(sha[:]), func(r *types.CopyObjectResult) *string { return r.ChecksumSHA256 }},
		{types.ChecksumAlgorithmCrc32c, base64.StdEncoding.EncodeToString(crc), func(r *types.CopyObjectResult) *string { return r.ChecksumCRC32C }},
	} {
		out, err := e.s3.CopyObject(e.ctx, &s3.CopyObjectInput{Bucket: aws.String("cks"), Key: aws.String("dst-" + string(c.alg)),
			CopySource: aws.String("cks/src"), ChecksumAlgorithm: c.alg})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(c.got(out.CopyObjectResult)); got != c.want || out.CopyObjectResult.ChecksumType != types.ChecksumTypeFullObject {
			t.Fatalf("a copy asking for %s: %q (%s), want %q", c.alg, got, out.CopyObjectResult.ChecksumType, c.want)
		}
	}
}
