package s3gw_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/auth"
)

// internalUpload starts a PUT through the SDK put whole in pieces, an
// upload of the SDK's own, which stalls after its first piece until the
// test ends, and waits for its upload.
func internalUpload(t *testing.T, e *env, bucket, key string) {
	t.Helper()
	hang := make(chan struct{})
	done := make(chan struct{})
	body := io.MultiReader(bytes.NewReader(osdtest.Payload(10<<20, 7)), stalled(hang))
	go func() {
		defer close(done)
		e.cl.PutObject(e.ctx, bucket, key, body, 40<<20, client.PutOptions{PartSize: 5 << 20, WholeETag: true})
	}()
	t.Cleanup(func() { close(hang); <-done })
	osdtest.Eventually(t, 30*time.Second, "the stalled PUT's upload", func() bool {
		ups, err := e.cl.AbortStaleUploads(e.ctx, bucket, client.StaleUploadOptions{Age: -1, DryRun: true})
		return err == nil && len(ups) == 1 && ups[0].Internal
	})
}

// stalled is a body that blocks until hang is closed, then fails.
type stalled chan struct{}

func (s stalled) Read([]byte) (int, error) {
	<-s
	return 0, io.ErrUnexpectedEOF
}

// listedUploads is a ListMultipartUploads page as "key id" and "prefix P"
// strings, in order: uploads, then common prefixes, as S3 answers them.
func listedUploads(out *s3.ListMultipartUploadsOutput) []string {
	var got []string
	for _, u := range out.Uploads {
		got = append(got, aws.ToString(u.Key)+" "+aws.ToString(u.UploadId))
	}
	for _, p := range out.CommonPrefixes {
		got = append(got, "prefix "+aws.ToString(p.Prefix))
	}
	return got
}

// TestListMultipartUploadsPaging: 20 uploads of 12 keys, 4 of one, paged
// 3 at a time from each page's NextKeyMarker and NextUploadIdMarker, give
// every upload once, in the order of one whole listing, the last page
// not truncated; with a delimiter the keys that have it roll up into
// CommonPrefixes, and paging through those resumes after each prefix.
// The SDK's internal uploads are never listed.
func TestListMultipartUploadsPaging(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "mpl")
	keys := []string{"a", "a", "a/1", "a/2/x", "b", "b", "c/d/e", "c/f", "d", "d", "d", "d", "e f", "g/1", "g/2", "h", "i/j", "k", "l", "m"}
	started := map[string]bool{}
	for _, k := range keys {
		out, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpl"), Key: aws.String(k)})
		if err != nil {
			t.Fatal(err)
		}
		started[k+" "+*out.UploadId] = true
	}
	internalUpload(t, e, "mpl", "d")
	list := func(in s3.ListMultipartUploadsInput) *s3.ListMultipartUploadsOutput {
		t.Helper()
		in.Bucket = aws.String("mpl")
		out, err := e.s3.ListMultipartUploads(ctx, &in)
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		return out
	}
	// pages lists every page of max from the markers each answers.
	pages := func(in s3.ListMultipartUploadsInput, max int32) []string {
		t.Helper()
		in.MaxUploads = aws.Int32(max)
		var got []string
		for range 100 {
			out := list(in)
			page := listedUploads(out)
			if len(page) == 0 || len(page) > int(max) {
				t.Fatalf("a page of %d entries, max-uploads %d: %q", len(page), max, page)
			}
			got = append(got, page...)
			if !aws.ToBool(out.IsTruncated) {
				return got
			}
			in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
		}
		t.Fatal("a listing that does not end")
		return nil
	}

	whole := list(s3.ListMultipartUploadsInput{})
	all := listedUploads(whole)
	if len(all) != len(keys) || aws.ToBool(whole.IsTruncated) {
		t.Fatalf("listed %d uploads (truncated %v), want %d: %q", len(all), aws.ToBool(whole.IsTruncated), len(keys), all)
	}
	for _, u := range all {
		if !started[u] {
			t.Fatalf("listed %q, not an upload started (the internal one?)", u)
		}
	}
	if got := pages(s3.ListMultipartUploadsInput{}, 3); !slices.Equal(got, all) {
		t.Fatalf("pages of 3 give\n%q\nwant\n%q", got, all)
	}
	// A page that ends where the listing does is not truncated.
	if out := list(s3.ListMultipartUploadsInput{MaxUploads: aws.Int32(int32(len(keys)))}); aws.ToBool(out.IsTruncated) {
		t.Fatalf("a page of all %d uploads truncated", len(keys))
	}
	if out := list(s3.ListMultipartUploadsInput{MaxUploads: aws.Int32(int32(len(keys) - 1))}); !aws.ToBool(out.IsTruncated) {
		t.Fatalf("a page of all uploads but one not truncated")
	}

	// Delimiter: uploads of a (2), b (2), d (4), e f, h, k, l, m, and
	// a/, c/, g/, i/ rolled up.
	byDelim := list(s3.ListMultipartUploadsInput{Delimiter: aws.String("/")})
	got := listedUploads(byDelim)
	var prefixes []string
	for _, p := range byDelim.CommonPrefixes {
		prefixes = append(prefixes, aws.ToString(p.Prefix))
	}
	if len(byDelim.Uploads) != 13 || !slices.Equal(prefixes, []string{"a/", "c/", "g/", "i/"}) || aws.ToString(byDelim.Delimiter) != "/" {
		t.Fatalf("delimiter /: %q (delimiter %q); want 13 uploads and prefixes a/ c/ g/ i/", got, aws.ToString(byDelim.Delimiter))
	}
	for _, max := range []int32{1, 3} {
		paged := pages(s3.ListMultipartUploadsInput{Delimiter: aws.String("/")}, max)
		slices.Sort(paged)
		slices.Sort(got)
		if !slices.Equal(paged, got) {
			t.Fatalf("delimiter /, pages of %d give\n%q\nwant\n%q", max, paged, got)
		}
	}
	sub := list(s3.ListMultipartUploadsInput{Prefix: aws.String("c/"), Delimiter: aws.String("/")})
	if got := listedUploads(sub); !slices.Equal(got[1:], []string{"prefix c/d/"}) || !strings.HasPrefix(got[0], "c/f ") {
		t.Fatalf("prefix c/, delimiter /: %q; want c/f and prefix c/d/", got)
	}
	// upload-id-marker without key-marker is ignored, as in S3.
	if got := listedUploads(list(s3.ListMultipartUploadsInput{UploadIdMarker: aws.String(strings.Repeat("f", 32))})); !slices.Equal(got, all) {
		t.Fatalf("upload-id-marker alone: %q", got)
	}
	// key-marker alone: after every upload of that key.
	if got := listedUploads(list(s3.ListMultipartUploadsInput{KeyMarker: aws.String("d")})); len(got) == 0 || strings.HasPrefix(got[0], "d ") {
		t.Fatalf("key-marker d: %q; want what follows d's uploads", got)
	}
}

