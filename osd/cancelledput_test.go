package osd_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd"
)

// TestCancelledPutLeavesNoUpload: a PutObject in parts whose caller gives
// up while the OSD makes its upload (a Ctrl-C at that moment) leaves no
// upload behind, neither a user's multipart upload nor the SDK's internal
// one of a whole-ETag put: the SDK waits for the create's answer and
// aborts what it made, and the put fails with the caller's error.
func TestCancelledPutLeavesNoUpload(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	cl := c.Client(t, nil)
	ctx := ctxT(t, time.Minute)
	if err := cl.MakeBucket(ctx, "ctrlc"); err != nil {
		t.Fatal(err)
	}
	defer osd.UploadCreating.Set(nil)
	body := osdtest.Payload(2*ops.MinPartSize+1000, 1)
	for _, whole := range []bool{false, true} {
		pctx, cancel := context.WithCancel(ctx)
		var created atomic.Int32
		osd.UploadCreating.Set(func(_ uint32, bucket, _ string) {
			if bucket == "ctrlc" {
				created.Add(1)
				cancel()
			}
		})
		_, err := cl.PutObject(pctx, "ctrlc", "obj", bytes.NewReader(body), int64(len(body)),
			client.PutOptions{PartSize: ops.MinPartSize, WholeETag: whole})
		osd.UploadCreating.Set(nil)
		cancel()
		if !errors.Is(err, context.Canceled) || created.Load() == 0 {
			t.Fatalf("whole ETag %v: a put cancelled as its upload was made: %v (%d uploads made)", whole, err, created.Load())
		}
		left, err := cl.AbortStaleUploads(ctx, "ctrlc", client.StaleUploadOptions{Age: -1, All: true, DryRun: true})
		if err != nil || len(left) != 0 {
			t.Fatalf("whole ETag %v: the cancelled put left the uploads %+v (%v)", whole, left, err)
		}
	}
	if _, err := cl.StatObject(ctx, "ctrlc", "obj"); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("the cancelled puts made an object: %v", err)
	}
}
