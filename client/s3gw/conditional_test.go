package s3gw_test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

func TestConditionalRequests(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "cond")
	data := []byte("conditional body")
	e.put(t, "cond", "k", data)
	etag := `"` + md5hex(data) + `"`
	past, future := aws.Time(time.Now().Add(-time.Hour)), aws.Time(time.Now().Add(time.Hour))

	get := func(in *s3.GetObjectInput) error {
		in.Bucket, in.Key = aws.String("cond"), aws.String("k")
		out, err := e.s3.GetObject(ctx, in)
		if err == nil {
			out.Body.Close()
		}
		return err
	}
	head := func(in *s3.HeadObjectInput) error {
		in.Bucket, in.Key = aws.String("cond"), aws.String("k")
		_, err := e.s3.HeadObject(ctx, in)
		return err
	}
	for _, tc := range []struct {
		what   string
		err    error
		status int // 0: passes
	}{
		{"If-Match right", get(&s3.GetObjectInput{IfMatch: aws.String(etag)}), 0},
		{"If-Match *", get(&s3.GetObjectInput{IfMatch: aws.String("*")}), 0},
		{"If-Match in a list", get(&s3.GetObjectInput{IfMatch: aws.String(`"nope", ` + etag)}), 0},
		{"If-Match wrong", get(&s3.GetObjectInput{IfMatch: aws.String(`"nope"`)}), http.StatusPreconditionFailed},
		{"If-Unmodified-Since past", get(&s3.GetObjectInput{IfUnmodifiedSince: past}), http.StatusPreconditionFailed},
		{"If-Unmodified-Since future", get(&s3.GetObjectInput{IfUnmodifiedSince: future}), 0},
		{"If-Match right beats If-Unmodified-Since past", get(&s3.GetObjectInput{IfMatch: aws.String(etag), IfUnmodifiedSince: past}), 0},
		{"If-None-Match right", get(&s3.GetObjectInput{IfNoneMatch: aws.String(etag)}), http.StatusNotModified},
		{"If-None-Match wrong", get(&s3.GetObjectInput{IfNoneMatch: aws.String(`"nope"`)}), 0},
		{"If-Modified-Since future", get(&s3.GetObjectInput{IfModifiedSince: future}), http.StatusNotModified},
		{"If-Modified-Since past", get(&s3.GetObjectInput{IfModifiedSince: past}), 0},
		{"If-None-Match wrong beats If-Modified-Since future", get(&s3.GetObjectInput{IfNoneMatch: aws.String(`"nope"`), IfModifiedSince: future}), 0},
		{"ranged, If-Match wrong", get(&s3.GetObjectInput{IfMatch: aws.String(`"nope"`), Range: aws.String("bytes=0-3")}), http.StatusPreconditionFailed},
		{"HEAD If-None-Match right", head(&s3.HeadObjectInput{IfNoneMatch: aws.String(etag)}), http.StatusNotModified},
		{"HEAD If-Match wrong", head(&s3.HeadObjectInput{IfMatch: aws.String(`"nope"`)}), http.StatusPreconditionFailed},
	} {
		_, status := code(tc.err)
		if tc.status == 0 && tc.err != nil || tc.status != 0 && status != tc.status {
			t.Errorf("%s: %v (status %d), want status %d", tc.what, tc.err, status, tc.status)
		}
	}
}

