package s3gw_test

// The gateway against aws-sdk-go-v2's S3 client, which signs and parses as
// it does against AWS, over a real three-OSD cluster in process.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

const (
	testAccess = "OSPREYTESTKEY"
	testSecret = "osprey/test+secret"
)

// env is a cluster, a gateway on it and an S3 client of the gateway.
type env struct {
	osds    *osdtest.Cluster
	cl      *client.Client
	gw      *s3gw.Gateway
	url     string
	s3      *s3.Client
	ctx     context.Context
	skew    atomic.Int64 // added to the gateway's clock, ns
	domain  string
	srvAddr string
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, nil) }

// newEnvWith is newEnv with the gateway's options changed by tweak.
func newEnvWith(t *testing.T, tweak func(*s3gw.Options)) *env {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	e := &env{osds: c, cl: c.Client(t, func(o *client.Options) { o.MD5 = true }), domain: "s3.osprey.test"}
	// The test's own context, not a fixed deadline: TestS3Tests runs
	// every case on one env, and on a loaded machine (race detector, CI)
	// took over 3 minutes, when every case left failed at once; a hang is
	// still ended by go test's -timeout, with every goroutine's stack.
	e.ctx = t.Context()
	opts := s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
		Domains: []string{e.domain}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) }}
	if tweak != nil {
		tweak(&opts)
	}
	gw, err := s3gw.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	e.url, e.srvAddr = srv.URL, srv.Listener.Addr().String()
	e.s3 = e.client(testAccess, testSecret, true)
	return e
}

// client is an S3 client of the gateway with these credentials.
func (e *env) client(access, secret string, pathStyle bool) *s3.Client {
	opts := s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.url), UsePathStyle: pathStyle,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, "")}
	if !pathStyle {
		// BUCKET.s3.osprey.test resolves nowhere: every connection goes
		// to the gateway, with the virtual host in the Host header.
		_, port, _ := net.SplitHostPort(e.srvAddr)
		opts.BaseEndpoint = aws.String("http://" + e.domain + ":" + port)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.srvAddr)
		}
		opts.HTTPClient = &http.Client{Transport: tr}
	}
	return s3.New(opts)
}

// code is the S3 error code and HTTP status of err.
func code(err error) (string, int) {
	var ae smithy.APIError
	status := 0
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	if errors.As(err, &ae) {
		return ae.ErrorCode(), status
	}
	return "", status
}

func wantCode(t *testing.T, what string, err error, wantCode string, wantStatus int) {
	t.Helper()
	c, s := code(err)
	if c != wantCode || s != wantStatus {
		t.Fatalf("%s: %v: got %q %d, want %q %d", what, err, c, s, wantCode, wantStatus)
	}
}

func (e *env) mb(t *testing.T, bucket string) {
	t.Helper()
	if _, err := e.s3.CreateBucket(e.ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) put(t *testing.T, bucket, key string, data []byte) *s3.PutObjectOutput {
	t.Helper()
	out, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
	return out
}

func (e *env) get(t *testing.T, bucket, key, rng string) ([]byte, *s3.GetObjectOutput) {
	t.Helper()
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if rng != "" {
		in.Range = aws.String(rng)
	}
	out, err := e.s3.GetObject(e.ctx, in)
	if err != nil {
		t.Fatalf("get %s/%s %s: %v", bucket, key, rng, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, out
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func TestBuckets(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "alpha")
	e.mb(t, "beta")
	_, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alpha")})
	wantCode(t, "create twice", err, "BucketAlreadyOwnedByYou", 409)
	if !strings.Contains(err.Error(), "you already own it") || strings.Contains(err.Error(), "store:") {
		t.Fatalf("create twice: %v; want S3's message, not the store's", err)
	}
	_, err = e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("Bad_Name")})
	wantCode(t, "bad name", err, "InvalidBucketName", 400)

	lb, err := e.s3.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range lb.Buckets {
		names = append(names, *b.Name)
		if b.CreationDate == nil || time.Since(*b.CreationDate) > time.Hour {
			t.Errorf("bucket %s created %v", *b.Name, b.CreationDate)
		}
		if aws.ToString(b.BucketRegion) != "us-east-1" {
			t.Errorf("bucket %s in region %q", *b.Name, aws.ToString(b.BucketRegion))
		}
	}
	if !slices.Equal(names, []string{"alpha", "beta"}) || *lb.Owner.ID != testAccess {
		t.Fatalf("ListBuckets: %v owner %v", names, *lb.Owner.ID)
	}

	if _, err := e.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("alpha")}); err != nil {
		t.Fatal(err)
	}
	_, err = e.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("gamma")})
	wantCode(t, "head missing", err, "NotFound", 404)

	loc, err := e.s3.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String("alpha")})
	if err != nil || loc.LocationConstraint != "" {
		t.Fatalf("location %q %v", loc.LocationConstraint, err)
	}
	_, err = e.s3.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String("gamma")})
	wantCode(t, "location of missing", err, "NoSuchBucket", 404)

	e.put(t, "alpha", "k", []byte("x"))
	_, err = e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("alpha")})
	wantCode(t, "delete non-empty", err, "BucketNotEmpty", 409)
	// An upload in progress does not keep a bucket, and goes with it, as
	// on S3: the bucket made again has none.
	if _, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("beta"), Key: aws.String("mp")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("beta")}); err != nil {
		t.Fatal(err)
	}
	e.mb(t, "beta")
	if ups, err := e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("beta")}); err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("the bucket made again lists %v, %v", ups, err)
	}
	if _, err := e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("beta")}); err != nil {
		t.Fatal(err)
	}
	_, err = e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("beta")})
	wantCode(t, "delete twice", err, "NoSuchBucket", 404)
	// ACLs: read, what the caps allow (here every cap: FULL_CONTROL);
	// a grant asked for is refused.
	acl, err := e.s3.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("alpha")})
	if err != nil || *acl.Owner.ID != testAccess || len(acl.Grants) != 1 || acl.Grants[0].Permission != types.PermissionFullControl ||
		acl.Grants[0].Grantee.Type != types.TypeCanonicalUser || *acl.Grants[0].Grantee.ID != testAccess {
		t.Fatalf("GetBucketAcl: %+v, %v", acl, err)
	}
	e.put(t, "alpha", "k", []byte("x"))
	if oacl, err := e.s3.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("alpha"), Key: aws.String("k")}); err != nil ||
		len(oacl.Grants) != 1 || oacl.Grants[0].Permission != types.PermissionFullControl {
		t.Fatalf("GetObjectAcl: %+v, %v", oacl, err)
	}
	_, err = e.s3.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("alpha"), Key: aws.String("none")})
	wantCode(t, "the acl of no object", err, "NoSuchKey", 404)
	_, err = e.s3.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("beta")})
	wantCode(t, "the acl of no bucket", err, "NoSuchBucket", 404)
	_, err = e.s3.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("alpha"), ACL: types.BucketCannedACLPublicRead})
	wantCode(t, "PutBucketAcl", err, "NotImplemented", 501)
	_, err = e.s3.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("alpha"), Key: aws.String("k"), ACL: types.ObjectCannedACLPublicRead})
	wantCode(t, "PutObjectAcl", err, "NotImplemented", 501)
	_, err = e.s3.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("alpha"), Key: aws.String("k"),
		AccessControlPolicy: &types.AccessControlPolicy{Owner: acl.Owner, Grants: acl.Grants}})
	wantCode(t, "PutObjectAcl with grants", err, "NotImplemented", 501)
	// A canned ACL that changes nothing is done, as on a PutObject.
	if _, err := e.s3.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("alpha"), ACL: types.BucketCannedACLPrivate}); err != nil {
		t.Fatalf("PutBucketAcl private: %v", err)
	}
	if _, err := e.s3.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("alpha"), Key: aws.String("k"), ACL: types.ObjectCannedACLBucketOwnerFullControl}); err != nil {
		t.Fatalf("PutObjectAcl bucket-owner-full-control: %v", err)
	}
	_, err = e.s3.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("alpha"), Key: aws.String("none"), ACL: types.ObjectCannedACLPrivate})
	wantCode(t, "PutObjectAcl of no object", err, "NoSuchKey", 404)
	// A PutObjectAcl that names a copy source is no copy.
	resp, err := http.DefaultClient.Do(signedWith(t, http.MethodPut, e.url+"/alpha/copied?acl", nil,
		map[string]string{"X-Amz-Copy-Source": "alpha/k", "X-Amz-Acl": "private"}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, herr := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("alpha"), Key: aws.String("copied")}); resp.StatusCode != http.StatusBadRequest || herr == nil {
		t.Fatalf("PUT ?acl with x-amz-copy-source: %s (the copy made: %v)", resp.Status, herr == nil)
	}
}

