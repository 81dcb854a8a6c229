package client_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// hiddenList lists the multipart bucket's keys.
func hiddenList(t *testing.T, cl *client.Client) []string {
	t.Helper()
	var keys []string
	for o, err := range client.ListHidden(t.Context(), cl) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// TestCollectGarbage: CollectGarbage removes the parts of no upload and no
// object, and the uploads of deleted (and re-made) buckets with theirs;
// it keeps the parts of a completed object and of an upload in progress,
// anything younger than MinAge, and everything under DryRun.
func TestCollectGarbage(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	cl := c.Client(t, nil)
	ctx := t.Context()
	for _, b := range []string{"keep", "gone", "again"} {
		if err := cl.MakeBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	upload := func(bucket, key string, sizes ...int) (string, []client.CompletePart) {
		t.Helper()
		id, err := cl.NewMultipartUpload(ctx, bucket, key, client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var parts []client.CompletePart
		for i, n := range sizes {
			p, err := cl.PutObjectPart(ctx, bucket, key, id, i+1, bytes.NewReader(osdtest.Payload(n, uint64(i+1))), int64(n))
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, client.CompletePart{PartNumber: i + 1, ETag: p.ETag})
		}
		return id, parts
	}
	// A completed object: its parts are the object's.
	id, parts := upload("keep", "done", 5<<20, 1000)
	if _, err := cl.CompleteMultipartUpload(ctx, "keep", "done", id, parts); err != nil {
		t.Fatal(err)
	}
	// An upload in progress.
	liveID, liveParts := upload("keep", "live", 2000)
	// An abort whose part deletes were lost: the record went, the part
	// stayed.
	lostID, _ := upload("keep", "lost", 3000)
	if err := client.RemoveHidden(ctx, cl, ops.UploadKey("keep", "lost", lostID)); err != nil {
		t.Fatal(err)
	}
	// Uploads whose bucket was deleted, and one made again since, which
	// RemoveBucket did not remove (a client that died first).
	client.KeepBucketUploads(t)
	goneID, _ := upload("gone", "x", 4000)
	againID, _ := upload("again", "y", 5000)
	for _, b := range []string{"gone", "again"} {
		if err := cl.RemoveBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.MakeBucket(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if ups, err := cl.ListMultipartUploads(ctx, "again", ""); err != nil || len(ups) != 1 {
		t.Fatalf("the re-made bucket shows its predecessor's upload before the collection: %v %v", ups, err)
	}
	before := hiddenList(t, cl)

	// Everything is younger than the default MinAge: nothing goes.
	rep, err := cl.CollectGarbage(ctx, client.GCOptions{})
	if err != nil || len(rep.Uploads) != 0 || len(rep.Parts) != 0 {
		t.Fatalf("young garbage collected: %+v %v", rep, err)
	}
	wantUploads := []string{"again/y/" + againID, "gone/x/" + goneID}
	wantParts := []string{ops.PartKey(againID, 1), ops.PartKey(goneID, 1), ops.PartKey(lostID, 1)}
	slices.Sort(wantParts)
	check := func(what string, rep client.GCReport) {
		t.Helper()
		var ups []string
		for _, u := range rep.Uploads {
			ups = append(ups, ops.UploadKey(u.Bucket, u.Key, u.UploadID))
		}
		slices.Sort(ups)
		got := slices.Sorted(slices.Values(rep.Parts))
		if !slices.Equal(ups, wantUploads) || !slices.Equal(got, wantParts) || rep.Bytes != 3000+4000+5000 {
			t.Fatalf("%s: uploads %v parts %v (%d bytes), want %v and %v", what, ups, got, rep.Bytes, wantUploads, wantParts)
		}
	}
	// Anything older than now, and a bucket made after an upload began
	// (by round trips) is made again since.
	old := client.GCOptions{MinAge: time.Nanosecond}
	dry := old
	dry.DryRun = true
	rep, err = cl.CollectGarbage(ctx, dry)
	if err != nil {
		t.Fatal(err)
	}
	check("dry run", rep)
	if after := hiddenList(t, cl); !slices.Equal(after, before) {
		t.Fatalf("a dry run removed %v", slices.DeleteFunc(before, func(k string) bool { return slices.Contains(after, k) }))
	}

	rep, err = cl.CollectGarbage(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	check("collection", rep)
	want := slices.DeleteFunc(before, func(k string) bool {
		return slices.Contains(wantParts, k) || slices.Contains(wantUploads, k)
	})
	if after := hiddenList(t, cl); !slices.Equal(after, want) {
		t.Fatalf("left %v, want %v", after, want)
	}
	if ups, err := cl.ListMultipartUploads(ctx, "again", ""); err != nil || len(ups) != 0 {
		t.Fatalf("the re-made bucket still shows its predecessor's upload: %v %v", ups, err)
	}
	// What was kept still works.
	o, err := cl.GetObject(ctx, "keep", "done", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	o.Close()
	if wantBody := append(osdtest.Payload(5<<20, 1), osdtest.Payload(1000, 2)...); err != nil || !bytes.Equal(got, wantBody) {
		t.Fatalf("the completed object after the collection: %d bytes, %v", len(got), err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "keep", "live", liveID, liveParts); err != nil {
		t.Fatalf("the upload in progress after the collection: %v", err)
	}
	rep, err = cl.CollectGarbage(context.Background(), old)
	if err != nil || len(rep.Uploads)+len(rep.Parts) != 0 || rep.Kept != 3 {
		t.Fatalf("a second collection: %+v %v (want nothing removed, 3 parts kept)", rep, err)
	}
}

// TestRemoveBucketDropsUploads: a bucket deleted with uploads in progress
// takes them with it, parts and pieces too, as on S3; a bucket made again
// under the name lists none, and another bucket's uploads stay.
func TestRemoveBucketDropsUploads(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	cl := c.Client(t, nil)
	ctx := t.Context()
	for _, b := range []string{"drp", "drpx"} {
		if err := cl.MakeBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for _, bk := range [][2]string{{"drp", "a"}, {"drp", "dir/b"}, {"drpx", "c"}} {
		id, err := cl.NewMultipartUpload(ctx, bk[0], bk[1], client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 2; n++ {
			if _, err := cl.PutObjectPart(ctx, bk[0], bk[1], id, n, bytes.NewReader([]byte("part")), 4); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	internal, err := client.NewInternalUpload(ctx, cl, "drp", "whole")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveBucket(ctx, "drp"); err != nil {
		t.Fatal(err)
	}
	// A listing comes in key order, and the upload ID is random hex, so
	// whether the upload's key sorts before its parts depends on the ID.
	want := []string{ops.PartKey(ids[2], 1), ops.PartKey(ids[2], 2), ops.UploadKey("drpx", "c", ids[2])}
	slices.Sort(want)
	if got := hiddenList(t, cl); !slices.Equal(got, want) {
		t.Fatalf("after the bucket's delete the multipart bucket holds %v, want %v (uploads %v and %s gone)", got, want, ids[:2], internal)
	}
	if err := cl.MakeBucket(ctx, "drp"); err != nil {
		t.Fatal(err)
	}
	if ups, err := cl.ListMultipartUploads(ctx, "drp", ""); err != nil || len(ups) != 0 {
		t.Fatalf("the bucket made again lists %v, %v", ups, err)
	}
	if ups, err := cl.ListMultipartUploads(ctx, "drpx", ""); err != nil || len(ups) != 1 {
		t.Fatalf("the other bucket lists %v, %v", ups, err)
	}
}