// TestConditionsBeforeRange: a GET or HEAD's conditions are evaluated
// before its Range (RFC 9110 13.2.2, as S3 does): a failing condition is
// 412 and a not-modified one 304 even when the range is unsatisfiable,
// which is 416 only once the conditions pass.
func TestConditionsBeforeRange(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "condrange")
	out := e.put(t, "condrange", "k", []byte("0123456789"))
	empty := e.put(t, "condrange", "empty", nil)
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		what   string
		method string
		key    string
		h      map[string]string
		status int
	}{
		{"GET If-Match wrong, range past the end", http.MethodGet, "k", map[string]string{"If-Match": `"nope"`, "Range": "bytes=100-200"}, 412},
		{"GET If-Match wrong, the last 0 bytes", http.MethodGet, "k", map[string]string{"If-Match": `"nope"`, "Range": "bytes=-0"}, 412},
		{"GET If-Match wrong, suffix range of an empty object", http.MethodGet, "empty", map[string]string{"If-Match": `"nope"`, "Range": "bytes=-1"}, 412},
		{"HEAD If-Match wrong, range past the end", http.MethodHead, "k", map[string]string{"If-Match": `"nope"`, "Range": "bytes=100-200"}, 412},
		{"GET If-None-Match same, range past the end", http.MethodGet, "k", map[string]string{"If-None-Match": *out.ETag, "Range": "bytes=100-"}, 304},
		{"HEAD If-None-Match same, range past the end", http.MethodHead, "k", map[string]string{"If-None-Match": *out.ETag, "Range": "bytes=100-"}, 304},
		{"GET If-Unmodified-Since past, range past the end", http.MethodGet, "k", map[string]string{"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT", "Range": "bytes=100-"}, 412},
		{"GET If-Modified-Since future, range past the end", http.MethodGet, "k", map[string]string{"If-Modified-Since": future, "Range": "bytes=100-"}, 304},
		// Dates as Java's RFC_1123_DATE_TIME writes days 1 to 9, and with
		// a numeric zone, as Python's formatdate.
		{"GET If-Unmodified-Since past, one-digit day", http.MethodGet, "k", map[string]string{"If-Unmodified-Since": "Mon, 1 Jan 2001 00:00:00 GMT"}, 412},
		{"GET If-Modified-Since future, one-digit day", http.MethodGet, "k", map[string]string{"If-Modified-Since": "Tue, 1 Dec 2099 00:00:00 GMT"}, 304},
		{"GET If-Modified-Since future, numeric zone", http.MethodGet, "k", map[string]string{"If-Modified-Since": "Tue, 01 Dec 2099 00:00:00 -0000"}, 304},
		// Conditions that pass: the range's 416.
		{"GET If-Match right, range past the end", http.MethodGet, "k", map[string]string{"If-Match": *out.ETag, "Range": "bytes=100-"}, 416},
		{"HEAD If-Match right, range past the end", http.MethodHead, "k", map[string]string{"If-Match": *out.ETag, "Range": "bytes=100-"}, 416},
		{"GET If-None-Match other, range past the end", http.MethodGet, "k", map[string]string{"If-None-Match": `"nope"`, "Range": "bytes=100-"}, 416},
		{"GET If-Match right, suffix range of an empty object", http.MethodGet, "empty", map[string]string{"If-Match": *empty.ETag, "Range": "bytes=-1"}, 416},
	} {
		resp, body := send(t, signedWith(t, tc.method, e.url+"/condrange/"+tc.key, nil, tc.h), "")
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.what, resp.StatusCode, body, tc.status)
			continue
		}
		etag := *out.ETag
		if tc.key == "empty" {
			etag = *empty.ETag
		}
		switch tc.status {
		case 304:
			if resp.Header.Get("ETag") != etag {
				t.Errorf("%s: ETag %q, want %q", tc.what, resp.Header.Get("ETag"), etag)
			}
		case 416:
			if want := fmt.Sprintf("bytes */%d", map[string]int{"k": 10, "empty": 0}[tc.key]); resp.Header.Get("Content-Range") != want {
				t.Errorf("%s: Content-Range %q, want %q", tc.what, resp.Header.Get("Content-Range"), want)
			}
		}
	}
}