func TestObjects(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "obj")
	data := osdtest.Payload(300<<10, 1)
	out, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("obj"), Key: aws.String("dir/a b+c.bin"),
		Body: bytes.NewReader(data), ContentType: aws.String("application/x-test"), CacheControl: aws.String("max-age=60"),
		ContentDisposition: aws.String(`attachment; filename="x.bin"`), Metadata: map[string]string{"color": "blue", "Size-Class": "M"}})
	if err != nil {
		t.Fatal(err)
	}
	if *out.ETag != `"`+md5hex(data)+`"` {
		t.Fatalf("ETag %s, want the body's MD5 %s", *out.ETag, md5hex(data))
	}
	b, got := e.get(t, "obj", "dir/a b+c.bin", "")
	if !bytes.Equal(b, data) || *got.ETag != *out.ETag || *got.ContentType != "application/x-test" || *got.ContentLength != int64(len(data)) ||
		*got.CacheControl != "max-age=60" || *got.ContentDisposition != `attachment; filename="x.bin"` ||
		got.Metadata["color"] != "blue" || got.Metadata["size-class"] != "M" || len(got.Metadata) != 2 || got.LastModified == nil {
		t.Fatalf("get: %d bytes, %+v", len(b), got)
	}
	h, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("obj"), Key: aws.String("dir/a b+c.bin")})
	if err != nil || *h.ContentLength != int64(len(data)) || *h.ETag != *out.ETag || h.Metadata["color"] != "blue" {
		t.Fatalf("head: %+v %v", h, err)
	}

	// An empty object, and one replaced.
	e.put(t, "obj", "empty", nil)
	if b, _ := e.get(t, "obj", "empty", ""); len(b) != 0 {
		t.Fatalf("empty: %d bytes", len(b))
	}
	e.put(t, "obj", "empty", []byte("now full"))
	if b, _ := e.get(t, "obj", "empty", ""); string(b) != "now full" {
		t.Fatalf("replaced: %q", b)
	}

	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("obj"), Key: aws.String("nope")})
	wantCode(t, "get missing", err, "NoSuchKey", 404)
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("k")})
	wantCode(t, "get in missing bucket", err, "NoSuchBucket", 404)
	_, err = e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("obj"), Key: aws.String("nope")})
	wantCode(t, "head missing", err, "NotFound", 404)
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("k"), Body: strings.NewReader("x")})
	wantCode(t, "put in missing bucket", err, "NoSuchBucket", 404)

	// Content-MD5: right, then wrong (and nothing stored).
	sum := md5.Sum([]byte("checked"))
	// The ETag is the MD5 the check took (client.MD5Reader), not hashed again.
	if out, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("obj"), Key: aws.String("md5"), Body: strings.NewReader("checked"),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))}); err != nil {
		t.Fatal(err)
	} else if got, want := aws.ToString(out.ETag), fmt.Sprintf("%q", hex.EncodeToString(sum[:])); got != want {
		t.Errorf("ETag of a Content-MD5 put: %s, want %s", got, want)
	}
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("obj"), Key: aws.String("md5"), Body: strings.NewReader("CHECKED"),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))})
	wantCode(t, "wrong Content-MD5", err, "BadDigest", 400)
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("obj"), Key: aws.String("md5"), Body: strings.NewReader("x"),
		ContentMD5: aws.String("not base64!")})
	wantCode(t, "malformed Content-MD5", err, "InvalidDigest", 400)
	if b, _ := e.get(t, "obj", "md5", ""); string(b) != "checked" {
		t.Fatalf("after refused puts: %q", b)
	}

	// CRC32C, Osprey's own checksum: sent, checked, and returned on a GET
	// that asks (the SDK then validates it).
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("obj"), Key: aws.String("crc"), Body: bytes.NewReader(data),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c}); err != nil {
		t.Fatal(err)
	}
	g, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("obj"), Key: aws.String("crc"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := io.ReadAll(g.Body)
	g.Body.Close()
	if err != nil || !bytes.Equal(gb, data) || g.ChecksumCRC32C == nil {
		t.Fatalf("checksummed get: %v, crc32c %v", err, g.ChecksumCRC32C)
	}
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("obj"), Key: aws.String("crc"), Body: strings.NewReader("other"),
		ChecksumCRC32C: g.ChecksumCRC32C})
	wantCode(t, "wrong CRC32C", err, "BadDigest", 400)

	// Deletes, one and many.
	if _, err := e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("obj"), Key: aws.String("md5")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("obj"), Key: aws.String("md5")}); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	var ids []types.ObjectIdentifier
	for i := range 30 {
		k := fmt.Sprintf("batch/%02d", i)
		e.put(t, "obj", k, []byte(k))
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	del, err := e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("obj"), Delete: &types.Delete{Objects: ids}})
	if err != nil || len(del.Deleted) != 30 || len(del.Errors) != 0 {
		t.Fatalf("DeleteObjects: %v %+v", err, del)
	}
	del, err = e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("obj"), Delete: &types.Delete{Objects: ids[:3], Quiet: aws.Bool(true)}})
	if err != nil || len(del.Deleted) != 0 || len(del.Errors) != 0 {
		t.Fatalf("quiet DeleteObjects: %v %+v", err, del)
	}
	l, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("obj"), Prefix: aws.String("batch/")})
	if err != nil || len(l.Contents) != 0 {
		t.Fatalf("after DeleteObjects: %v %d left", err, len(l.Contents))
	}
	_, err = e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("nobucket"), Delete: &types.Delete{Objects: ids[:1]}})
	wantCode(t, "DeleteObjects in missing bucket", err, "NoSuchBucket", 404)
	// The largest DeleteObjects a client sends: 1,000 keys of 1,024 bytes
	// that XML escapes to several times that (over 4 MB in all).
	long := make([]types.ObjectIdentifier, 1000)
	for i := range long {
		k := fmt.Sprintf("%04d", i) + strings.Repeat(`&<"`, 340)
		long[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	e.put(t, "obj", *long[7].Key, []byte("x"))
	del, err = e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("obj"), Delete: &types.Delete{Objects: long}})
	if err != nil || len(del.Deleted) != 1000 || len(del.Errors) != 0 {
		t.Fatalf("DeleteObjects of 1,000 long keys: %v (%d deleted, %d errors)", err, len(del.Deleted), len(del.Errors))
	}
	if _, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("obj"), Key: long[7].Key}); err == nil {
		t.Fatal("a key DeleteObjects of long keys named is still there")
	}
	// A body no valid request has is refused as too big, not misread.
	big := append([]byte("<Delete>"), bytes.Repeat([]byte(" "), 9<<20)...)
	resp, err := http.DefaultClient.Do(signed(t, http.MethodPost, e.url+"/obj?delete", append(big, "</Delete>"...)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte("<Code>MaxMessageLengthExceeded</Code>")) {
		t.Fatalf("a 9 MiB DeleteObjects body: %s\n%s", resp.Status, b)
	}
}

