package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestClientRetriesPeeringPG: a PG that answers SERVICE_UNAVAILABLE (it
// is peering after a map change, as after a mon takeover) makes the
// client retry with backoff, within the op's deadline, not fail: the get
// goes on until the PG serves it.
func TestClientRetriesPeeringPG(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4})
	cl := c.Client(t, nil)
	body := osdtest.Payload(100, 1)
	if err := cl.MakeBucket(ctx, "retry"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "retry", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	o := c.OSDs[0]
	gets := func() uint64 {
		for _, op := range o.Stats().Ops {
			if op.Op == "get_object" {
				return op.Count
			}
		}
		return 0
	}
	before := gets()
	o.SetPeeringForTest(true)
	type result struct {
		got []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, _, err := osdtest.Get(ctx, cl, "retry", "k", client.GetOptions{})
		done <- result{got, err}
	}()
	// Each refused attempt is an answered get: three of them, and the
	// get is still going.
	osdtest.Eventually(t, 30*time.Second, "the peering PG to refuse the get three times", func() bool {
		select {
		case r := <-done:
			t.Fatalf("the get ended while its PG was peering: %v", r.err)
		default:
		}
		return gets() >= before+3
	})
	o.SetPeeringForTest(false)
	r := <-done
	if r.err != nil || !bytes.Equal(r.got, body) {
		t.Fatalf("get once the PG peered: %d bytes, %v; want the %d put", len(r.got), r.err, len(body))
	}
}

// TestBucketReadsWaitForMetaPeering: the meta PG's primary answers
// HEAD_BUCKET and LIST_BUCKETS from its bucket records only once it has
// peered the meta PG: a new primary's records may lack buckets created
// while it was out, and NoSuchBucket would end the client's retries.
func TestBucketReadsWaitForMetaPeering(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4})
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "peered"); err != nil {
		t.Fatal(err)
	}
	quick := c.Client(t, func(o *client.Options) { o.RetryFor = 100 * time.Millisecond })
	o := c.OSDs[0]
	o.SetPeeringForTest(true)
	if _, err := quick.StatBucket(ctx, "nosuch"); !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("head bucket while the meta PG peers: %v, want ServiceUnavailable", err)
	}
	if _, err := quick.ListBuckets(ctx); !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("list buckets while the meta PG peers: %v, want ServiceUnavailable", err)
	}
	o.SetPeeringForTest(false)
	if _, err := quick.StatBucket(ctx, "nosuch"); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Fatalf("head of a missing bucket once peered: %v, want NoSuchBucket", err)
	}
	if _, err := quick.StatBucket(ctx, "peered"); err != nil {
		t.Fatalf("head bucket once peered: %v", err)
	}
}

// TestUploadRecordReadWaitsForPeering: a part's upload is looked up at its
// record's primary; while that PG peers (its primary back from a restart,
// say, lacking a record made while it was away) the part is refused
// ServiceUnavailable, which the client retries, not NoSuchUpload, which
// ends its upload. The part goes raw to the OSD, which leads both PGs.
func TestUploadRecordReadWaitsForPeering(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4})
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "uploads"); err != nil {
		t.Fatal(err)
	}
	const unknown = "0123456789abcdef0123456789abcdef"
	// Only the record's PG peers (its key is bucket/key/uploadid, in the
	// multipart bucket); the part's own PG is served.
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	partPG := ops.StoredPG(pool, ops.MultipartBucket, ops.PartKey(unknown, 1))
	key, recPG := "", partPG
	for i := 0; recPG == partPG; i++ {
		key = fmt.Sprintf("k%d", i)
		recPG = ops.StoredPG(pool, ops.MultipartBucket, ops.UploadKey("uploads", key, unknown))
	}
	call := rawCaller(ctx, t, c, 0)
	part := func() osdpb.Status {
		t.Helper()
		front, _ := proto.Marshal(&osdpb.UploadRequest{Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: partPG,
			Req: &osdpb.ReqID{Client: 7, Tid: uint64(time.Now().UnixNano())}},
			Bucket: "uploads", Key: key, UploadId: unknown, PartNumber: 1, Meta: &osdpb.ObjectMeta{Size: 1}})
		var rep osdpb.UploadReply
		if err := call(osdpb.MsgType_MSG_UPLOAD_PART, front, []byte("x"), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Header.GetStatus()
	}
	o := c.OSDs[0]
	o.SetPGPeeringForTest(pool.Id, recPG, true)
	if st := part(); st != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Fatalf("a part while its upload record's PG peers: %v, want SERVICE_UNAVAILABLE", st)
	}
	o.SetPGPeeringForTest(pool.Id, recPG, false)
	if st := part(); st != osdpb.Status_NO_SUCH_UPLOAD {
		t.Fatalf("a part of an unknown upload once peered: %v, want NO_SUCH_UPLOAD", st)
	}
}
