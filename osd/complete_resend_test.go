package osd_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestCompleteResendRemovesRecord: a completion whose first attempt timed
// out at a replica (applied, not acked) and whose retry is answered from
// the PG log as a resend still removes the upload's record, so the upload
// is no longer listed and an abort cannot take the object's parts.
func TestCompleteResendRemovesRecord(t *testing.T) {
	c, gates := heldSyncCluster(t)
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "mpb"); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	id, err := cl.NewMultipartUpload(ctx, "mpb", "obj", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(1000, 1)
	part, err := cl.PutObjectPart(ctx, "mpb", "obj", id, 1, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "mpb", "obj")
	set := c.Map.ActingSet(pool.Id, pg)
	call := rawCaller(ctx, t, c, set[0])
	complete := func(attempt uint32) *osdpb.UploadReply {
		t.Helper()
		front, _ := proto.Marshal(&osdpb.UploadRequest{Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg,
			Req: &osdpb.ReqID{Client: 4343, Tid: 3}, Attempt: attempt}, Bucket: "mpb", Key: "obj", UploadId: id,
			Parts: []*osdpb.PartRef{{Number: 1, Etag: part.ETag}}})
		var rep osdpb.UploadReply
		if err := call(osdpb.MsgType_MSG_COMPLETE_UPLOAD, front, nil, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	gates[set[1]].Hold()
	defer gates[set[1]].Release()
	if rep := complete(0); rep.Header.GetStatus() != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Fatalf("the first attempt, its replica held: %v, want SERVICE_UNAVAILABLE (RepTimeout)", rep.Header)
	}
	gates[set[1]].Release()
	var rep *osdpb.UploadReply
	osdtest.Eventually(t, 30*time.Second, "the resend answered", func() bool {
		rep = complete(1)
		return rep.Header.GetStatus() != osdpb.Status_SERVICE_UNAVAILABLE
	})
	if rep.Header.GetStatus() != osdpb.Status_OK {
		t.Fatalf("the resend: %v", rep.Header)
	}
	rec := ops.UploadKey("mpb", "obj", id)
	osdtest.Eventually(t, 20*time.Second, "the upload's record removed", func() bool {
		_, err := c.OSDs[set[0]].Store().Head(ctx, ops.MultipartBucket, rec)
		return errors.Is(err, store.ErrNoSuchKey)
	})
	if got, _, err := osdtest.Get(ctx, cl, "mpb", "obj", client.GetOptions{}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object: %d bytes, %v", len(got), err)
	}
}

// TestAbortOfCompletedUpload: an upload record that outlived its
// completion (its removal failed) cannot be aborted: the abort answers
// NoSuchUpload, as S3 does, and the object's parts stay.
func TestAbortOfCompletedUpload(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "mpb"); err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "mpb", "obj", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(1000, 2)
	part, err := cl.PutObjectPart(ctx, "mpb", "obj", id, 1, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "mpb", "obj")
	rec := ops.UploadKey("mpb", "obj", id)
	recEntry, err := c.OSDs[c.Map.ActingSet(pool.Id, pg)[0]].Store().Head(ctx, ops.MultipartBucket, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "mpb", "obj", id, []client.CompletePart{{PartNumber: 1, ETag: part.ETag}}); err != nil {
		t.Fatal(err)
	}
	// The record comes back on the primary, as if its removal had failed.
	sid, _ := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	primary := c.OSDs[c.Map.ActingSet(pool.Id, pg)[0]]
	if err := primary.InstallForTest(ctx, sid, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: ops.MultipartBucket, Key: rec, Meta: recEntry}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.AbortMultipartUpload(ctx, "mpb", "obj", id); !errors.Is(err, ops.ErrNoSuchUpload) {
		t.Fatalf("abort of a completed upload: %v, want NoSuchUpload", err)
	}
	if got, _, err := osdtest.Get(ctx, cl, "mpb", "obj", client.GetOptions{}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object after the abort: %d bytes, %v", len(got), err)
	}
}