func TestRanges(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "rng")
	// Larger than the SDK's 8 MiB read window, so ranges cross windows.
	data := osdtest.Payload(9<<20+123, 2)
	e.put(t, "rng", "big", data)
	size := int64(len(data))
	for _, c := range []struct {
		rng         string
		first, last int64
	}{
		{"bytes=0-9", 0, 9},
		{"bytes=100-", 100, size - 1},
		{"bytes=-5", size - 5, size - 1},
		{"bytes=-" + fmt.Sprint(size+10), 0, size - 1},
		{"bytes=8388600-8388700", 8388600, 8388700},
		{fmt.Sprintf("bytes=%d-%d", size-3, size+100), size - 3, size - 1},
		// A last byte past int64 is the end, as S3 clips it (it was
		// ignored, then refused 416 for an overflow).
		{"bytes=0-99999999999999999999", 0, size - 1},
		{"bytes=0-9223372036854775807", 0, size - 1},
		{"bytes=5-99999999999999999999", 5, size - 1},
	} {
		b, out := e.get(t, "rng", "big", c.rng)
		want := fmt.Sprintf("bytes %d-%d/%d", c.first, c.last, size)
		if !bytes.Equal(b, data[c.first:c.last+1]) || *out.ContentRange != want || *out.ContentLength != c.last-c.first+1 {
			t.Fatalf("%s: %d bytes, Content-Range %s, want %s", c.rng, len(b), *out.ContentRange, want)
		}
	}
	// An invalid Range header is ignored, as S3 does: the whole object.
	if b, _ := e.get(t, "rng", "big", "bytes=10-5"); !bytes.Equal(b, data) {
		t.Fatalf("ignored range: %d bytes", len(b))
	}
	_, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("rng"), Key: aws.String("big"), Range: aws.String(fmt.Sprintf("bytes=%d-", size))})
	wantCode(t, "range past the end", err, "InvalidRange", 416)
	// So of an object stored in parts.
	id, _, parts := e.mpUpload(t, "rng", "parts", 6<<20, 5<<20, nil)
	e.complete(t, "rng", "parts", id, parts)
	for _, first := range []int{6 << 20, 6<<20 + 1} {
		_, err = e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("rng"), Key: aws.String("parts"), Range: aws.String(fmt.Sprintf("bytes=%d-", first))})
		wantCode(t, "range past the end of parts", err, "InvalidRange", 416)
	}
	e.put(t, "rng", "empty", nil)
	_, err = e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("rng"), Key: aws.String("empty"), Range: aws.String("bytes=-1")})
	wantCode(t, "suffix of empty", err, "InvalidRange", 416)
	// The last 0 bytes: no byte of any object (RFC 9110).
	_, err = e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("rng"), Key: aws.String("big"), Range: aws.String("bytes=-0")})
	wantCode(t, "the last 0 bytes", err, "InvalidRange", 416)
	h, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String("rng"), Key: aws.String("big"), Range: aws.String("bytes=0-99")})
	if err != nil || *h.ContentLength != 100 {
		t.Fatalf("ranged head: %v %+v", err, h)
	}
}

// appendEntries appends a page's common prefixes ("P:" and the prefix)
// and keys.
func appendEntries(dst []string, prefixes []types.CommonPrefix, objects []types.Object) []string {
	for _, p := range prefixes {
		dst = append(dst, "P:"+*p.Prefix)
	}
	for _, o := range objects {
		dst = append(dst, *o.Key)
	}
	return dst
}

