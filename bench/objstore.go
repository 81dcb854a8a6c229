package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/sigv4"
)

// objStore is what the object benchmark measures: Osprey's SDK, or any S3
// endpoint (Osprey's gateway, Ceph's RGW, ...), so that one tool measures
// them all with the same workloads.
type objStore interface {
	// makeBucket makes the bucket; made is false when it existed.
	makeBucket(ctx context.Context, bucket string) (made bool, err error)
	put(ctx context.Context, bucket, key string, body []byte) error
	// get reads the object whole.
	get(ctx context.Context, bucket, key string) error
	stat(ctx context.Context, bucket, key string) error
	remove(ctx context.Context, bucket, key string) error
	// list lists up to max keys under prefix after startAfter.
	list(ctx context.Context, bucket, prefix, startAfter string, max int) error
}

// sdkStore is Osprey's Go SDK.
type sdkStore struct{ cl *client.Client }

func (s sdkStore) makeBucket(ctx context.Context, bucket string) (bool, error) {
	err := s.cl.MakeBucket(ctx, bucket)
	if errors.Is(err, client.ErrBucketAlreadyExists) {
		return false, nil
	}
	return err == nil, err
}

func (s sdkStore) put(ctx context.Context, bucket, key string, body []byte) error {
	_, err := s.cl.PutObjectBytes(ctx, bucket, key, body, client.PutOptions{})
	return err
}

// get reads an object whole, as a user of the SDK would.
func (s sdkStore) get(ctx context.Context, bucket, key string) error {
	obj, err := s.cl.GetObject(ctx, bucket, key, client.GetOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	_, err = io.Copy(io.Discard, obj)
	return err
}

func (s sdkStore) stat(ctx context.Context, bucket, key string) error {
	_, err := s.cl.StatObject(ctx, bucket, key)
	return err
}

func (s sdkStore) remove(ctx context.Context, bucket, key string) error {
	return s.cl.RemoveObject(ctx, bucket, key)
}

func (s sdkStore) list(ctx context.Context, bucket, prefix, startAfter string, max int) error {
	for _, err := range s.cl.ListObjects(ctx, bucket, client.ListOptions{Prefix: prefix, StartAfter: startAfter, MaxKeys: max}) {
		if err != nil {
			return err
		}
	}
	return nil
}

// S3Target is an S3 endpoint to measure.
type S3Target struct {
	Endpoint             string // http(s)://host:port
	AccessKey, SecretKey string
	Region               string // default us-east-1
	// SignPayload signs each body's SHA-256, as SDKs do by default over
	// plain HTTP; without it the requests are signed UNSIGNED-PAYLOAD
	// (as warp --disable-sha256-payload), so that neither the client nor
	// the server hashes the body for the signature.
	SignPayload bool
}

// s3Store is an S3 endpoint, path-style: the measured operations through
// the benchmark's own client (s3Client), the run's setup and cleanup
// (CreateBucket, DeleteObjects, DeleteBucket) through aws-sdk-go-v2.
type s3Store struct {
	c    *s3.Client
	fast *s3Client
}

func newS3Store(t S3Target, concurrency int) (s3Store, error) {
	fast, err := newS3Client(t, concurrency)
	if err != nil {
		return s3Store{}, err
	}
	region := t.Region
	if region == "" {
		region = "us-east-1"
	}
	opts := s3.Options{Region: region, BaseEndpoint: aws.String(t.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(t.AccessKey, t.SecretKey, ""),
		// No CRC32 of every body on top: S3 needs no checksum on these calls.
		RequestChecksumCalculation:                aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation:                aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:                          1,
		DisableLogOutputChecksumValidationSkipped: true,
	}
	var fns []func(*s3.Options)
	if !t.SignPayload {
		fns = append(fns, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	}
	return s3Store{c: s3.New(opts, fns...), fast: fast}, nil
}

func (s s3Store) makeBucket(ctx context.Context, bucket string) (bool, error) {
	_, err := s.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if errors.As(err, &owned) || errors.As(err, &exists) {
		return false, nil
	}
	return err == nil, err
}

func (s s3Store) put(ctx context.Context, bucket, key string, body []byte) error {
	err := s.fast.do(ctx, http.MethodPut, bucket, key, "", body, true, nil)
	return err
}

// get reads the object whole (and checks it came whole).
func (s s3Store) get(ctx context.Context, bucket, key string) error {
	err := s.fast.do(ctx, http.MethodGet, bucket, key, "", nil, false, nil)
	return err
}

func (s s3Store) stat(ctx context.Context, bucket, key string) error {
	err := s.fast.do(ctx, http.MethodHead, bucket, key, "", nil, false, nil)
	return err
}

func (s s3Store) remove(ctx context.Context, bucket, key string) error {
	err := s.fast.do(ctx, http.MethodDelete, bucket, key, "", nil, false, nil)
	return err
}

// list is ListObjectsV2; its answer is read, not parsed.
func (s s3Store) list(ctx context.Context, bucket, prefix, startAfter string, max int) error {
	// The canonical query: parameters sorted by name, SigV4-escaped.
	q := "list-type=2&max-keys=" + strconv.Itoa(max) + "&prefix=" + sigv4.Escape(prefix, false) +
		"&start-after=" + sigv4.Escape(startAfter, false)
	err := s.fast.do(ctx, http.MethodGet, bucket, "", q, nil, false, nil)
	return err
}

// close closes the client's connections.
func (s s3Store) close() { s.fast.close() }

// keysUnder lists the keys under prefix in bucket: none when the bucket
// does not exist.
func (s s3Store) keysUnder(ctx context.Context, bucket, prefix string) (map[string]bool, error) {
	keys := map[string]bool{}
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if code := ""; err != nil {
			if ae, ok := errors.AsType[smithy.APIError](err); ok {
				code = ae.ErrorCode()
			}
			if code == "NoSuchBucket" {
				return keys, nil
			}
			return nil, err
		}
		for _, o := range out.Contents {
			keys[aws.ToString(o.Key)] = true
		}
	}
	return keys, nil
}

// cleanup deletes keys (by DeleteObjects, 100 a request, each tried up to
// 3 times), and the bucket when the run made it. Smaller batches than S3's
// 1000: on a loaded host a DeleteObjects of 1000 keys to RGW once failed
// while its answer was being read.
func (s s3Store) cleanup(ctx context.Context, bucket string, keys []string, bucketMade bool) error {
	for len(keys) > 0 {
		n := min(len(keys), 100)
		ids := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			ids[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		out, err := s.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}}, func(o *s3.Options) { o.RetryMaxAttempts = 3 })
		if err != nil {
			return err
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("deleting %s: %s: %s (and %d more)", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors)-1)
		}
		keys = keys[n:]
	}
	if !bucketMade {
		return nil
	}
	_, err := s.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}, func(o *s3.Options) { o.RetryMaxAttempts = 3 })
	return err
}
