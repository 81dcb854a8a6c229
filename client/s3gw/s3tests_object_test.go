package s3gw_test

// Bucket and object cases of ceph/s3-tests: test_bucket_*, test_object_*,
// test_get_object_if*, test_ranged_request_*, test_multi_object_delete*,
// and the Content-MD5 ones of test_headers.py.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// body reads and closes a GetObject's body.
func body(t *testing.T, out *s3.GetObjectOutput) string {
	t.Helper()
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// putCond is a test_put_object_if* case: with exists, "bar" is put
// first; a PUT of "zar" that set adds a condition to (given bar's ETag)
// fails with code (none: succeeds), and the key then holds after ("":
// no object).
func putCond(exists bool, set func(in *s3.PutObjectInput, etag string), code, after string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		b := e.newBucket(t)
		etag := `"none"`
		if exists {
			etag = aws.ToString(e.put(t, b, "foo", []byte("bar")).ETag)
		}
		in := &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("foo"), Body: strings.NewReader("zar")}
		set(in, etag)
		_, err := e.s3.PutObject(e.ctx, in)
		if code == "" && err != nil {
			t.Fatalf("put: %v", err)
		}
		if code != "" {
			wantCode(t, "put", err, code, map[string]int{"PreconditionFailed": 412, "NoSuchKey": 404, "NotImplemented": 501}[code])
		}
		if after == "" {
			e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}, "NoSuchKey", 404)
			return
		}
		if got, _ := e.get(t, b, "foo", ""); string(got) != after {
			t.Fatalf("the key holds %q, want %q", got, after)
		}
	}
}

// getErr is a GetObject that must fail with code and status.
func (e *env) getErr(t *testing.T, in *s3.GetObjectInput, code string, status int) error {
	t.Helper()
	out, err := e.s3.GetObject(e.ctx, in)
	if err == nil {
		out.Body.Close()
	}
	wantCode(t, fmt.Sprintf("GetObject %s/%s", aws.ToString(in.Bucket), aws.ToString(in.Key)), err, code, status)
	return err
}

// badBucketName is check_bad_bucket_name and check_invalid_bucketname.
func badBucketName(name string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		_, err := e.s3.CreateBucket(e.ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
		wantCode(t, "create "+name, err, "InvalidBucketName", 400)
	}
}

// goodBucketName is check_good_bucket_name: the bucket is made, and lists.
func goodBucketName(name func(e *env) string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		n := name(e)
		e.mb(t, n)
		e.put(t, n, "k", []byte("v"))
		if out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(n)}); len(out.Contents) != 1 {
			t.Fatalf("%s: %d objects", n, len(out.Contents))
		}
	}
}

// longName is _test_bucket_create_naming_good_long: a fresh name padded
// with 'a' to n characters.
func longName(n int) func(e *env) string {
	return func(e *env) string {
		p := e.bucketName()
		return p + strings.Repeat("a", n-len(p))
	}
}