func TestListing(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "lst")
	keys := []string{"a/1", "a/2", "a/b/3", "b", "c d/e", "c d/f", "z"}
	for i := range 25 {
		keys = append(keys, fmt.Sprintf("many/%02d", i))
	}
	for _, k := range keys {
		e.put(t, "lst", k, []byte(k))
	}
	slices.Sort(keys)

	// Everything, by pages of 7: the SDK's paginator follows the tokens.
	var all []string
	pages := 0
	p := s3.NewListObjectsV2Paginator(e.s3, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), MaxKeys: aws.Int32(7)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if *out.KeyCount != int32(len(out.Contents)) || len(out.Contents) > 7 {
			t.Fatalf("page of %d, KeyCount %d", len(out.Contents), *out.KeyCount)
		}
		for _, o := range out.Contents {
			all = append(all, *o.Key)
			if *o.Size != int64(len(*o.Key)) || *o.ETag != `"`+md5hex([]byte(*o.Key))+`"` || o.Owner != nil {
				t.Fatalf("entry %+v", o)
			}
		}
	}
	if !slices.Equal(all, keys) || pages != 5 {
		t.Fatalf("%d pages: %v", pages, all)
	}

	// A delimiter rolls up common prefixes; fetch-owner adds owners.
	out, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Delimiter: aws.String("/"), FetchOwner: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var prefixes, objs []string
	for _, cp := range out.CommonPrefixes {
		prefixes = append(prefixes, *cp.Prefix)
	}
	for _, o := range out.Contents {
		objs = append(objs, *o.Key)
		if o.Owner == nil || *o.Owner.ID != testAccess {
			t.Fatalf("fetch-owner: %+v", o.Owner)
		}
	}
	if !slices.Equal(prefixes, []string{"a/", "c d/", "many/"}) || !slices.Equal(objs, []string{"b", "z"}) {
		t.Fatalf("delimiter: %v %v", prefixes, objs)
	}
	out, err = e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Prefix: aws.String("a/"), Delimiter: aws.String("/"), StartAfter: aws.String("a/1")})
	if err != nil || len(out.Contents) != 1 || *out.Contents[0].Key != "a/2" || len(out.CommonPrefixes) != 1 || *out.CommonPrefixes[0].Prefix != "a/b/" {
		t.Fatalf("prefix+start-after: %v %+v", err, out)
	}
	// encoding-type=url: keys and the prefix come URL-encoded, a space as
	// %20 and '/' as it is, as ceph/s3-tests expects (this SDK leaves the
	// decoding to its caller).
	out, err = e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Prefix: aws.String("c d/"), EncodingType: types.EncodingTypeUrl})
	if err != nil || len(out.Contents) != 2 {
		t.Fatalf("encoding-type=url: %v %+v", err, out.Contents)
	}
	if k, p := *out.Contents[0].Key, *out.Prefix; k != "c%20d/e" || p != "c%20d/" {
		t.Fatalf("encoding-type=url: key %q prefix %q", k, p)
	}
	out, err = e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), MaxKeys: aws.Int32(0)})
	if err != nil || len(out.Contents) != 0 || *out.IsTruncated {
		t.Fatalf("max-keys 0: %v %+v", err, out)
	}
	_, err = e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), ContinuationToken: aws.String("garbage!")})
	wantCode(t, "bad token", err, "InvalidArgument", 400)
	_, err = e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("nobucket")})
	wantCode(t, "list missing bucket", err, "NoSuchBucket", 404)

	// Version 1: markers, and NextMarker with a delimiter, which may be a
	// common prefix.
	var v1 []string
	marker := ""
	for range 20 {
		o, err := e.s3.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("lst"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(2), Marker: aws.String(marker)})
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range o.CommonPrefixes {
			v1 = append(v1, *cp.Prefix)
		}
		for _, c := range o.Contents {
			v1 = append(v1, *c.Key)
		}
		if !*o.IsTruncated {
			break
		}
		marker = *o.NextMarker
	}
	slices.Sort(v1)
	if !slices.Equal(v1, []string{"a/", "b", "c d/", "many/", "z"}) {
		t.Fatalf("v1 with markers: %v", v1)
	}
	o1, err := e.s3.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("lst"), Prefix: aws.String("many/"), Marker: aws.String("many/20")})
	if err != nil || len(o1.Contents) != 4 || *o1.Contents[0].Key != "many/21" || o1.Contents[0].Owner == nil {
		t.Fatalf("v1 marker: %v %+v", err, o1.Contents)
	}
}

// TestListingPastMaxRune: paging on from a common prefix skips all of
// it, a key that goes on with U+10FFFF (the largest rune) right after the
// prefix too, by v1 marker and by v2 continuation token.
func TestListingPastMaxRune(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "maxrune")
	for _, k := range []string{"a/1", "a/\U0010FFFFz", "b", "c"} {
		e.put(t, "maxrune", k, []byte("x"))
	}
	want := []string{"P:a/", "b", "c"}
	var v2 []string
	var token *string
	for range 10 {
		out, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("maxrune"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1),
			ContinuationToken: token})
		if err != nil {
			t.Fatal(err)
		}
		v2 = appendEntries(v2, out.CommonPrefixes, out.Contents)
		if !*out.IsTruncated {
			break
		}
		token = out.NextContinuationToken
	}
	if !slices.Equal(v2, want) {
		t.Errorf("v2 by pages of 1: %q, want %q", v2, want)
	}
	var v1 []string
	marker := ""
	for range 10 {
		out, err := e.s3.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("maxrune"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1),
			Marker: aws.String(marker)})
		if err != nil {
			t.Fatal(err)
		}
		v1 = appendEntries(v1, out.CommonPrefixes, out.Contents)
		if !*out.IsTruncated {
			break
		}
		marker = *out.NextMarker
	}
	if !slices.Equal(v1, want) {
		t.Errorf("v1 by pages of 1: %q, want %q", v1, want)
	}
	// A marker that is a common prefix skips it, as a start-after does.
	for _, v2 := range []bool{false, true} {
		if got := e.list(t, v2, "maxrune", listReq{delim: aws.String("/"), after: aws.String("a/")}); !slices.Equal(got.keys, []string{"b", "c"}) || len(got.prefixes) != 0 {
			t.Errorf("v2 %v, marker or start-after a/: %q %q, want [b c] and no prefix", v2, got.keys, got.prefixes)
		}
	}
}

