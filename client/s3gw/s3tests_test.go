package s3gw_test

// Cases of ceph/s3-tests (s3tests/functional/test_s3.py), ported to
// aws-sdk-go-v2 against the gateway: the ones that cover what the gateway
// serves (docs/s3.md, "Conformance"). Each subtest is named after the
// s3-tests function it ports, less its test_ prefix, so a failure here
// reads as the same failure there. One cluster and gateway serve them all;
// each case makes buckets of its own.

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// s3testsCase is one ported case: run gets the shared gateway.
type s3testsCase struct {
	name string
	run  func(t *testing.T, e *env)
}

func TestS3Tests(t *testing.T) {
	e := newEnv(t)
	for _, family := range []struct {
		name  string
		cases []s3testsCase
	}{
		{"Listing", s3testsListing},
		{"Buckets", s3testsBuckets},
		{"Objects", s3testsObjects},
		{"Copy", s3testsCopy},
		{"Multipart", s3testsMultipart},
	} {
		t.Run(family.name, func(t *testing.T) {
			for _, c := range family.cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, e) })
			}
		})
	}
}

var s3testsBucketSeq atomic.Int64

// newBucket makes a bucket no other case uses (s3-tests' get_new_bucket).
func (e *env) newBucket(t *testing.T) string {
	t.Helper()
	name := e.bucketName()
	e.mb(t, name)
	return name
}

// bucketName is a fresh name, not made (get_new_bucket_name).
func (e *env) bucketName() string {
	return fmt.Sprintf("s3t-%d", s3testsBucketSeq.Add(1))
}

// createObjects is s3-tests' _create_objects: a new bucket holding keys,
// each with its own name as its body, put 16 at a time.
func (e *env) createObjects(t *testing.T, keys ...string) string {
	t.Helper()
	bucket := e.newBucket(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	sem := make(chan struct{}, 16)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader([]byte(k))})
			if err != nil {
				errs <- fmt.Errorf("put %q: %w", k, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return bucket
}

// wantStrings fails unless got is want (nil and empty alike).
func wantStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
		t.Fatalf("%s: %q, want %q", what, got, want)
	}
}

// wantPtr fails unless p holds want, or is nil when want is nil.
func wantPtr[T comparable](t *testing.T, what string, p *T, want *T) {
	t.Helper()
	switch {
	case p == nil && want == nil:
	case p == nil || want == nil:
		t.Fatalf("%s: %v, want %v", what, deref(p), deref(want))
	case *p != *want:
		t.Fatalf("%s: %v, want %v", what, *p, *want)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "<absent>"
	}
	return *p
}