var s3testsBuckets = []s3testsCase{
	// test_list_buckets_paginated, in a prefix of its own: the other
	// cases' buckets share the gateway.
	{"list_buckets_paginated", func(t *testing.T, e *env) {
		prefix := e.bucketName() + "-"
		list := func(token *string) *s3.ListBucketsOutput {
			t.Helper()
			out, err := e.s3.ListBuckets(e.ctx, &s3.ListBucketsInput{Prefix: aws.String(prefix), MaxBuckets: aws.Int32(1), ContinuationToken: token})
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToString(out.Prefix) != prefix {
				t.Fatalf("Prefix %q, want %q", aws.ToString(out.Prefix), prefix)
			}
			return out
		}
		names := func(out *s3.ListBucketsOutput) (n []string) {
			for _, b := range out.Buckets {
				n = append(n, aws.ToString(b.Name))
			}
			return n
		}
		if out := list(nil); len(out.Buckets) != 0 || out.ContinuationToken != nil {
			t.Fatalf("no bucket: %v, token %v", names(out), out.ContinuationToken)
		}
		e.mb(t, prefix+"a")
		if out := list(nil); !slices.Equal(names(out), []string{prefix + "a"}) || out.ContinuationToken != nil {
			t.Fatalf("one bucket: %v, token %v", names(out), out.ContinuationToken)
		}
		e.mb(t, prefix+"b")
		out := list(nil)
		if !slices.Equal(names(out), []string{prefix + "a"}) || out.ContinuationToken == nil {
			t.Fatalf("two buckets, first page: %v, token %v", names(out), out.ContinuationToken)
		}
		out = list(out.ContinuationToken)
		if !slices.Equal(names(out), []string{prefix + "b"}) || out.ContinuationToken != nil {
			t.Fatalf("two buckets, second page: %v, token %v", names(out), out.ContinuationToken)
		}
		_, err := e.s3.ListBuckets(e.ctx, &s3.ListBucketsInput{MaxBuckets: aws.Int32(0)})
		wantCode(t, "max-buckets 0", err, "InvalidArgument", 400)
		_, err = e.s3.ListBuckets(e.ctx, &s3.ListBucketsInput{ContinuationToken: aws.String("not a token")})
		wantCode(t, "a bad token", err, "InvalidArgument", 400)
	}},
	{"bucket_notexist", func(t *testing.T, e *env) {
		_, err := e.s3.ListObjects(e.ctx, &s3.ListObjectsInput{Bucket: aws.String(e.bucketName())})
		wantCode(t, "list", err, "NoSuchBucket", 404)
	}},
	{"bucketv2_notexist", func(t *testing.T, e *env) {
		_, err := e.s3.ListObjectsV2(e.ctx, &s3.ListObjectsV2Input{Bucket: aws.String(e.bucketName())})
		wantCode(t, "list", err, "NoSuchBucket", 404)
	}},
	{"bucket_delete_notexist", func(t *testing.T, e *env) {
		_, err := e.s3.DeleteBucket(e.ctx, &s3.DeleteBucketInput{Bucket: aws.String(e.bucketName())})
		wantCode(t, "delete", err, "NoSuchBucket", 404)
	}},
	{"bucket_delete_nonempty", func(t *testing.T, e *env) {
		_, err := e.s3.DeleteBucket(e.ctx, &s3.DeleteBucketInput{Bucket: aws.String(e.createObjects(t, "foo"))})
		wantCode(t, "delete", err, "BucketNotEmpty", 409)
	}},
	{"bucket_create_delete", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		if _, err := e.s3.DeleteBucket(e.ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
		_, err := e.s3.DeleteBucket(e.ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)})
		wantCode(t, "delete again", err, "NoSuchBucket", 404)
	}},
	{"bucket_head", func(t *testing.T, e *env) {
		if _, err := e.s3.HeadBucket(e.ctx, &s3.HeadBucketInput{Bucket: aws.String(e.newBucket(t))}); err != nil {
			t.Fatal(err)
		}
	}},
	{"bucket_head_notexist", func(t *testing.T, e *env) {
		_, err := e.s3.HeadBucket(e.ctx, &s3.HeadBucketInput{Bucket: aws.String(e.bucketName())})
		wantCode(t, "head", err, "NotFound", 404)
	}},
	// test_bucket_create_exists accepts a success (us-east-1's answer) or
	// 409 BucketAlreadyOwnedByYou; the gateway gives the latter.
	{"bucket_create_exists", func(t *testing.T, e *env) {
		_, err := e.s3.CreateBucket(e.ctx, &s3.CreateBucketInput{Bucket: aws.String(e.newBucket(t))})
		wantCode(t, "create again", err, "BucketAlreadyOwnedByYou", 409)
	}},
	{"bucket_recreate_not_overriding", func(t *testing.T, e *env) {
		b := e.createObjects(t, "mykey1", "mykey2")
		_, _ = e.s3.CreateBucket(e.ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}) // refused, as above
		wantStrings(t, "after re-create", keysOf(e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(b)}).Contents), []string{"mykey1", "mykey2"})
	}},
	// test_buckets_create_then_list, test_buckets_list_ctime
	{"buckets_create_then_list", func(t *testing.T, e *env) { createThenList(t, e, false) }},
	{"buckets_list_ctime", func(t *testing.T, e *env) { createThenList(t, e, true) }},
	{"list_buckets_invalid_auth", func(t *testing.T, e *env) {
		_, err := e.client("AKIAINVALIDKEY", testSecret, true).ListBuckets(e.ctx, &s3.ListBucketsInput{})
		wantCode(t, "unknown access key", err, "InvalidAccessKeyId", 403)
	}},
	{"list_buckets_bad_auth", func(t *testing.T, e *env) {
		_, err := e.client(testAccess, "badsecret", true).ListBuckets(e.ctx, &s3.ListBucketsInput{})
		wantCode(t, "wrong secret", err, "SignatureDoesNotMatch", 403)
	}},
	{"bucket_create_naming_bad_starts_nonalpha", func(t *testing.T, e *env) { badBucketName("_"+e.bucketName())(t, e) }},
	{"bucket_create_naming_bad_short_one", badBucketName("a")},
	{"bucket_create_naming_bad_short_two", badBucketName("aa")},
	{"bucket_create_naming_bad_ip", badBucketName("192.168.5.123")},
	{"bucket_create_naming_dns_underscore", badBucketName("foo_bar")},
	{"bucket_create_naming_dns_dash_at_end", badBucketName("foo-")},
	{"bucket_create_naming_dns_dot_dot", badBucketName("foo..bar")},
	{"bucket_create_naming_good_long_60", goodBucketName(longName(60))},
	{"bucket_create_naming_good_long_61", goodBucketName(longName(61))},
	{"bucket_create_naming_good_long_62", goodBucketName(longName(62))},
	{"bucket_create_naming_good_long_63", goodBucketName(longName(63))},
	{"bucket_create_naming_dns_long", goodBucketName(longName(63))},
	{"bucket_list_long_name", goodBucketName(longName(61))},
	{"bucket_create_naming_good_starts_alpha", goodBucketName(func(e *env) string { return "a" + e.bucketName() + "foo" })},
	{"bucket_create_naming_good_starts_digit", goodBucketName(func(e *env) string { return "0" + e.bucketName() + "foo" })},
	{"bucket_create_naming_good_contains_period", goodBucketName(func(e *env) string { return e.bucketName() + "aaa.111" })},
	{"bucket_create_naming_good_contains_hyphen", goodBucketName(func(e *env) string { return e.bucketName() + "aaa-111" })},
}