// TestListingControlCharacters: keys holding characters XML 1.0 cannot
// (control characters, U+FFFF) are listed under their own names, written
// as character references as S3 and RGW write them, never as U+FFFD, a key
// that does not exist (a client paging on it skipped every key between
// the two). A strict parser (the AWS SDKs') refuses such a page, as it
// does S3's, where encoding-type=url lists every key. A key holding the
// gateway's own mark rune comes back whole.
func TestListingControlCharacters(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "ctrl")
	keys := []string{"r/0\x01ctrl", "r/0a", "r/0b", "r/1\x1b[0m", "r/2\t\n\rws", "r/3\uE000\uE000mark\uE000", "r/4\uFFFF", "r/5"}
	for _, k := range keys {
		e.put(t, "ctrl", k, []byte(k))
	}
	resp, body := send(t, signed(t, http.MethodGet, e.url+"/ctrl?prefix=r/", nil), e.url)
	for _, k := range []string{"r/0&#x1;ctrl", "r/1&#x1b;[0m", "r/2&#x9;&#xA;&#xD;ws", "r/3\uE000\uE000mark\uE000", "r/4&#xffff;", "r/5"} {
		if !bytes.Contains(body, []byte("<Key>"+k+"</Key>")) {
			t.Errorf("the listing's XML lacks <Key>%s</Key>", k)
		}
	}
	if resp.StatusCode != http.StatusOK || bytes.ContainsRune(body, '\uFFFD') || t.Failed() {
		t.Fatalf("the listing's XML (%d): %s", resp.StatusCode, body)
	}
	if _, err := e.s3.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("ctrl")}); err == nil {
		t.Error("a strict parser read a page with a control character in a key")
	}
	// encoding-type=url, paged by the last key, as rclone's list_url_encode.
	var v1 []string
	marker := ""
	for range 20 {
		out, err := e.s3.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("ctrl"), MaxKeys: aws.Int32(1), Marker: aws.String(marker),
			EncodingType: types.EncodingTypeUrl})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			k, err := url.QueryUnescape(*o.Key)
			if err != nil {
				t.Fatal(err)
			}
			v1 = append(v1, k)
		}
		if !*out.IsTruncated {
			break
		}
		marker = v1[len(v1)-1] // no delimiter: no NextMarker
	}
	if want := slices.Sorted(slices.Values(keys)); !slices.Equal(v1, want) {
		t.Fatalf("listed with encoding-type=url:\n%q\nwant %q", v1, want)
	}
	// The error document names such a key too, percent-encoded: a strict
	// parser (boto3's expat) refuses "&#x2;", and an SDK that cannot read
	// the error loses its code (security probe F4).
	resp, body = send(t, signed(t, http.MethodGet, e.url+"/ctrl/r/%02gone", nil), e.url)
	if resp.StatusCode != http.StatusNotFound || !bytes.Contains(body, []byte("<Key>r/%02gone</Key>")) ||
		!bytes.Contains(body, []byte("<Code>NoSuchKey</Code>")) || bytes.Contains(body, []byte("&#x")) {
		t.Fatalf("NoSuchKey's XML (%d): %s", resp.StatusCode, body)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "auth")
	e.put(t, "auth", "k", []byte("secret data"))

	_, err := e.client(testAccess, "wrong", true).ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, "wrong secret", err, "SignatureDoesNotMatch", 403)
	_, err = e.client("NOSUCHKEY", testSecret, true).ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, "unknown key", err, "InvalidAccessKeyId", 403)
	// A session token, signed, in the header or a presigned URL: the
	// gateway issues none, so it can only be refused.
	withToken := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.url), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "a-session-token")})
	_, err = withToken.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("auth"), Key: aws.String("k")})
	wantCode(t, "a session token", err, "InvalidToken", 400)
	pt, err := s3.NewPresignClient(withToken).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("auth"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := send(t, nil, pt.URL); resp.StatusCode != 400 || !bytes.Contains(body, []byte("<Code>InvalidToken</Code>")) {
		t.Fatalf("a presigned URL with a session token: %d %s", resp.StatusCode, body)
	}

	// Anonymous: refused, in S3's XML, with a request id.
	resp, body := send(t, nil, e.url+"/auth/k")
	if resp.StatusCode != 403 || !bytes.Contains(body, []byte("<Code>AccessDenied</Code>")) || resp.Header.Get("x-amz-request-id") == "" ||
		!bytes.Contains(body, []byte("<RequestId>"+resp.Header.Get("x-amz-request-id")+"</RequestId>")) {
		t.Fatalf("anonymous: %d %s %v", resp.StatusCode, body, resp.Header)
	}

	// Unsigned requests for features the gateway lacks say which: a CORS
	// preflight gets S3's answer for a bucket without CORS, a browser's
	// form upload (POST Object) NotImplemented; neither "anonymous".
	pre, _ := http.NewRequest(http.MethodOptions, e.url+"/auth/k", nil)
	pre.Header.Set("Origin", "https://app.example")
	pre.Header.Set("Access-Control-Request-Method", "PUT")
	resp, body = send(t, pre, "")
	wantS3Error(t, "a CORS preflight", resp, body, "AccessForbidden", 403)
	if !bytes.Contains(body, []byte("CORS is not enabled")) {
		t.Fatalf("a CORS preflight: %s", body)
	}
	form, _ := http.NewRequest(http.MethodPost, e.url+"/auth", strings.NewReader("--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--b--\r\n"))
	form.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	resp, body = send(t, form, "")
	wantS3Error(t, "a form upload", resp, body, "NotImplemented", 501)
	if !bytes.Contains(body, []byte("POST Object")) {
		t.Fatalf("a form upload: %s", body)
	}

	// Clock skew: the gateway's clock 20 minutes ahead.
	e.skew.Store(int64(20 * time.Minute))
	_, err = e.s3.ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, "skewed", err, "RequestTimeTooSkewed", 403)
	e.skew.Store(0)

	// Presigned GET and PUT, and a presigned GET past its expiry.
	ps := s3.NewPresignClient(e.s3)
	pg, err := ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("auth"), Key: aws.String("k")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	resp, body = send(t, nil, pg.URL)
	if resp.StatusCode != 200 || string(body) != "secret data" {
		t.Fatalf("presigned get: %d %s", resp.StatusCode, body)
	}
	pp, err := ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("auth"), Key: aws.String("up")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, pp.URL, strings.NewReader("uploaded"))
	for k, v := range pp.SignedHeader {
		req.Header[k] = v
	}
	resp, _ = send(t, req, "")
	if resp.StatusCode != 200 {
		t.Fatalf("presigned put: %d", resp.StatusCode)
	}
	if b, _ := e.get(t, "auth", "up", ""); string(b) != "uploaded" {
		t.Fatalf("presigned put stored %q", b)
	}
	e.skew.Store(int64(2 * time.Minute))
	resp, body = send(t, nil, pg.URL)
	e.skew.Store(0)
	if resp.StatusCode != 403 || !bytes.Contains(body, []byte("<Code>AccessDenied</Code>")) || !bytes.Contains(body, []byte("expired")) {
		t.Fatalf("expired presigned get: %d %s", resp.StatusCode, body)
	}
	// A presigned URL whose query was changed.
	resp, _ = send(t, nil, strings.Replace(pg.URL, "/auth/k?", "/auth/up?", 1))
	if resp.StatusCode != 403 {
		t.Fatalf("presigned URL of another key: %d", resp.StatusCode)
	}
	// x-amz-* headers the signer did not sign, added to a presigned PUT
	// (a copy's source: the upload would become a copy of what the signer
	// can read) or to a signed request (metadata): refused, nothing done.
	for _, h := range [][2]string{{"X-Amz-Copy-Source", "auth/k"}, {"x-amz-meta-added", "on the way"}} {
		req, _ = http.NewRequest(http.MethodPut, pp.URL, strings.NewReader(""))
		for k, v := range pp.SignedHeader {
			req.Header[k] = v
		}
		req.Header.Set(h[0], h[1])
		resp, body = send(t, req, "")
		if resp.StatusCode != 403 || !bytes.Contains(body, []byte("<Code>AccessDenied</Code>")) || !bytes.Contains(body, []byte("not signed")) {
			t.Fatalf("a presigned PUT with %s added: %d %s", h[0], resp.StatusCode, body)
		}
	}
	if b, _ := e.get(t, "auth", "up", ""); string(b) != "uploaded" {
		t.Fatalf("after refused presigned PUTs with headers added: %q", b)
	}
	req, _ = http.NewRequest(http.MethodPut, e.url+"/auth/up", strings.NewReader("replaced"))
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret}, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Meta-Added", "after signing")
	if resp, body = send(t, req, ""); resp.StatusCode != 403 || !bytes.Contains(body, []byte("not signed")) {
		t.Fatalf("a signed PUT with x-amz-meta-added added: %d %s", resp.StatusCode, body)
	}
	if b, _ := e.get(t, "auth", "up", ""); string(b) != "uploaded" {
		t.Fatalf("after a refused PUT with a header added: %q", b)
	}

	// A body that is not what x-amz-content-sha256 says: refused, and
	// nothing stored.
	signer := v4.NewSigner()
	creds := aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret}
	req, _ = http.NewRequest(http.MethodPut, e.url+"/auth/k", strings.NewReader("tampered!!!"))
	claimed := sha256hex([]byte("what was signed"))
	req.Header.Set("X-Amz-Content-Sha256", claimed)
	if err := signer.SignHTTP(ctx, creds, req, claimed, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, body = send(t, req, "")
	if resp.StatusCode != 400 || !bytes.Contains(body, []byte("XAmzContentSHA256Mismatch")) {
		t.Fatalf("payload hash mismatch: %d %s", resp.StatusCode, body)
	}
	if b, _ := e.get(t, "auth", "k", ""); string(b) != "secret data" {
		t.Fatalf("after a refused body: %q", b)
	}
	// UNSIGNED-PAYLOAD is accepted.
	req, _ = http.NewRequest(http.MethodPut, e.url+"/auth/unsigned", strings.NewReader("no hash"))
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if err := signer.SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, _ = send(t, req, "")
	if resp.StatusCode != 200 {
		t.Fatalf("unsigned payload: %d", resp.StatusCode)
	}
}