// TestConditionalDeletes: S3's conditional deletes, If-Match on DeleteObject
// and an object's ETag in DeleteObjects: the object goes only if its ETag
// is the one named (or for "*", if there is one); a wrong ETag is 412
// PreconditionFailed, a key without an object 404 NoSuchKey, and neither
// deletes anything. Conditions S3 checks on directory buckets only are
// refused, never ignored.
func TestConditionalDeletes(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	b := e.newBucket(t)
	data := []byte("conditional delete")
	etag := `"` + md5hex(data) + `"`
	del := func(key string, set func(*s3.DeleteObjectInput)) error {
		in := &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String(key)}
		set(in)
		_, err := e.s3.DeleteObject(ctx, in)
		return err
	}
	stays := func(what, key string) {
		t.Helper()
		if got, _ := e.get(t, b, key, ""); !bytes.Equal(got, data) {
			t.Fatalf("%s: the object is gone", what)
		}
	}
	gone := func(what, key string) {
		t.Helper()
		_, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String(key)})
		if _, status := code(err); status != http.StatusNotFound {
			t.Fatalf("%s: the object is still there (%v)", what, err)
		}
	}

	e.put(t, b, "k", data)
	wantCode(t, "DELETE If-Match wrong", del("k", func(in *s3.DeleteObjectInput) { in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`) }),
		"PreconditionFailed", http.StatusPreconditionFailed)
	stays("DELETE If-Match wrong", "k")
	wantCode(t, "DELETE x-amz-if-match-size", del("k", func(in *s3.DeleteObjectInput) { in.IfMatchSize = aws.Int64(int64(len(data))) }),
		"NotImplemented", http.StatusNotImplemented)
	stays("DELETE x-amz-if-match-size", "k")
	// An If-Match without a tag is no condition to drop: refused.
	resp, body := send(t, signedWith(t, http.MethodDelete, e.url+"/"+b+"/k", nil, map[string]string{"If-Match": " "}), "")
	wantS3Error(t, "DELETE If-Match blank", resp, body, "InvalidArgument", http.StatusBadRequest)
	stays("DELETE If-Match blank", "k")
	if err := del("k", func(in *s3.DeleteObjectInput) { in.IfMatch = aws.String(etag) }); err != nil {
		t.Fatalf("DELETE If-Match right: %v", err)
	}
	gone("DELETE If-Match right", "k")
	wantCode(t, "DELETE If-Match, no object", del("k", func(in *s3.DeleteObjectInput) { in.IfMatch = aws.String(etag) }),
		"NoSuchKey", http.StatusNotFound)
	wantCode(t, "DELETE If-Match *, no object", del("k", func(in *s3.DeleteObjectInput) { in.IfMatch = aws.String("*") }),
		"NoSuchKey", http.StatusNotFound)
	e.put(t, b, "k", data)
	if err := del("k", func(in *s3.DeleteObjectInput) { in.IfMatch = aws.String("*") }); err != nil {
		t.Fatalf("DELETE If-Match *: %v", err)
	}
	gone("DELETE If-Match *", "k")

	// DeleteObjects: each object's ETag is its own condition.
	for _, k := range []string{"a", "b", "c"} {
		e.put(t, b, k, data)
	}
	out, err := e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b), Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("a"), ETag: aws.String(etag)},
		{Key: aws.String("b"), ETag: aws.String(`"0123456789abcdef0123456789abcdef"`)},
		{Key: aws.String("c")},
		{Key: aws.String("missing"), ETag: aws.String(etag)},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, d := range out.Deleted {
		deleted[aws.ToString(d.Key)] = true
	}
	failed := map[string]string{}
	for _, f := range out.Errors {
		failed[aws.ToString(f.Key)] = aws.ToString(f.Code)
	}
	if !deleted["a"] || !deleted["c"] || len(deleted) != 2 || failed["b"] != "PreconditionFailed" || failed["missing"] != "NoSuchKey" || len(failed) != 2 {
		t.Fatalf("DeleteObjects with ETags: deleted %v, errors %v", deleted, failed)
	}
	gone("DeleteObjects, ETag right", "a")
	stays("DeleteObjects, ETag wrong", "b")
	gone("DeleteObjects, no ETag", "c")
}

// TestConditionalWrites: S3's conditional writes on PutObject, CopyObject's
// destination and CompleteMultipartUpload: If-None-Match "*" writes only a
// new key, If-Match only over the ETag named (404 NoSuchKey with no
// object); a false condition is 412 PreconditionFailed and changes
// nothing.
func TestConditionalWrites(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	b := e.newBucket(t)
	put := func(key, body string, set func(*s3.PutObjectInput)) (*s3.PutObjectOutput, error) {
		in := &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String(key), Body: bytes.NewReader([]byte(body))}
		set(in)
		return e.s3.PutObject(ctx, in)
	}
	first, err := put("k", "first", func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
	if err != nil {
		t.Fatalf("PUT If-None-Match * of a new key: %v", err)
	}
	_, err = put("k", "second", func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
	wantCode(t, "PUT If-None-Match * over an object", err, "PreconditionFailed", http.StatusPreconditionFailed)
	_, err = put("k", "second", func(in *s3.PutObjectInput) { in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`) })
	wantCode(t, "PUT If-Match of another ETag", err, "PreconditionFailed", http.StatusPreconditionFailed)
	if got, _ := e.get(t, b, "k", ""); string(got) != "first" {
		t.Fatalf("after refused PUTs the key holds %q", got)
	}
	_, err = put("missing", "x", func(in *s3.PutObjectInput) { in.IfMatch = first.ETag })
	wantCode(t, "PUT If-Match on a missing key", err, "NoSuchKey", http.StatusNotFound)
	_, err = put("k", "x", func(in *s3.PutObjectInput) { in.IfMatch = aws.String(`"a"b"`) })
	wantCode(t, "PUT with a malformed If-Match", err, "InvalidArgument", http.StatusBadRequest)
	second, err := put("k", "second", func(in *s3.PutObjectInput) { in.IfMatch = first.ETag })
	if err != nil {
		t.Fatalf("PUT If-Match of the object's ETag: %v", err)
	}

	// CopyObject: If-Match and If-None-Match are the destination's.
	e.put(t, b, "src", []byte("source"))
	cp := func(set func(*s3.CopyObjectInput)) error {
		in := &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("k"), CopySource: aws.String(b + "/src")}
		set(in)
		_, err := e.s3.CopyObject(ctx, in)
		return err
	}
	wantCode(t, "copy If-None-Match * over an object", cp(func(in *s3.CopyObjectInput) { in.IfNoneMatch = aws.String("*") }),
		"PreconditionFailed", http.StatusPreconditionFailed)
	wantCode(t, "copy If-Match of the replaced ETag", cp(func(in *s3.CopyObjectInput) { in.IfMatch = first.ETag }),
		"PreconditionFailed", http.StatusPreconditionFailed)
	if got, _ := e.get(t, b, "k", ""); string(got) != "second" {
		t.Fatalf("after refused copies the key holds %q", got)
	}
	if err := cp(func(in *s3.CopyObjectInput) { in.IfMatch = second.ETag }); err != nil {
		t.Fatalf("copy If-Match of the destination's ETag: %v", err)
	}
	if got, _ := e.get(t, b, "k", ""); string(got) != "source" {
		t.Fatalf("after the copy the key holds %q", got)
	}

	// CompleteMultipartUpload: a refused completion leaves the upload,
	// which completes once the condition holds.
	id, data, parts := e.mpUpload(t, b, "k", 5*mib+1, 5*mib, nil)
	complete := func(set func(*s3.CompleteMultipartUploadInput)) error {
		in := &s3.CompleteMultipartUploadInput{Bucket: aws.String(b), Key: aws.String("k"), UploadId: aws.String(id),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
		set(in)
		_, err := e.s3.CompleteMultipartUpload(ctx, in)
		return err
	}
	wantCode(t, "complete If-None-Match * over an object", complete(func(in *s3.CompleteMultipartUploadInput) { in.IfNoneMatch = aws.String("*") }),
		"PreconditionFailed", http.StatusPreconditionFailed)
	wantCode(t, "complete If-None-Match of an ETag", complete(func(in *s3.CompleteMultipartUploadInput) { in.IfNoneMatch = second.ETag }),
		"NotImplemented", http.StatusNotImplemented)
	if got, _ := e.get(t, b, "k", ""); string(got) != "source" {
		t.Fatalf("after refused completions the key holds %q", got)
	}
	h, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if err := complete(func(in *s3.CompleteMultipartUploadInput) { in.IfMatch = h.ETag }); err != nil {
		t.Fatalf("complete If-Match of the object's ETag: %v", err)
	}
	e.wantObject(t, b, "k", data, "", nil)
}