// createThenList makes 5 buckets, which ListBuckets must give, created
// no earlier than a day ago when ctime.
func createThenList(t *testing.T, e *env, ctime bool) {
	var made []string
	for range 5 {
		made = append(made, e.newBucket(t))
	}
	out, err := e.s3.ListBuckets(e.ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, b := range out.Buckets {
		have[*b.Name] = true
		if ctime && (b.CreationDate == nil || b.CreationDate.Before(time.Now().Add(-24*time.Hour))) {
			t.Fatalf("%s created %v", *b.Name, b.CreationDate)
		}
	}
	for _, b := range made {
		if !have[b] {
			t.Fatalf("ListBuckets lacks %s", b)
		}
	}
}

// setGetMetadata is _set_get_metadata: put foo with x-amz-meta-meta1,
// return what GET gives back.
func setGetMetadata(t *testing.T, e *env, bucket, value string) string {
	t.Helper()
	if _, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("foo"), Body: strings.NewReader("bar"),
		Metadata: map[string]string{"meta1": value}}); err != nil {
		t.Fatal(err)
	}
	out, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("foo")})
	if err != nil {
		t.Fatal(err)
	}
	out.Body.Close()
	return out.Metadata["meta1"]
}

// metadataCase sets x-amz-meta-meta1 to each value in turn, on one
// object, and reads each back.
func metadataCase(values ...string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		b := e.newBucket(t)
		for _, v := range values {
			if got := setGetMetadata(t, e, b, v); got != v {
				t.Fatalf("meta1 %q, want %q", got, v)
			}
		}
	}
}

