package osd_test

import (
	"errors"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestRecoveredRecordAfterBucketDelete: a recovery copies an object whose
// bucket record its OSD lacks, and asks the meta PG's primary for it. If
// the OSD then catches up on the record and applies the bucket's delete
// before the recovery installs what it was told, the record must not come
// back: the OSD would hold a bucket the cluster deleted, outside the meta
// PG's log. The object goes with it.
func TestRecoveredRecordAfterBucketDelete(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	metaPrimary, _ := c.Map.Primary(pool.Id, placement.MetaPG)
	x := (metaPrimary + 1) % uint32(len(c.OSDs))
	o := c.OSDs[x]
	if err := cl.MakeBucket(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	// The install below asks the meta PG's primary, which answers once
	// its peers answered a ping (read leases); the client retries till then.
	if ok, err := cl.BucketExists(ctx, "doomed"); err != nil || !ok {
		t.Fatalf("bucket exists: %v %v", ok, err)
	}
	info, err := o.Store().HeadBucket(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	// x's copy lacks the record, as one the meta PG has not caught up yet.
	dropRecord := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE_BUCKET, Bucket: "doomed"}
	if err := o.Store().InstallObject(ctx, placement.MetaPG, dropRecord, nil); err != nil {
		t.Fatal(err)
	}
	var seed uint32
	for p := range c.Map.PGsOf(pool.Id, x) {
		seed = p
		break
	}
	sid, err := placement.PGID{Pool: pool.Id, Seed: seed}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	key, body := keyInPG(t, pool, "doomed", seed, ""), []byte("copied")
	e := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: "doomed", Key: key, Version: &osdpb.Version{Epoch: 1, Seq: 1},
		Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}}

	answered, goOn := make(chan struct{}), make(chan struct{})
	var answerOnce, goOnce sync.Once
	osd.BucketAnswered.Set(func(id uint32, bucket string) {
		if id == x && bucket == "doomed" {
			answerOnce.Do(func() {
				close(answered)
				<-goOn
			})
		}
	})
	t.Cleanup(func() {
		osd.BucketAnswered.Set(nil)
		goOnce.Do(func() { close(goOn) })
	})
	done := make(chan error, 1)
	go func() { done <- o.InstallForTest(ctx, sid, e, body) }()
	select {
	case <-answered:
	case err := <-done:
		t.Fatalf("the install ended (%v) without asking the meta PG's primary", err)
	}
	// Meanwhile x catches up on the record, and the bucket is deleted.
	catchUp := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "doomed", Meta: &osdpb.ObjectMeta{MtimeUnixNano: info.CreatedUnixNano}}
	if err := o.Store().InstallObject(ctx, placement.MetaPG, catchUp, nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveBucket(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	osdtest.Eventually(t, 30*time.Second, "osd.x to apply the bucket's delete", func() bool {
		_, err := o.Store().HeadBucket(ctx, "doomed")
		return errors.Is(err, store.ErrNoSuchBucket)
	})
	goOnce.Do(func() { close(goOn) })
	if err := <-done; err != nil {
		t.Fatalf("install: %v", err)
	}
	if got, err := o.Store().HeadBucket(ctx, "doomed"); !errors.Is(err, store.ErrNoSuchBucket) {
		t.Errorf("osd.%d holds the deleted bucket's record again: %v, %v", x, got, err)
	}
	if _, err := o.Store().Head(ctx, "doomed", key); err == nil {
		t.Errorf("osd.%d holds an object of the deleted bucket", x)
	}
}
