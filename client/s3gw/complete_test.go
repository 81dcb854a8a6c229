package s3gw_test

import (
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// A CompleteMultipartUpload sent several times at once (a client retrying
// an answer it did not wait for) completes the upload once: the object
// stays readable. Each repeat that found the upload record still there
// used to complete it again and, as the new object replaced the old, delete
// the parts that both are made of.
func TestCompleteMultipartUploadRepeatedAtOnce(t *testing.T) {
	e := newEnv(t)
	for round := range 4 {
		b := e.newBucket(t)
		id, data, parts := e.mpUpload(t, b, "k", 5*mib+1, 5*mib, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				_, err := e.completeErr(b, "k", id, parts)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: a repeated completion: %v", round, err)
			}
		}
		e.wantObject(t, b, "k", data, "", nil)
	}
}

// TestCompleteChecksums: a CompleteMultipartUpload's x-amz-checksum-crc32c
// is the whole object's, checked against the parts' CRC32Cs combined, not
// against the request's XML (which refused every right one with
// BadDigest); a part's ChecksumCRC32C in the XML is checked against the
// part's. A refused completion leaves the upload as it was.
func TestCompleteChecksums(t *testing.T) {
	e := newEnv(t)
	b := e.newBucket(t)
	const partSize = 5 * mib
	id, data, parts := e.mpUpload(t, b, "k", 2*partSize+7, partSize, nil)
	b64 := func(p []byte) *string {
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
		return aws.String(base64.StdEncoding.EncodeToString(sum[:]))
	}
	var out *s3.CompleteMultipartUploadOutput
	complete := func(whole *string, partSums ...*string) error {
		ps := slices.Clone(parts)
		for i, s := range partSums {
			ps[i].ChecksumCRC32C = s
		}
		var err error
		out, err = e.s3.CompleteMultipartUpload(e.ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(b), Key: aws.String("k"),
			UploadId: aws.String(id), MultipartUpload: &types.CompletedMultipartUpload{Parts: ps},
			ChecksumCRC32C: whole, ChecksumType: types.ChecksumTypeFullObject})
		return err
	}
	wantCode(t, "a wrong whole-object CRC32C", complete(b64(data[1:])), "BadDigest", 400)
	wantCode(t, "a malformed one", complete(aws.String("AAAA")), "InvalidRequest", 400)
	wantCode(t, "a wrong part CRC32C", complete(nil, b64(data[:partSize]), b64(data[:1])), "InvalidPart", 400)
	if _, err := e.s3.ListParts(e.ctx, &s3.ListPartsInput{Bucket: aws.String(b), Key: aws.String("k"), UploadId: aws.String(id)}); err != nil {
		t.Fatalf("the upload after refused completions: %v", err)
	}
	if err := complete(b64(data), b64(data[:partSize]), b64(data[partSize:2*partSize]), b64(data[2*partSize:])); err != nil {
		t.Fatalf("complete with the right CRC32Cs: %v", err)
	}
	// The result says the whole object's CRC32C, as AWS answers a
	// FULL_OBJECT completion.
	if aws.ToString(out.ChecksumCRC32C) != *b64(data) || out.ChecksumType != types.ChecksumTypeFullObject {
		t.Fatalf("the completion's checksum: %q %q", aws.ToString(out.ChecksumCRC32C), out.ChecksumType)
	}
	// A COMPOSITE completion (minio-go's default: the checksum of the
	// parts' checksums, without -N) is not answered as the whole
	// object's, which it is not.
	id2, _, parts2 := e.mpUpload(t, b, "k2", partSize+7, partSize, nil)
	out2, err := e.s3.CompleteMultipartUpload(e.ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(b), Key: aws.String("k2"),
		UploadId: aws.String(id2), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts2},
		ChecksumCRC32C: aws.String("H7P4jw=="), ChecksumType: types.ChecksumTypeComposite})
	if err != nil || out2.ChecksumType == types.ChecksumTypeFullObject || out2.ChecksumCRC32C != nil {
		t.Fatalf("a COMPOSITE completion: %v, answered %q %q", err, aws.ToString(out2.ChecksumCRC32C), out2.ChecksumType)
	}
	e.wantObject(t, b, "k", data, "", nil)
}