// presign is a request for bucket/key (which may end in a query) presigned
// by the SDK's signer with X-Amz-Expires as given, so that values the presign client would not
// make (0, negative, past 7 days) are signed all the same.
func (e *env) presign(t *testing.T, method, bucket, key, expires string, signedAt time.Time, body []byte) *http.Request {
	t.Helper()
	sep := "?" // key may hold a query of its own: x-amz-* parameters to sign
	if strings.Contains(key, "?") {
		sep = "&"
	}
	req, err := http.NewRequest(method, e.url+"/"+bucket+"/"+key+sep+"X-Amz-Expires="+expires, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
		req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", signedAt)
	if err != nil {
		t.Fatal(err)
	}
	req, err = http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// rangeCase is one of test_ranged_*request_response_code: a GET of
// content's bytes first to last.
func rangeCase(content []byte, rng string, first, last int, contentRange string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		b := e.newBucket(t)
		e.put(t, b, "testobj", content)
		got, out := e.get(t, b, "testobj", rng)
		if !bytes.Equal(got, content[first:last+1]) || aws.ToString(out.ContentRange) != contentRange {
			t.Fatalf("%s: %d bytes, Content-Range %q", rng, len(got), aws.ToString(out.ContentRange))
		}
	}
}

// getCond is one of test_get_object_if*: a GET of foo (body bar) with one
// condition, which either serves the body or fails with status.
func getCond(cond func(in *s3.GetObjectInput, etag string), status int) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		b := e.newBucket(t)
		etag := *e.put(t, b, "foo", []byte("bar")).ETag
		in := &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}
		cond(in, etag)
		out, err := e.s3.GetObject(e.ctx, in)
		switch {
		case status == 200 && err != nil:
			t.Fatal(err)
		case status == 200:
			if got := body(t, out); got != "bar" {
				t.Fatalf("body %q", got)
			}
		case status == 412:
			wantCode(t, "GET", err, "PreconditionFailed", 412)
		default: // 304: no body, no code; the ETag comes with it
			var re *smithyhttp.ResponseError
			if err == nil {
				out.Body.Close()
			}
			if _, st := code(err); st != status {
				t.Fatalf("GET: %v, want %d", err, status)
			}
			if errors.As(err, &re) && re.Response.Header.Get("ETag") != etag {
				t.Fatalf("304 with ETag %q, want %q", re.Response.Header.Get("ETag"), etag)
			}
		}
	}
}

// md5Case is one of test_headers.py's test_object_create_bad_md5_*: a PUT
// of "bar" with this Content-MD5.
func md5Case(md5, code string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		b := e.newBucket(t)
		resp, body := send(t, signedWith(t, http.MethodPut, e.url+"/"+b+"/foo", []byte("bar"), map[string]string{"Content-MD5": md5}), "")
		wantS3Error(t, "Content-MD5 "+md5, resp, body, code, 400)
		_, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("foo")})
		wantCode(t, "after the refused put", err, "NotFound", 404)
	}
}