// TestListMultipartUploadsEncoding: encoding-type=url encodes Key, Prefix,
// Delimiter, KeyMarker, NextKeyMarker and CommonPrefixes as a listing of
// objects does; without it they come as they are.
func TestListMultipartUploadsEncoding(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "mpe")
	for _, k := range []string{"d ir+/x", "d ir+/y", "ĉ%+ z", "d ir+ "} {
		if _, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpe"), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String("mpe"), Prefix: aws.String("d ir+"), Delimiter: aws.String("/"),
		KeyMarker: aws.String("d iq"), EncodingType: types.EncodingTypeUrl}
	out, err := e.s3.ListMultipartUploads(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := listedUploads(out); !slices.Equal(got[1:], []string{"prefix d%20ir%2B/"}) || !strings.HasPrefix(got[0], "d%20ir%2B%20 ") ||
		aws.ToString(out.Prefix) != "d%20ir%2B" || aws.ToString(out.KeyMarker) != "d%20iq" || aws.ToString(out.Delimiter) != "/" ||
		out.EncodingType != types.EncodingTypeUrl {
		t.Fatalf("encoding-type=url: %q prefix %q key-marker %q delimiter %q encoding %q", got, aws.ToString(out.Prefix),
			aws.ToString(out.KeyMarker), aws.ToString(out.Delimiter), out.EncodingType)
	}
	in.Prefix, in.Delimiter, in.KeyMarker, in.MaxUploads = aws.String("ĉ"), nil, nil, aws.Int32(1)
	if out, err = e.s3.ListMultipartUploads(ctx, in); err != nil || len(out.Uploads) != 1 ||
		aws.ToString(out.Uploads[0].Key) != "%C4%89%25%2B%20z" || aws.ToString(out.NextKeyMarker) != "%C4%89%25%2B%20z" {
		t.Fatalf("encoding-type=url, ĉ%%+ z: %v %+v", err, out)
	}
	in.EncodingType = ""
	if out, err = e.s3.ListMultipartUploads(ctx, in); err != nil || len(out.Uploads) != 1 || aws.ToString(out.Uploads[0].Key) != "ĉ%+ z" {
		t.Fatalf("no encoding-type, ĉ%%+ z: %v %+v", err, out)
	}
}

