package s3gw_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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
	// A conditional PUT is refused, never done unconditionally.
	_, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("cond"), Key: aws.String("k"),
		Body: bytes.NewReader([]byte("other")), IfNoneMatch: aws.String("*")})
	wantCode(t, "PUT If-None-Match", err, "NotImplemented", http.StatusNotImplemented)
	if b, _ := e.get(t, "cond", "k", ""); !bytes.Equal(b, data) {
		t.Fatal("a refused conditional PUT changed the object")
	}
}