// TestVersionIDRefused: the gateway keeps one version of an object, so a
// request for another version (versionId on GET, HEAD and DELETE, and
// VersionId in DeleteObjects) is 501 NotImplemented, never done on the
// current object; versionId "null", the one version there is, works.
// A bucket's versioning reads as never enabled and cannot be enabled.
func TestVersionIDRefused(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	b := e.newBucket(t)
	data := []byte("the one version")
	e.put(t, b, "k", data)
	e.put(t, b, "k2", data)
	v := aws.String("3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY")
	_, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: v})
	wantCode(t, "GET a version", err, "NotImplemented", http.StatusNotImplemented)
	_, err = e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: v})
	_, status := code(err)
	if status != http.StatusNotImplemented {
		t.Fatalf("HEAD a version: %v, want 501", err)
	}
	_, err = e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: v})
	wantCode(t, "DELETE a version", err, "NotImplemented", http.StatusNotImplemented)
	out, err := e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b), Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("k2"), VersionId: v},
	}}})
	if err != nil || len(out.Errors) != 1 || aws.ToString(out.Errors[0].Code) != "NotImplemented" || len(out.Deleted) != 0 {
		t.Fatalf("DeleteObjects of a version: %+v, %v", out, err)
	}
	// An empty or repeated versionId names no version: 400.
	for _, q := range []string{"?versionId=", "?versionId=null&versionId=null"} {
		resp, body := send(t, signed(t, http.MethodDelete, e.url+"/"+b+"/k"+q, nil), "")
		wantS3Error(t, "DELETE "+q, resp, body, "InvalidArgument", http.StatusBadRequest)
	}
	for _, k := range []string{"k", "k2"} {
		if got, _ := e.get(t, b, k, ""); !bytes.Equal(got, data) {
			t.Fatalf("%s changed by requests for another version", k)
		}
	}
	g, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String("null")})
	if err != nil {
		t.Fatalf("GET versionId=null: %v", err)
	}
	g.Body.Close()
	if _, err := e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String("null")}); err != nil {
		t.Fatalf("DELETE versionId=null: %v", err)
	}

	// GetBucketVersioning answers as S3 for a bucket never versioned (sync
	// tools ask before they delete); enabling it is refused.
	vc, err := e.s3.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(b)})
	if err != nil || vc.Status != "" || vc.MFADelete != "" {
		t.Fatalf("GetBucketVersioning: %+v, %v; want no status", vc, err)
	}
	_, err = e.s3.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(b + "-none")})
	wantCode(t, "GetBucketVersioning of no bucket", err, "NoSuchBucket", http.StatusNotFound)
	_, err = e.s3.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}})
	wantCode(t, "PutBucketVersioning", err, "NotImplemented", http.StatusNotImplemented)
	// ?versioning names a bucket's subresource: on an object it is no
	// PutObject or DeleteObject of the key.
	for _, method := range []string{http.MethodPut, http.MethodDelete, http.MethodGet} {
		resp, body := send(t, signed(t, method, e.url+"/"+b+"/k2?versioning", []byte{}), "")
		wantS3Error(t, method+" an object's ?versioning", resp, body, "NotImplemented", http.StatusNotImplemented)
	}
	if got, _ := e.get(t, b, "k2", ""); !bytes.Equal(got, data) {
		t.Fatal("k2 changed by a ?versioning request")
	}
}