var s3testsObjects = []s3testsCase{
	{"object_write_to_nonexist_bucket", func(t *testing.T, e *env) {
		_, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("whatchutalkinboutwillis"), Key: aws.String("foo"), Body: strings.NewReader("foo")})
		wantCode(t, "put", err, "NoSuchBucket", 404)
	}},
	{"object_read_not_exist", func(t *testing.T, e *env) {
		e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(e.newBucket(t)), Key: aws.String("bar")}, "NoSuchKey", 404)
	}},
	{"object_requestid_matches_header_on_error", func(t *testing.T, e *env) {
		resp, body := send(t, signed(t, http.MethodGet, e.url+"/"+e.newBucket(t)+"/bar", nil), "")
		var doc struct{ RequestId string }
		if err := xml.Unmarshal(body, &doc); err != nil || doc.RequestId == "" || doc.RequestId != resp.Header.Get("x-amz-request-id") {
			t.Fatalf("RequestId %q (%v), header %q", doc.RequestId, err, resp.Header.Get("x-amz-request-id"))
		}
	}},
	{"multi_object_delete", func(t *testing.T, e *env) { multiDelete(t, e, false) }},
	{"multi_objectv2_delete", func(t *testing.T, e *env) { multiDelete(t, e, true) }},
	{"multi_object_delete_key_limit", func(t *testing.T, e *env) { deleteKeyLimit(t, e, false) }},
	{"multi_objectv2_delete_key_limit", func(t *testing.T, e *env) { deleteKeyLimit(t, e, true) }},
	{"100_continue_error_retry", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		_, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(b + "-but-doesnt-exist"), Key: aws.String("foo"), Body: strings.NewReader("bar")})
		wantCode(t, "put to a missing bucket", err, "NoSuchBucket", 404)
		e.put(t, b, "foo", []byte("bar"))
	}},
	{"object_head_zero_bytes", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		e.put(t, b, "foo", nil)
		h, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("foo")})
		if err != nil || aws.ToInt64(h.ContentLength) != 0 {
			t.Fatalf("head: %v %+v", err, h)
		}
	}},
	{"object_write_check_etag", func(t *testing.T, e *env) {
		if etag := *e.put(t, e.newBucket(t), "foo", []byte("bar")).ETag; etag != `"37b51d194a7513e45b56f6524f2d51f2"` {
			t.Fatalf("ETag %s", etag)
		}
	}},
	{"object_write_cache_control", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		if _, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("foo"), Body: strings.NewReader("bar"),
			CacheControl: aws.String("public, max-age=14400")}); err != nil {
			t.Fatal(err)
		}
		h, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("foo")})
		if err != nil || aws.ToString(h.CacheControl) != "public, max-age=14400" {
			t.Fatalf("head: %v %+v", err, h)
		}
	}},
	{"object_write_expires", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		exp := time.Now().Add(6000 * time.Second).UTC().Truncate(time.Second)
		if _, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("foo"), Body: strings.NewReader("bar"),
			Expires: &exp}); err != nil {
			t.Fatal(err)
		}
		h, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("foo")})
		if err != nil || aws.ToString(h.ExpiresString) != exp.Format(http.TimeFormat) {
			t.Fatalf("head: %v, Expires %q, want %q", err, aws.ToString(h.ExpiresString), exp.Format(http.TimeFormat))
		}
	}},
	{"object_write_read_update_read_delete", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		for _, v := range []string{"bar", "soup"} {
			e.put(t, b, "foo", []byte(v))
			if got, _ := e.get(t, b, "foo", ""); string(got) != v {
				t.Fatalf("got %q, want %q", got, v)
			}
		}
		if _, err := e.s3.DeleteObject(e.ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}); err != nil {
			t.Fatal(err)
		}
		e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}, "NoSuchKey", 404)
	}},
	{"object_set_get_metadata_none_to_good", metadataCase("mymeta")},
	{"object_set_get_metadata_none_to_empty", metadataCase("")},
	{"object_set_get_metadata_overwrite_to_empty", metadataCase("oldmeta", "")},
	{"object_set_get_unicode_metadata", metadataCase("Hello World\u00e9")},
	{"object_metadata_replaced_on_put", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		setGetMetadata(t, e, b, "bar")
		e.put(t, b, "foo", []byte("bar"))
		if _, out := e.get(t, b, "foo", ""); len(out.Metadata) != 0 {
			t.Fatalf("metadata after a plain put: %v", out.Metadata)
		}
	}},
	{"get_object_ifmatch_good", getCond(func(in *s3.GetObjectInput, etag string) { in.IfMatch = &etag }, 200)},
	{"get_object_ifmatch_failed", getCond(func(in *s3.GetObjectInput, _ string) { in.IfMatch = aws.String(`"ABCORZ"`) }, 412)},
	{"get_object_ifnonematch_good", getCond(func(in *s3.GetObjectInput, etag string) { in.IfNoneMatch = &etag }, 304)},
	{"get_object_ifnonematch_failed", getCond(func(in *s3.GetObjectInput, _ string) { in.IfNoneMatch = aws.String("ABCORZ") }, 200)},
	{"get_object_ifmodifiedsince_good", getCond(func(in *s3.GetObjectInput, _ string) {
		in.IfModifiedSince = aws.Time(time.Date(1994, 10, 29, 19, 43, 31, 0, time.UTC))
	}, 200)},
	// s3-tests sleeps a second and asks with Last-Modified + 1s; a time an
	// hour ahead asks the same without the sleep.
	{"get_object_ifmodifiedsince_failed", getCond(func(in *s3.GetObjectInput, _ string) { in.IfModifiedSince = aws.Time(time.Now().Add(time.Hour)) }, 304)},
	{"get_object_ifunmodifiedsince_good", getCond(func(in *s3.GetObjectInput, _ string) {
		in.IfUnmodifiedSince = aws.Time(time.Date(1994, 10, 29, 19, 43, 31, 0, time.UTC))
	}, 412)},
	{"get_object_ifunmodifiedsince_failed", getCond(func(in *s3.GetObjectInput, _ string) {
		in.IfUnmodifiedSince = aws.Time(time.Date(2100, 10, 29, 19, 43, 31, 0, time.UTC))
	}, 200)},
	// test_put_object_if*: conditional writes. "bar" is there first
	// (exists), a PUT of "zar" with the condition follows; then the key
	// holds after.
	{"put_object_ifmatch_good", putCond(true, func(in *s3.PutObjectInput, etag string) { in.IfMatch = &etag }, "", "zar")},
	{"put_object_ifmatch_failed", putCond(true, func(in *s3.PutObjectInput, _ string) { in.IfMatch = aws.String(`"ABCORZ"`) }, "PreconditionFailed", "bar")},
	{"put_object_ifmatch_overwrite_existed_good", putCond(true, func(in *s3.PutObjectInput, _ string) { in.IfMatch = aws.String("*") }, "", "zar")},
	// s3-tests wants RGW's 412; AWS answers If-Match on a missing key
	// 404 NoSuchKey, and so does the gateway.
	{"put_object_ifmatch_nonexisted_failed", putCond(false, func(in *s3.PutObjectInput, _ string) { in.IfMatch = aws.String("*") }, "NoSuchKey", "")},
	// s3-tests sends If-None-Match of an ETag, which RGW compares; AWS
	// takes only "*" on a write, and the gateway refuses the rest 501
	// NotImplemented (never ignored): the object stays.
	{"put_object_ifnonmatch_good", putCond(true, func(in *s3.PutObjectInput, _ string) { in.IfNoneMatch = aws.String(`"ABCORZ"`) }, "NotImplemented", "bar")},
	{"put_object_ifnonmatch_failed", putCond(true, func(in *s3.PutObjectInput, etag string) { in.IfNoneMatch = &etag }, "NotImplemented", "bar")},
	{"put_object_ifnonmatch_nonexisted_good", putCond(false, func(in *s3.PutObjectInput, _ string) { in.IfNoneMatch = aws.String("*") }, "", "zar")},
	{"put_object_ifnonmatch_overwrite_existed_failed", putCond(true, func(in *s3.PutObjectInput, _ string) { in.IfNoneMatch = aws.String("*") }, "PreconditionFailed", "bar")},
	// test_object_raw_authenticated*, on a private object (ACLs are not
	// served: every object is private).
	{"object_raw_authenticated", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		if got, _ := e.get(t, b, "foo", ""); string(got) != "foo" {
			t.Fatalf("got %q", got)
		}
	}},
	{"object_raw_authenticated_bucket_gone", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		e.s3.DeleteObject(e.ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("foo")})
		if _, err := e.s3.DeleteBucket(e.ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
		e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}, "NoSuchBucket", 404)
	}},
	{"object_raw_authenticated_object_gone", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		if _, err := e.s3.DeleteObject(e.ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}); err != nil {
			t.Fatal(err)
		}
		e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("foo")}, "NoSuchKey", 404)
	}},
	{"object_raw_response_headers", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		out, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("foo"), ResponseCacheControl: aws.String("no-cache"),
			ResponseContentDisposition: aws.String("bla"), ResponseContentEncoding: aws.String("aaa"), ResponseContentLanguage: aws.String("esperanto"),
			ResponseContentType: aws.String("foo/bar"), ResponseExpires: aws.Time(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))})
		if err != nil {
			t.Fatal(err)
		}
		out.Body.Close()
		if aws.ToString(out.ContentType) != "foo/bar" || aws.ToString(out.ContentDisposition) != "bla" || aws.ToString(out.ContentLanguage) != "esperanto" ||
			aws.ToString(out.ContentEncoding) != "aaa" || aws.ToString(out.CacheControl) != "no-cache" {
			t.Fatalf("overrides: %+v", out)
		}
	}},
	{"object_raw_get_x_amz_expires_not_expired", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		if resp, body := send(t, e.presign(t, http.MethodGet, b, "foo", "100000", time.Now(), nil), ""); resp.StatusCode != 200 || string(body) != "foo" {
			t.Fatalf("presigned GET: %d %q", resp.StatusCode, body)
		}
	}},
	{"object_raw_get_x_amz_expires_out_range_zero", func(t *testing.T, e *env) { presignedRefused(t, e, "0") }},
	{"object_raw_get_x_amz_expires_out_max_range", func(t *testing.T, e *env) { presignedRefused(t, e, "609901") }},
	{"object_raw_get_x_amz_expires_out_positive_range", func(t *testing.T, e *env) { presignedRefused(t, e, "-7") }},
	{"object_raw_put_authenticated_expired", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		// ExpiresIn=-1000 in s3-tests: signed 1000 s before now, for 1 s.
		resp, body := send(t, e.presign(t, http.MethodPut, b, "foo", "1", time.Now().Add(-1000*time.Second), []byte("xx")), "")
		wantS3Error(t, "expired presigned PUT", resp, body, "AccessDenied", 403)
		if got, _ := e.get(t, b, "foo", ""); string(got) != "foo" {
			t.Fatalf("after the refused PUT: %q", got)
		}
	}},
	{"object_anon_put", func(t *testing.T, e *env) {
		b := e.createObjects(t, "foo")
		req, err := http.NewRequest(http.MethodPut, e.url+"/"+b+"/foo", strings.NewReader("foo"))
		if err != nil {
			t.Fatal(err)
		}
		resp, body := send(t, req, "")
		wantS3Error(t, "anonymous PUT", resp, body, "AccessDenied", 403)
	}},
	{"bucket_list_objects_anonymous_fail", func(t *testing.T, e *env) { anonymousGet(t, e, "/"+e.newBucket(t)) }},
	{"bucket_listv2_objects_anonymous_fail", func(t *testing.T, e *env) { anonymousGet(t, e, "/"+e.newBucket(t)+"?list-type=2") }},
	// test_100_continue, its first half: an anonymous PUT that waits
	// for 100 Continue is refused before its body is asked for. (The
	// second half makes the bucket public-read-write: ACLs are not served.)
	{"100_continue", func(t *testing.T, e *env) {
		req, err := http.NewRequest(http.MethodPut, e.url+"/"+e.newBucket(t)+"/testobj", strings.NewReader("bar"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Expect", "100-continue")
		conn := rawConn(t, e.srvAddr, req, 0)
		conn.SetReadDeadline(time.Now().Add(time.Minute)) // a gateway that waited for the body would never answer
		resp, err := http.ReadResponse(bufio.NewReader(conn), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("anonymous PUT with Expect: 100-continue: %d, want 403", resp.StatusCode)
		}
	}},
	{"object_write_file", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		e.put(t, b, "foo", []byte("bar"))
		if got, _ := e.get(t, b, "foo", ""); string(got) != "bar" {
			t.Fatalf("got %q", got)
		}
	}},
	{"object_put_authenticated", func(t *testing.T, e *env) { e.put(t, e.newBucket(t), "foo", []byte("foo")) }},
	{"bucket_create_special_key_names", func(t *testing.T, e *env) {
		keys := []string{" ", `"`, "$", "%", "&", "'", "<", ">", "_", "_ ", "_ _", "__"}
		b := e.createObjects(t, keys...)
		wantStrings(t, "keys", keysOf(e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(b)}).Contents), keys)
		for _, k := range keys {
			if got, _ := e.get(t, b, k, ""); string(got) != k {
				t.Fatalf("%q: body %q", k, got)
			}
		}
	}},
	{"ranged_request_response_code", rangeCase([]byte("testcontent"), "bytes=4-7", 4, 7, "bytes 4-7/11")},
	{"ranged_big_request_response_code", rangeCase(osdtest.Payload(8*mib, 11), "bytes=3145728-5242880", 3145728, 5242880, "bytes 3145728-5242880/8388608")},
	{"ranged_request_skip_leading_bytes_response_code", rangeCase([]byte("testcontent"), "bytes=4-", 4, 10, "bytes 4-10/11")},
	{"ranged_request_return_trailing_bytes_response_code", rangeCase([]byte("testcontent"), "bytes=-7", 4, 10, "bytes 4-10/11")},
	{"ranged_request_invalid_range", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		e.put(t, b, "testobj", []byte("testcontent"))
		e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("testobj"), Range: aws.String("bytes=40-50")}, "InvalidRange", 416)
	}},
	{"ranged_request_empty_object", func(t *testing.T, e *env) {
		b := e.newBucket(t)
		e.put(t, b, "testobj", nil)
		e.getErr(t, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("testobj"), Range: aws.String("bytes=40-50")}, "InvalidRange", 416)
	}},
	// test_headers.py
	{"object_create_bad_md5_invalid_short", md5Case("YWJyYWNhZGFicmE=", "InvalidDigest")},
	{"object_create_bad_md5_bad", md5Case("rL0Y20xC+Fzt72VPzMSk2A==", "BadDigest")},
	{"object_create_bad_md5_empty", md5Case("", "InvalidDigest")},
	{"object_create_bad_md5_none", func(t *testing.T, e *env) { e.put(t, e.newBucket(t), "foo", []byte("bar")) }},
}