// TestListMultipartUploadsBadParameters: a max-uploads that is negative
// or not a number, or an encoding-type other than url, is S3's
// InvalidArgument; max-uploads above 1000 is 1000, and 0 an empty page.
func TestListMultipartUploadsBadParameters(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "mpb")
	for _, q := range []string{"max-uploads=-1", "max-uploads=x", "max-uploads=", "max-uploads=99999999999999999999", "encoding-type=xml"} {
		resp, body := send(t, signed(t, http.MethodGet, e.url+"/mpb?uploads&"+q, nil), "")
		wantS3Error(t, q, resp, body, "InvalidArgument", http.StatusBadRequest)
	}
	out, err := e.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("mpb"), MaxUploads: aws.Int32(5000)})
	if err != nil || aws.ToInt32(out.MaxUploads) != 1000 {
		t.Fatalf("max-uploads=5000: %v %+v; want 1000", err, out)
	}
	if _, err := e.s3.CreateMultipartUpload(e.ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpb"), Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	out, err = e.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("mpb"), MaxUploads: aws.Int32(0)})
	if err != nil || len(out.Uploads) != 0 || aws.ToBool(out.IsTruncated) {
		t.Fatalf("max-uploads=0: %v %+v; want an empty page, not truncated", err, out)
	}
	_, err = e.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("nosuchmpb")})
	wantCode(t, "a missing bucket", err, "NoSuchBucket", 404)
}

// readOnly is the test key as a read-only user: osd 'allow r'.
type readOnly struct{}

func (readOnly) Lookup(_ context.Context, access string) (s3gw.Identity, error) {
	if access != testAccess {
		return s3gw.Identity{}, s3gw.ErrInvalidAccessKeyID
	}
	return s3gw.Identity{Secret: testSecret, Entity: "client.reader", Caps: auth.Caps{auth.ServiceOSD: {{Perm: auth.PermRead}}}}, nil
}

// TestListMultipartUploadsByReaderAbortsNothing: the gateway collects a
// bucket's stale internal uploads when it lists the bucket's uploads, with
// its own identity: only for a requester who may write the bucket. A
// read-only user's listing deletes nothing; a writer's does.
func TestListMultipartUploadsByReaderAbortsNothing(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "reader")
	internalUpload(t, e, "reader", "big")
	internal := func() int {
		t.Helper()
		ups, err := e.cl.AbortStaleUploads(e.ctx, "reader", client.StaleUploadOptions{Age: -1, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(ups)
	}
	dayLater := func(o *s3gw.Options) {
		o.StaleUploadNow = func() time.Time { return time.Now().Add(25 * time.Hour) }
		o.StaleUploadSweep = -1
	}
	reader := serveWith(t, e, func(o *s3gw.Options) { dayLater(o); o.Credentials = readOnly{} })
	if _, err := reader.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("reader")}); err != nil {
		t.Fatalf("a read-only user's ListMultipartUploads: %v", err)
	}
	if n := internal(); n != 1 {
		t.Fatalf("a read-only user's listing aborted the stale internal upload: %d left", n)
	}
	writer := serveWith(t, e, dayLater)
	if _, err := writer.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("reader")}); err != nil {
		t.Fatalf("a writer's ListMultipartUploads: %v", err)
	}
	if n := internal(); n != 0 {
		t.Fatalf("a writer's listing left %d stale internal uploads", n)
	}
}

// TestListingsCheckTheBucketOnce: each listing asks the meta PG's
// primary about its bucket once (HEAD_BUCKET), not once in the gateway
// and again in the SDK.
func TestListingsCheckTheBucketOnce(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "once")
	headBuckets := func() uint64 {
		var n uint64
		for _, o := range e.osds.OSDs {
			for _, op := range o.Stats().Ops {
				if op.Op == "head_bucket" {
					n += op.Count
				}
			}
		}
		return n
	}
	for _, l := range []struct {
		what string
		list func() error
	}{
		{"ListMultipartUploads", func() error {
			_, err := e.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("once")})
			return err
		}},
		{"ListMultipartUploads max-uploads=0", func() error {
			_, err := e.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("once"), MaxUploads: aws.Int32(0)})
			return err
		}},
		{"ListObjectsV2", func() error {
			_, err := e.s3.ListObjectsV2(e.ctx, &s3.ListObjectsV2Input{Bucket: aws.String("once")})
			return err
		}},
		{"ListObjects", func() error {
			_, err := e.s3.ListObjects(e.ctx, &s3.ListObjectsInput{Bucket: aws.String("once")})
			return err
		}},
	} {
		before := headBuckets()
		if err := l.list(); err != nil {
			t.Fatalf("%s: %v", l.what, err)
		}
		if n := headBuckets() - before; n != 1 {
			t.Errorf("%s checked the bucket %d times, want once", l.what, n)
		}
	}
}
