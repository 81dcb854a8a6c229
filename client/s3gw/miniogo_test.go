package s3gw_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
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

// TestPutChecksumAnswers: a PUT answers its checksum with its type,
// FULL_OBJECT, as S3 does; one that names CRC32C without a value (minio-go's
// automatic checksum over HTTP) gets the CRC32C the gateway computed.
func TestPutChecksumAnswers(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "sums")
	data := osdtest.Payload(3000, 62)
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	want := base64.StdEncoding.EncodeToString(c[:])
	for _, h := range []map[string]string{{"x-amz-checksum-crc32c": want}, {"x-amz-checksum-algorithm": "CRC32C"}} {
		resp, body := send(t, signedWith(t, http.MethodPut, e.url+"/sums/k", data, h), "")
		if resp.StatusCode != 200 || resp.Header.Get("x-amz-checksum-crc32c") != want || resp.Header.Get("x-amz-checksum-type") != "FULL_OBJECT" {
			t.Fatalf("PUT with %v: %d, checksum %q type %q\n%s", h, resp.StatusCode, resp.Header.Get("x-amz-checksum-crc32c"), resp.Header.Get("x-amz-checksum-type"), body)
		}
	}
	resp, _ := send(t, signed(t, http.MethodPut, e.url+"/sums/k", data), "")
	if resp.Header.Get("x-amz-checksum-crc32c") != "" || resp.Header.Get("x-amz-checksum-type") != "" {
		t.Fatalf("a PUT that asked for no checksum answers one: %v", resp.Header)
	}
	// CreateMultipartUpload says back the checksum its parts will carry.
	up, err := e.s3.CreateMultipartUpload(e.ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("sums"), Key: aws.String("mp"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumType: types.ChecksumTypeFullObject})
	if err != nil || up.ChecksumAlgorithm != types.ChecksumAlgorithmCrc32c || up.ChecksumType != types.ChecksumTypeFullObject {
		t.Fatalf("CreateMultipartUpload with CRC32C, FULL_OBJECT: %+v, %v", up, err)
	}
	// A GET of one part with checksum mode gets that part's CRC32C,
	// which the SDK checks the part's bytes against.
	parts := [][]byte{osdtest.Payload(5<<20, 64), osdtest.Payload(1000, 65)}
	var done []types.CompletedPart
	for i, p := range parts {
		out, err := e.s3.UploadPart(e.ctx, &s3.UploadPartInput{Bucket: aws.String("sums"), Key: aws.String("mp"), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	if _, err := e.s3.CompleteMultipartUpload(e.ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("sums"), Key: aws.String("mp"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		part int32
		data []byte
	}{{"mp", 2, parts[1]}, {"mp", 1, parts[0]}, {"k", 1, data}} {
		g, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("sums"), Key: aws.String(c.key), PartNumber: aws.Int32(c.part),
			ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(g.Body)
		g.Body.Close()
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc32.Checksum(c.data, crc32.MakeTable(crc32.Castagnoli)))
		if err != nil || !bytes.Equal(got, c.data) || aws.ToString(g.ChecksumCRC32C) != base64.StdEncoding.EncodeToString(sum[:]) {
			t.Fatalf("%s part %d with checksum mode: %v, %d bytes, CRC32C %q", c.key, c.part, err, len(got), aws.ToString(g.ChecksumCRC32C))
		}
	}
}