// TestPresignedQueryHeaders: a presigned URL's signed x-amz-* query
// parameters are the request's headers, as S3 takes them (the JavaScript
// SDK v3's getSignedUrl puts metadata and a checksum there): applied,
// and checked or refused as the same headers are.
func TestPresignedQueryHeaders(t *testing.T) {
	e := newEnv(t)
	b := e.newBucket(t)
	crcOf := func(s string) string {
		sum := crc32.ChecksumIEEE([]byte(s))
		return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}))
	}
	put := func(query, body string) (*http.Response, []byte) {
		t.Helper()
		return send(t, e.presign(t, http.MethodPut, b, "k?"+query, "60", time.Now(), []byte(body)), "")
	}
	resp, body := put("x-amz-meta-owner=me&X-Amz-Meta-Team=storage&x-amz-checksum-crc32="+crcOf("data")+"&x-amz-sdk-checksum-algorithm=CRC32", "data")
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT with metadata in its query: %d %s", resp.StatusCode, body)
	}
	head, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("k"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if head.Metadata["owner"] != "me" || head.Metadata["team"] != "storage" {
		t.Fatalf("metadata from the query: %v", head.Metadata)
	}
	// Refused as the same headers are, and nothing stored: a checksum of
	// other bytes (the SDK's default one of an empty body), a storage
	// class the gateway lacks, tags.
	for _, c := range []struct {
		query, code string
		status      int
	}{
		{"x-amz-checksum-crc32=AAAAAA%3D%3D&x-amz-sdk-checksum-algorithm=CRC32", "BadDigest", 400},
		{"x-amz-storage-class=GLACIER", "InvalidStorageClass", 400},
		{"x-amz-tagging=a%3Db", "NotImplemented", 501},
	} {
		resp, body := put(c.query, "other")
		wantS3Error(t, "presigned PUT ?"+c.query, resp, body, c.code, c.status)
	}
	if got, _ := e.get(t, b, "k", ""); string(got) != "data" {
		t.Fatalf("after refused presigned PUTs: %q", got)
	}
	// A parameter also sent as a signed header with another value.
	req, _ := http.NewRequest(http.MethodPut, e.url+"/"+b+"/k?x-amz-meta-owner=me&X-Amz-Expires=60", strings.NewReader("x"))
	req.Header.Set("X-Amz-Meta-Owner", "you")
	u, signed, err := v4.NewSigner().PresignHTTP(e.ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
		req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPut, u, strings.NewReader("x"))
	for k, v := range signed {
		req.Header[k] = v
	}
	resp, body = send(t, req, "")
	wantS3Error(t, "query and header disagree", resp, body, "InvalidArgument", 400)
	// A body's hash signed into the URL: the body must have it; signed as
	// UNSIGNED-PAYLOAD with a hash in the query, the URL is not what was
	// signed.
	hashedURL := func(signAs string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, e.url+"/"+b+"/hashed?X-Amz-Content-Sha256="+sha256hex([]byte("data"))+"&X-Amz-Expires=60", nil)
		u, _, err := v4.NewSigner().PresignHTTP(e.ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
			req, signAs, "s3", "us-east-1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	putTo := func(u, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(body))
		return send(t, req, "")
	}
	resp, body = putTo(hashedURL(sha256hex([]byte("data"))), "other")
	wantS3Error(t, "a presigned PUT of other bytes than its signed hash", resp, body, "XAmzContentSHA256Mismatch", 400)
	resp, body = putTo(hashedURL("UNSIGNED-PAYLOAD"), "data")
	wantS3Error(t, "a presigned PUT with a hash in its query signed as unsigned", resp, body, "SignatureDoesNotMatch", 403)
	if resp, body = putTo(hashedURL(sha256hex([]byte("data"))), "data"); resp.StatusCode != 200 {
		t.Fatalf("a presigned PUT of its signed hash's bytes: %d %s", resp.StatusCode, body)
	}
	// Parameters that are no header names, or given twice, or a session
	// token in another case: refused, never dropped.
	for _, c := range []struct{ query, code string }{
		{"x-amz-meta-a%20b=1", "InvalidArgument"},
		{"x-amz-storage-class=STANDARD&x-amz-storage-class=GLACIER", "InvalidArgument"},
		{"x-amz-security-token=abc", "InvalidToken"},
	} {
		resp, body := put(c.query, "x")
		wantS3Error(t, "presigned PUT ?"+c.query, resp, body, c.code, 400)
	}
	// A header given twice, the first value private and the second not:
	// refused, as the query's twice is.
	req = signedWith(t, http.MethodPut, e.url+"/"+b+"/k", []byte("x"), map[string]string{"X-Amz-Acl": "private"})
	req.Header.Add("X-Amz-Acl", "public-read")
	resp, body = send(t, req, "")
	wantS3Error(t, "x-amz-acl twice", resp, body, "InvalidArgument", 400)
	// The auth parameters are not headers: a presigned GET still works,
	// and asks for the checksum in its query.
	resp, body = send(t, e.presign(t, http.MethodGet, b, "k?x-amz-checksum-mode=ENABLED", "60", time.Now(), nil), "")
	if resp.StatusCode != 200 || string(body) != "data" || resp.Header.Get("X-Amz-Checksum-Crc32c") == "" {
		t.Fatalf("presigned GET with x-amz-checksum-mode: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// TestExpectedBucketOwner: x-amz-expected-bucket-owner (and a copy's
// source twin) other than the owner the gateway reports is refused, as
// AWS refuses a bucket of another account, and nothing is done.
func TestExpectedBucketOwner(t *testing.T) {
	e := newEnv(t)
	b := e.newBucket(t)
	lb, err := e.s3.ListBuckets(e.ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	me := aws.ToString(lb.Owner.ID)
	if _, err := e.s3.HeadBucket(e.ctx, &s3.HeadBucketInput{Bucket: aws.String(b), ExpectedBucketOwner: aws.String(me)}); err != nil {
		t.Fatalf("HeadBucket expecting %s, the owner ListBuckets names: %v", me, err)
	}
	_, err = e.s3.HeadBucket(e.ctx, &s3.HeadBucketInput{Bucket: aws.String(b), ExpectedBucketOwner: aws.String("123456789012")})
	wantCode(t, "HeadBucket expecting another owner", err, "Forbidden", 403) // a HEAD's error has no body
	_, err = e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("k"), Body: strings.NewReader("x"),
		ExpectedBucketOwner: aws.String("123456789012")})
	wantCode(t, "PutObject expecting another owner", err, "AccessDenied", 403)
	if _, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("k")}); err == nil {
		t.Fatal("a PutObject refused for its expected owner stored the object")
	}
	e.put(t, b, "src", []byte("x"))
	_, err = e.s3.CopyObject(e.ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("dst"), CopySource: aws.String(b + "/src"),
		ExpectedBucketOwner: aws.String(me), ExpectedSourceBucketOwner: aws.String("123456789012")})
	wantCode(t, "CopyObject expecting another source owner", err, "AccessDenied", 403)
	if _, err := e.s3.CopyObject(e.ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("dst"), CopySource: aws.String(b + "/src"),
		ExpectedBucketOwner: aws.String(me), ExpectedSourceBucketOwner: aws.String(me)}); err != nil {
		t.Fatalf("CopyObject expecting the owner: %v", err)
	}
}

