package s3gw_test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestLargePut puts a body above 64 MiB, which one op cannot carry: the
// gateway streams it to the cluster in pieces, and it is still what S3
// makes of a single PUT: its ETag the MD5 of the body, no parts (a GET of
// partNumber=1 is all of it, without x-amz-mp-parts-count), its CRC32C
// the body's.
func TestLargePut(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 65 MiB object")
	}
	e := newEnv(t)
	e.mb(t, "large")
	data := osdtest.Payload(65<<20+7, 3)
	out := e.put(t, "large", "obj", data)
	if *out.ETag != `"`+md5hex(data)+`"` {
		t.Fatalf("ETag %s: want the body's MD5 %s", *out.ETag, md5hex(data))
	}
	b, _ := e.get(t, "large", "obj", "")
	if !bytes.Equal(b, data) {
		t.Fatal("read back differs")
	}
	g, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("large"), Key: aws.String("obj"), PartNumber: aws.Int32(1),
		ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	g.Body.Close()
	if *g.ContentLength != int64(len(data)) || g.PartsCount != nil || *g.ETag != *out.ETag {
		t.Fatalf("partNumber=1 of a single PUT: %d bytes, parts count %d, ETag %s", *g.ContentLength, aws.ToInt32(g.PartsCount), *g.ETag)
	}
	h, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String("large"), Key: aws.String("obj"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil || *h.ChecksumCRC32C != *crc32cOf(data) {
		t.Fatalf("HEAD's CRC32C: %v %v, want %s", err, h.ChecksumCRC32C, *crc32cOf(data))
	}
	// A body that fails its Content-MD5 at its last byte, its pieces
	// sent already: refused, the object as it was, no upload left.
	other := osdtest.Payload(len(data), 4)
	_, err = e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("large"), Key: aws.String("obj"), Body: bytes.NewReader(other),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(md5sum(data)))})
	wantCode(t, "a large PUT with a wrong Content-MD5", err, "BadDigest", 400)
	if b, _ := e.get(t, "large", "obj", ""); !bytes.Equal(b, data) {
		t.Fatal("a refused large PUT changed the object")
	}
	ups, err := e.s3.ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("large")})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("uploads left by a refused large PUT: %v %+v", err, ups.Uploads)
	}
}

func md5sum(b []byte) []byte { s := md5.Sum(b); return s[:] }

// TestLargePart uploads a part above 64 MiB (in pieces, through the SDK)
// beside a small one: the part's ETag is its MD5, ListParts gives its
// size, the object's ETag is S3's multipart one of the two parts' MD5s,
// and a GET of each partNumber is that part. An upload of the part again
// that fails leaves it as it was; one that succeeds, smaller, replaces it.
func TestLargePart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 65 MiB part")
	}
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "parts")
	bkt, key := aws.String("parts"), aws.String("mp")
	parts := [][]byte{osdtest.Payload(65<<20+5, 7), osdtest.Payload(3<<20, 8)}
	upload := func(t *testing.T, parts [][]byte) (*string, []types.CompletedPart) {
		t.Helper()
		cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bkt, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		var done []types.CompletedPart
		for i, p := range parts {
			up, err := e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: bkt, Key: key, UploadId: cr.UploadId,
				PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
			if err != nil {
				t.Fatalf("part %d of %d bytes: %v", i+1, len(p), err)
			}
			if *up.ETag != `"`+md5hex(p)+`"` {
				t.Fatalf("part %d's ETag %s, want its MD5 %s", i+1, *up.ETag, md5hex(p))
			}
			done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: up.ETag})
		}
		return cr.UploadId, done
	}
	id, done := upload(t, parts)
	lp, err := e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: bkt, Key: key, UploadId: id})
	if err != nil || len(lp.Parts) != 2 || *lp.Parts[0].Size != int64(len(parts[0])) || *lp.Parts[0].ETag != *done[0].ETag {
		t.Fatalf("ListParts: %v %+v", err, lp)
	}
	// Part 1 again, refused at its last byte (its pieces sent): the part
	// is as it was.
	_, err = e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: bkt, Key: key, UploadId: id, PartNumber: aws.Int32(1),
		Body: bytes.NewReader(osdtest.Payload(len(parts[0]), 10)), ContentMD5: aws.String(base64.StdEncoding.EncodeToString(md5sum(parts[0])))})
	wantCode(t, "a large part with a wrong Content-MD5", err, "BadDigest", 400)
	out, err := e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bkt, Key: key, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + multipartETag(parts...) + `"`; *out.ETag != want {
		t.Fatalf("the object's ETag %s, want %s", *out.ETag, want)
	}
	if got, _ := e.get(t, "parts", "mp", ""); !bytes.Equal(got, slices.Concat(parts...)) {
		t.Fatal("the object differs")
	}
	for i, p := range parts {
		g, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: key, PartNumber: aws.Int32(int32(i + 1))})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(g.Body)
		g.Body.Close()
		if err != nil || !bytes.Equal(b.Bytes(), p) || *g.PartsCount != 2 {
			t.Fatalf("partNumber=%d: %v, %d bytes (equal %v), parts count %d", i+1, err, b.Len(), bytes.Equal(b.Bytes(), p), aws.ToInt32(g.PartsCount))
		}
	}
	// UploadPartCopy of the whole object, 68 MiB, makes a part in pieces
	// too.
	cp, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bkt, Key: aws.String("cp")})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: bkt, Key: aws.String("cp"), UploadId: cp.UploadId,
		PartNumber: aws.Int32(1), CopySource: aws.String("parts/mp")})
	if err != nil || *pc.CopyPartResult.ETag != `"`+md5hex(slices.Concat(parts...))+`"` {
		t.Fatalf("UploadPartCopy of 68 MiB: %v, want ETag %s", err, md5hex(slices.Concat(parts...)))
	}
	if _, err := e.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: bkt, Key: aws.String("cp"), UploadId: cp.UploadId}); err != nil {
		t.Fatal(err)
	}
	// A large part uploaded again as a small one, in a new upload.
	small := [][]byte{osdtest.Payload(6<<20, 9), parts[1]}
	id, done = upload(t, [][]byte{parts[0]})
	up, err := e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: bkt, Key: key, UploadId: id, PartNumber: aws.Int32(1), Body: bytes.NewReader(small[0])})
	if err != nil {
		t.Fatal(err)
	}
	done[0].ETag = up.ETag
	up, err = e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: bkt, Key: key, UploadId: id, PartNumber: aws.Int32(2), Body: bytes.NewReader(small[1])})
	if err != nil {
		t.Fatal(err)
	}
	done = append(done, types.CompletedPart{PartNumber: aws.Int32(2), ETag: up.ETag})
	if _, err := e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bkt, Key: key, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.get(t, "parts", "mp", ""); !bytes.Equal(got, slices.Concat(small...)) {
		t.Fatal("the object of the part uploaded again differs")
	}
}

// multipartETag is S3's ETag of an object of these parts: the MD5 of
// their MD5s, "-" and their count.
func multipartETag(parts ...[]byte) string {
	var sums []byte
	for _, p := range parts {
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
	}
	s := md5.Sum(sums)
	return hex.EncodeToString(s[:]) + "-" + strconv.Itoa(len(parts))
}
