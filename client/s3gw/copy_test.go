package s3gw_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
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