func TestVirtualHostedStyle(t *testing.T) {
	e := newEnv(t)
	vh := e.client(testAccess, testSecret, false)
	if _, err := vh.CreateBucket(e.ctx, &s3.CreateBucketInput{Bucket: aws.String("vhost")}); err != nil {
		t.Fatal(err)
	}
	if _, err := vh.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("vhost"), Key: aws.String("x/y"), Body: strings.NewReader("hosted")}); err != nil {
		t.Fatal(err)
	}
	// Path style sees the same object.
	if b, _ := e.get(t, "vhost", "x/y", ""); string(b) != "hosted" {
		t.Fatalf("got %q", b)
	}
	out, err := vh.ListObjectsV2(e.ctx, &s3.ListObjectsV2Input{Bucket: aws.String("vhost")})
	if err != nil || len(out.Contents) != 1 || *out.Contents[0].Key != "x/y" {
		t.Fatalf("list: %v %+v", err, out)
	}
}

// TestServeGracefulShutdown: a GET in progress when Serve's context ends
// still completes, and Serve then returns nil.
func TestServeGracefulShutdown(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "gshut")
	data := osdtest.Payload(16<<20, 4)
	e.put(t, "gshut", "obj", data)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.gw.Serve(sctx, ln) }()
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + ln.Addr().String()), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "")})
	out, err := c.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("gshut"), Key: aws.String("obj")})
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(out.Body, head); err != nil {
		t.Fatal(err)
	}
	stop() // the response is in flight: far more than the socket buffers hold is unread
	rest, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(append(head, rest...), data) {
		t.Fatalf("the response was cut by the shutdown: %v, %d bytes", err, len(head)+len(rest))
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := c.ListBuckets(e.ctx, &s3.ListBucketsInput{}); err == nil {
		t.Fatal("a stopped gateway served a request")
	}
}

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// send does req (a GET of url when nil) and reads its response.
func send(t *testing.T, req *http.Request, url string) (*http.Response, []byte) {
	t.Helper()
	if req == nil {
		var err error
		if req, err = http.NewRequest(http.MethodGet, url, nil); err != nil {
			t.Fatal(err)
		}
	}
	return sendOn(t, http.DefaultClient, req)
}

