package s3gw_test

import (
	"bytes"
	"io"
	"net/url"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestMinioGo: minio-go, MinIO's SDK, puts and gets through the gateway,
// with its trailing checksums on (TrailingHeaders, which MinIO's own
// tools set): a single put and a multipart one, their aws-chunked bodies
// ending each trailer line in LF then CRLF, which the gateway once
// refused (IncompleteBody) on every part.
func TestMinioGo(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "minio")
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(testAccess, testSecret, ""), Region: "us-east-1", TrailingHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		size int
		opts minio.PutObjectOptions
	}{
		{"single", 1 << 20, minio.PutObjectOptions{Checksum: minio.ChecksumCRC32C}},
		{"multipart", 11 << 20, minio.PutObjectOptions{PartSize: 5 << 20, Checksum: minio.ChecksumCRC32C}},
	} {
		data := osdtest.Payload(c.size, 61)
		if _, err := mc.PutObject(e.ctx, "minio", c.name, bytes.NewReader(data), int64(len(data)), c.opts); err != nil {
			t.Fatalf("minio-go %s put with trailing checksums: %v", c.name, err)
		}
		obj, err := mc.GetObject(e.ctx, "minio", c.name, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("minio-go %s get: %d bytes, %v", c.name, len(got), err)
		}
	}
}