// TestUnsupportedWriteHeaders: a write that asks for a feature the gateway
// does not implement (encryption, SSE-C, object lock, tagging, a public
// ACL, another storage class) is refused, and nothing is written: the
// object would otherwise silently lack what the client relies on. What
// the gateway does anyway (a private ACL, STANDARD) is accepted.
func TestUnsupportedWriteHeaders(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	b := e.newBucket(t)
	put := func(set func(*s3.PutObjectInput)) error {
		in := &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("k"), Body: bytes.NewReader([]byte("refused"))}
		set(in)
		_, err := e.s3.PutObject(ctx, in)
		return err
	}
	key := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		what   string
		set    func(*s3.PutObjectInput)
		code   string
		status int
	}{
		{"SSE-S3", func(in *s3.PutObjectInput) { in.ServerSideEncryption = types.ServerSideEncryptionAes256 }, "NotImplemented", 501},
		{"SSE-C", func(in *s3.PutObjectInput) {
			in.SSECustomerAlgorithm, in.SSECustomerKey = aws.String("AES256"), aws.String(base64.StdEncoding.EncodeToString([]byte(key)))
			sum := md5.Sum([]byte(key))
			in.SSECustomerKeyMD5 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
		}, "NotImplemented", 501},
		{"object lock", func(in *s3.PutObjectInput) { in.ObjectLockLegalHoldStatus = types.ObjectLockLegalHoldStatusOn }, "NotImplemented", 501},
		{"tagging", func(in *s3.PutObjectInput) { in.Tagging = aws.String("a=b") }, "NotImplemented", 501},
		{"public ACL", func(in *s3.PutObjectInput) { in.ACL = types.ObjectCannedACLPublicRead }, "NotImplemented", 501},
		{"GLACIER", func(in *s3.PutObjectInput) { in.StorageClass = types.StorageClassGlacier }, "InvalidStorageClass", 400},
		{"an append", func(in *s3.PutObjectInput) { in.WriteOffsetBytes = aws.Int64(0) }, "NotImplemented", 501},
	} {
		wantCode(t, tc.what, put(tc.set), tc.code, tc.status)
		if _, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("k")}); err == nil {
			t.Fatalf("%s: the refused PUT wrote the object", tc.what)
		}
	}
	if err := put(func(in *s3.PutObjectInput) {
		in.ACL, in.StorageClass = types.ObjectCannedACLPrivate, types.StorageClassStandard
	}); err != nil {
		t.Fatalf("a PUT with a private ACL and STANDARD: %v", err)
	}
	if err := put(func(in *s3.PutObjectInput) { in.ACL = types.ObjectCannedACLBucketOwnerFullControl }); err != nil {
		t.Fatalf("a PUT with bucket-owner-full-control: %v", err)
	}
	// A read with a customer's key: no object was stored with one.
	_, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k"), SSECustomerAlgorithm: aws.String("AES256"),
		SSECustomerKey: aws.String(base64.StdEncoding.EncodeToString([]byte(key)))})
	wantCode(t, "a GET with SSE-C", err, "InvalidRequest", 400)
	// A trailer promised outside an aws-chunked body: refused, nothing stored.
	resp, body := send(t, signedWith(t, http.MethodPut, e.url+"/"+b+"/trailer", []byte("x"), map[string]string{"X-Amz-Trailer": "x-amz-checksum-crc32"}), "")
	wantS3Error(t, "x-amz-trailer without aws-chunked", resp, body, "InvalidRequest", 400)
	_, err = e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b + "-locked"), ObjectLockEnabledForBucket: aws.Bool(true)})
	wantCode(t, "a bucket with object lock", err, "NotImplemented", 501)
	if _, err := e.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(b + "-locked")}); err == nil {
		t.Fatal("the refused CreateBucket made the bucket")
	}
}