// sendOn does req with cl and reads its response.
func sendOn(t *testing.T, cl *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// sendTruncated sends req over a connection of its own with only the
// first n bytes of its body, half-closes it, and reads the response.
func sendTruncated(t *testing.T, req *http.Request, n int) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	size := req.ContentLength
	req.Body = io.NopCloser(bytes.NewReader(body[:n]))
	req.ContentLength = int64(n)
	req.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	// Write sends the headers and n bytes under the full Content-Length.
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatal(err)
	}
	wire := bytes.Replace(buf.Bytes(), []byte("Content-Length: "+strconv.Itoa(n)), []byte("Content-Length: "+strconv.FormatInt(size, 10)), 1)
	if _, err := conn.Write(wire); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestMultipart(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "mpu")
	b, k := aws.String("mpu"), aws.String("big/obj")
	cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: k, ContentType: aws.String("text/x-parts"),
		Metadata: map[string]string{"m": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.UploadId
	parts := [][]byte{osdtest.Payload(5<<20, 7), osdtest.Payload(5<<20, 8), osdtest.Payload(1000, 9)}
	var done []types.CompletedPart
	for i, p := range parts {
		up, err := e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: b, Key: k, UploadId: id, PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
		if err != nil {
			t.Fatal(err)
		}
		if *up.ETag != `"`+md5hex(p)+`"` {
			t.Fatalf("part %d ETag %s, want its MD5", i+1, *up.ETag)
		}
		done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: up.ETag})
	}
	lp, err := e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: k, UploadId: id, MaxParts: aws.Int32(2)})
	if err != nil || len(lp.Parts) != 2 || !*lp.IsTruncated || *lp.NextPartNumberMarker != "2" || *lp.Parts[1].Size != 5<<20 {
		t.Fatalf("ListParts: %v %+v", err, lp)
	}
	lp, err = e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: k, UploadId: id, MaxParts: aws.Int32(0)})
	if err != nil || len(lp.Parts) != 0 || *lp.IsTruncated {
		t.Fatalf("ListParts max-parts=0: %v %+v; want an empty page, not truncated", err, lp)
	}
	lp, err = e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: k, UploadId: id, PartNumberMarker: aws.String("2")})
	if err != nil || len(lp.Parts) != 1 || *lp.Parts[0].PartNumber != 3 || *lp.IsTruncated {
		t.Fatalf("ListParts after 2: %v %+v", err, lp)
	}
	other, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: aws.String("big/other")})
	if err != nil {
		t.Fatal(err)
	}
	lu, err := e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: b, Prefix: aws.String("big/")})
	if err != nil || len(lu.Uploads) != 2 || *lu.Uploads[0].Key != "big/obj" || *lu.Uploads[0].UploadId != *id {
		t.Fatalf("ListMultipartUploads: %v %+v", err, lu)
	}
	if _, err := e.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: b, Key: aws.String("big/other"), UploadId: other.UploadId}); err != nil {
		t.Fatal(err)
	}
	_, err = e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: aws.String("big/other"), UploadId: other.UploadId})
	wantCode(t, "parts of an aborted upload", err, "NoSuchUpload", 404)

	// Completing with a wrong ETag, or a small part in the middle, fails
	// and leaves the upload to complete properly.
	bad := slices.Clone(done)
	bad[1].ETag = aws.String(`"` + md5hex([]byte("other")) + `"`)
	_, err = e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: bad}})
	wantCode(t, "wrong part ETag", err, "InvalidPart", 400)
	_, err = e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{done[1], done[0], done[2]}}})
	wantCode(t, "parts out of order", err, "InvalidPartOrder", 400)
	// The order is checked before the parts: the small last part listed
	// before a larger one (parts in the order their uploads finished) is
	// out of order, as on S3, not a part too small.
	_, err = e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{done[0], done[2], done[1]}}})
	wantCode(t, "the small last part listed before another", err, "InvalidPartOrder", 400)
	_, err = e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(9), ETag: done[0].ETag}, done[0]}}})
	wantCode(t, "a part never uploaded listed before another", err, "InvalidPartOrder", 400)
	co, err := e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: done}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(*co.ETag, `-3"`) {
		t.Fatalf("ETag %s, want a multipart one of 3 parts", *co.ETag)
	}
	if want := e.url + "/mpu/big/obj"; co.Location == nil || *co.Location != want {
		t.Fatalf("Location %v, want the object's absolute URL %s", co.Location, want)
	}
	got, out := e.get(t, "mpu", "big/obj", "")
	if !bytes.Equal(got, slices.Concat(parts...)) || *out.ETag != *co.ETag || *out.ContentType != "text/x-parts" || out.Metadata["m"] != "v" {
		t.Fatalf("read back: %d bytes, %+v", len(got), out)
	}
	if r, _ := e.get(t, "mpu", "big/obj", "bytes=5242870-5242889"); !bytes.Equal(r, slices.Concat(parts...)[5242870:5242890]) {
		t.Fatal("a range across parts differs")
	}
	lu, err = e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: b})
	if err != nil || len(lu.Uploads) != 0 {
		t.Fatalf("uploads left: %v %+v", err, lu.Uploads)
	}
	_, err = e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: k, UploadId: id})
	wantCode(t, "parts of a completed upload", err, "NoSuchUpload", 404)
}

// TestPutETagSizes: a single PUT's ETag is its body's MD5 on both sides
// of the size where the MD5 moves from inline to the md5-simd server,
// with and without Content-MD5 (which the gateway checks with an MD5 of
// its own), and a Content-MD5 that is wrong only past the first bytes is
// refused at every size.
func TestPutETagSizes(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "sizes")
	for _, size := range []int{0, 1, 4 << 10, 100 << 10, 128 << 10, 128<<10 + 1, 1 << 20} {
		data := osdtest.Payload(size, uint64(size))
		sum := md5.Sum(data)
		want := fmt.Sprintf("%q", hex.EncodeToString(sum[:]))
		key := fmt.Sprintf("k%d", size)
		if got := aws.ToString(e.put(t, "sizes", key, data).ETag); got != want {
			t.Errorf("%d bytes: ETag %s, want %s", size, got, want)
		}
		out, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("sizes"), Key: aws.String(key + "md5"),
			Body: bytes.NewReader(data), ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))})
		if err != nil {
			t.Fatalf("%d bytes with Content-MD5: %v", size, err)
		}
		if got := aws.ToString(out.ETag); got != want {
			t.Errorf("%d bytes with Content-MD5: ETag %s, want %s", size, got, want)
		}
		if size == 0 {
			continue
		}
		other := bytes.Clone(data)
		other[len(other)-1] ^= 1
		_, err = e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("sizes"), Key: aws.String(key + "bad"),
			Body: bytes.NewReader(other), ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))})
		wantCode(t, fmt.Sprintf("%d bytes, last byte off Content-MD5", size), err, "BadDigest", 400)
	}
}

// TestXMLBodiesTakeBodyMemory: a DeleteObjects body, read whole into
// memory, takes its length of MaxBodyMemory while it is handled, as a
// PUT's does, and gives it back.
func TestXMLBodiesTakeBodyMemory(t *testing.T) {
	var most, last atomic.Int64
	e := newEnvWith(t, func(o *s3gw.Options) {
		o.OnBodyMemory = func(held int64) {
			last.Store(held)
			for m := most.Load(); held > m && !most.CompareAndSwap(m, held); m = most.Load() {
			}
		}
	})
	e.mb(t, "xml")
	ids := make([]types.ObjectIdentifier, 1000)
	for i := range ids {
		ids[i] = types.ObjectIdentifier{Key: aws.String(fmt.Sprintf("%04d", i) + strings.Repeat("k", 1000))}
	}
	if _, err := e.s3.DeleteObjects(e.ctx, &s3.DeleteObjectsInput{Bucket: aws.String("xml"), Delete: &types.Delete{Objects: ids}}); err != nil {
		t.Fatal(err)
	}
	if m, l := most.Load(), last.Load(); m < 1000*1000 || l != 0 {
		t.Fatalf("a 1 MB DeleteObjects body: at most %d bytes of body memory held, %d after", m, l)
	}
}
