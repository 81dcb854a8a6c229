package osd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd"
)

// TestPutRacingBucketDeleteIsRefused: a put that comes between a bucket
// delete's check that the bucket is empty and the delete itself is refused
// (retriably) while the bucket is fenced, instead of being acknowledged
// and then removed with the bucket, both calls succeeding; and once the
// delete failed or went, puts are answered as S3 would.
func TestPutRacingBucketDeleteIsRefused(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	racer := c.Client(t, func(o *client.Options) { o.RetryFor = 300 * time.Millisecond })
	if err := cl.MakeBucket(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	var putErr error
	raced := false
	osd.BucketDeleteChecked.Set(func(bucket string) {
		if bucket == "doomed" && !raced {
			raced = true
			_, putErr = osdtest.Put(ctx, racer, "doomed", "late", []byte("acknowledged?"), client.PutOptions{})
		}
	})
	t.Cleanup(func() { osd.BucketDeleteChecked.Set(nil) })
	delErr := cl.RemoveBucket(ctx, "doomed")
	if !raced {
		t.Fatal("the delete never reached its check")
	}
	if putErr == nil && delErr == nil {
		t.Fatal("a put between the delete's check and the delete was acknowledged, and the delete succeeded: the object is gone")
	}
	if delErr != nil || !errors.Is(putErr, client.ErrServiceUnavailable) {
		t.Fatalf("delete: %v; the racing put: %v, want ServiceUnavailable (fenced)", delErr, putErr)
	}
	// Deleted: puts find no bucket (the fences came down with it), and a
	// bucket made again under the name takes them at once.
	if _, err := osdtest.Put(ctx, racer, "doomed", "after", []byte("x"), client.PutOptions{}); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Fatalf("a put after the delete: %v, want NoSuchBucket", err)
	}
	if err := cl.MakeBucket(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "doomed", "again", []byte("x"), client.PutOptions{}); err != nil {
		t.Fatalf("a put to the bucket made again: %v", err)
	}
	// A delete that finds the bucket not empty lifts its fences.
	if err := cl.RemoveBucket(ctx, "doomed"); !errors.Is(err, client.ErrBucketNotEmpty) {
		t.Fatalf("delete of a bucket with an object: %v", err)
	}
	if _, err := osdtest.Put(ctx, cl, "doomed", "more", []byte("x"), client.PutOptions{}); err != nil {
		t.Fatalf("a put after a delete refused as not empty: %v", err)
	}
}