// anonymousGet: an unsigned GET of path is AccessDenied.
func anonymousGet(t *testing.T, e *env, path string) {
	resp, body := send(t, nil, e.url+path)
	wantS3Error(t, "anonymous GET "+path, resp, body, "AccessDenied", 403)
}

// presignedRefused: a presigned GET with an X-Amz-Expires out of 1 s to
// 7 days is refused. s3-tests wants 403 (RGW's AccessDenied); the gateway
// answers as AWS does, 400 AuthorizationQueryParametersError.
func presignedRefused(t *testing.T, e *env, expires string) {
	b := e.createObjects(t, "foo")
	resp, body := send(t, e.presign(t, http.MethodGet, b, "foo", expires, time.Now(), nil), "")
	wantS3Error(t, "X-Amz-Expires="+expires, resp, body, "AuthorizationQueryParametersError", 400)
}

// deleteKeyLimit is test_multi_object_delete_key_limit and its v2 twin:
// 1,001 keys list in pages, and a DeleteObjects of all of them is refused.
func deleteKeyLimit(t *testing.T, e *env, v2 bool) {
	var keys []string
	var ids []types.ObjectIdentifier
	for i := range 1001 {
		keys = append(keys, fmt.Sprintf("key-%d", i))
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(keys[i])})
	}
	b := e.createObjects(t, keys...)
	n := 0
	for after, truncated := "", true; truncated; {
		page := e.list(t, v2, b, listReq{after: aws.String(after)})
		n += len(page.keys)
		truncated = page.truncated
		if len(page.keys) > 0 {
			after = page.keys[len(page.keys)-1]
		}
	}
	if n != 1001 {
		t.Fatalf("listed %d keys", n)
	}
	_, err := e.s3.DeleteObjects(e.ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b), Delete: &types.Delete{Objects: ids}})
	if _, st := code(err); st != 400 {
		t.Fatalf("DeleteObjects of 1001 keys: %v", err)
	}
}

// multiDelete is test_multi_object_delete and its v2 twin: three keys
// deleted at once, then the same three again (absent keys count as deleted).
func multiDelete(t *testing.T, e *env, v2 bool) {
	keys := []string{"key0", "key1", "key2"}
	b := e.createObjects(t, keys...)
	wantPage(t, "before", e.list(t, v2, b, listReq{}), keys, false)
	var ids []types.ObjectIdentifier
	for _, k := range keys {
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	for range 2 {
		out, err := e.s3.DeleteObjects(e.ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b), Delete: &types.Delete{Objects: ids}})
		if err != nil || len(out.Deleted) != 3 || len(out.Errors) != 0 {
			t.Fatalf("DeleteObjects: %v %+v", err, out)
		}
		wantPage(t, "after", e.list(t, v2, b, listReq{}), nil, false)
	}
}
