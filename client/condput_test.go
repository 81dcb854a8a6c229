package client_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestConditionalPutPaths: a condition holds on every path of PutObject:
// one op, a multipart upload of unknown size (streamed), and an object put
// whole in pieces (WholeETag); a false one writes nothing and leaves no
// upload behind, the SDK's own included.
func TestConditionalPutPaths(t *testing.T) {
	cl, ctx := setup(t)
	old := []byte("the object that stays")
	info, err := cl.PutObject(ctx, "s3tests", "k", bytes.NewReader(old), int64(len(old)), client.PutOptions{IfNoneMatch: "*"})
	if err != nil {
		t.Fatal(err)
	}
	big := osdtest.Payload(6<<20, 9)
	for _, c := range []struct {
		name string
		r    func() io.Reader
		size int64
		opts client.PutOptions
	}{
		{"one op", func() io.Reader { return bytes.NewReader([]byte("x")) }, 1, client.PutOptions{}},
		{"multipart, streamed", func() io.Reader { return io.MultiReader(bytes.NewReader(big)) }, -1, client.PutOptions{PartSize: 5 << 20}},
		{"whole, in pieces", func() io.Reader { return bytes.NewReader(big) }, int64(len(big)), client.PutOptions{PartSize: 5 << 20, WholeETag: true}},
	} {
		none, match := c.opts, c.opts
		none.IfNoneMatch = "*"
		match.IfMatch = `"0123456789abcdef0123456789abcdef"`
		if _, err := cl.PutObject(ctx, "s3tests", "k", c.r(), c.size, none); !errors.Is(err, client.ErrPreconditionFailed) {
			t.Fatalf("%s, If-None-Match * over an object: %v, want PreconditionFailed", c.name, err)
		}
		if _, err := cl.PutObject(ctx, "s3tests", "k", c.r(), c.size, match); !errors.Is(err, client.ErrPreconditionFailed) {
			t.Fatalf("%s, If-Match of another ETag: %v, want PreconditionFailed", c.name, err)
		}
		got, _, err := osdtest.Get(ctx, cl, "s3tests", "k", client.GetOptions{})
		if err != nil || !bytes.Equal(got, old) {
			t.Fatalf("%s: after refused puts the key holds %d bytes, %v", c.name, len(got), err)
		}
		ups, err := cl.AbortStaleUploads(ctx, "s3tests", client.StaleUploadOptions{Age: -1, All: true, DryRun: true})
		if err != nil || len(ups) != 0 {
			t.Fatalf("%s: uploads left by refused puts: %+v, %v", c.name, ups, err)
		}
	}
	// The same, with the condition true, writes.
	if _, err := cl.PutObject(ctx, "s3tests", "k", bytes.NewReader(big), int64(len(big)),
		client.PutOptions{PartSize: 5 << 20, WholeETag: true, IfMatch: info.ETag}); err != nil {
		t.Fatalf("whole, in pieces, If-Match of the object's ETag: %v", err)
	}
	got, _, err := osdtest.Get(ctx, cl, "s3tests", "k", client.GetOptions{})
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("after the put the key holds %d bytes, %v", len(got), err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "k", "0123456789abcdef0123456789abcdef", nil,
		client.CompleteOptions{}, client.CompleteOptions{}); err == nil || !strings.Contains(err.Error(), "at most one CompleteOptions") {
		t.Fatalf("CompleteMultipartUpload with two CompleteOptions: %v", err)
	}
}
