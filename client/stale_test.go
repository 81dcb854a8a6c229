package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// stalledReader gives data, then waits for an error to end with: a body
// whose writer stalls half-way and then fails (or hangs up).
type stalledReader struct {
	data []byte
	end  chan error
}

func newStalledReader(data []byte) *stalledReader {
	return &stalledReader{data: data, end: make(chan error, 1)}
}

func (r *stalledReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, <-r.end
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// pieceSets counts the pieces stored, by piece set.
func pieceSets(t *testing.T, cl *client.Client) map[string]int {
	t.Helper()
	sets := map[string]int{}
	for o, err := range client.ListHidden(t.Context(), cl) {
		if err != nil {
			t.Fatal(err)
		}
		if _, _, set, _, ok := ops.ParsePieceKey(o.Key); ok {
			sets[set]++
		}
	}
	return sets
}

var errHungUp = errors.New("the writer hung up")

// startUpload starts a cluster with bucket gcb and an upload of gcb/key.
func startUpload(t *testing.T, key string) (*client.Client, context.Context, string) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	cl := c.Client(t, func(o *client.Options) { o.MD5 = true })
	ctx := t.Context()
	if err := cl.MakeBucket(ctx, "gcb"); err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "gcb", key, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cl, ctx, id
}

// TestFailedPartRemovesItsPieces: an upload of a part above 64 MiB that
// fails half-way (its writer hangs up, its context is cancelled) removes
// the pieces it sent, and only those: a second
// upload of the same part, made while the first was stalled, keeps its
// own, and the object completed from it reads back whole.
func TestFailedPartRemovesItsPieces(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 65 MiB part")
	}
	cl, ctx, id := startUpload(t, "mp")
	big := osdtest.Payload(65<<20+1, 5)
	first := newStalledReader(big[:32<<20])
	failed := make(chan error, 1)
	// Its context is cancelled too, as a gateway's request's is when its
	// client hangs up: the pieces are removed all the same.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, err := cl.PutObjectPart(actx, "gcb", "mp", id, 1, first, int64(len(big)))
		failed <- err
	}()
	osdtest.Eventually(t, 30*time.Second, "the first attempt's two pieces stored", func() bool {
		sets := pieceSets(t, cl)
		return len(sets) == 1 && sum(sets) == 2
	})
	p, err := cl.PutObjectPart(ctx, "gcb", "mp", id, 1, bytes.NewReader(big), int64(len(big)))
	if err != nil || p.ETag != md5hex(big) {
		t.Fatalf("the second attempt: %v %+v", err, p)
	}
	cancel()
	first.end <- errHungUp
	if err := <-failed; !errors.Is(err, errHungUp) && !errors.Is(err, context.Canceled) {
		t.Fatalf("the first attempt: %v, want %v or %v", err, errHungUp, context.Canceled)
	}
	if sets := pieceSets(t, cl); len(sets) != 1 || sum(sets) != 5 {
		t.Fatalf("pieces by set after the first attempt failed: %v; want the second's 5 alone", sets)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "gcb", "mp", id, []client.CompletePart{{PartNumber: 1, ETag: p.ETag}}); err != nil {
		t.Fatal(err)
	}
	got, _, err := osdtest.Get(ctx, cl, "gcb", "mp", client.GetOptions{})
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back: %v, %d bytes (equal %v)", err, len(got), bytes.Equal(got, big))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestCompleteRemovesUnlistedParts: as on S3, the parts of an upload that
// its completion does not list are discarded, a part in pieces with its
// pieces; the listed ones are the object's and stay.
func TestCompleteRemovesUnlistedParts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 65 MiB part")
	}
	cl, ctx, id := startUpload(t, "mp")
	parts := [][]byte{osdtest.Payload(5<<20, 1), osdtest.Payload(65<<20+1, 2), osdtest.Payload(3<<20, 3), osdtest.Payload(1<<20, 4)}
	var done []client.CompletePart
	for i, data := range parts {
		p, err := cl.PutObjectPart(ctx, "gcb", "mp", id, i+1, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, client.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag})
	}
	if n, pieces := hiddenKeys(t, cl); n != 5 || pieces != 5 {
		t.Fatalf("before completing: %d records and parts, %d pieces; want 5 and 5", n, pieces)
	}
	// Parts 1 and 3: part 2 (in pieces) and part 4 are discarded.
	info, err := cl.CompleteMultipartUpload(ctx, "gcb", "mp", id, []client.CompletePart{done[0], done[2]})
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(parts[0]), parts[2]...)
	if info.Size != int64(len(want)) {
		t.Fatalf("the object has %d bytes, want %d", info.Size, len(want))
	}
	if n, pieces := hiddenKeys(t, cl); n != 2 || pieces != 0 {
		t.Fatalf("after completing: %d records and parts, %d pieces; want the 2 listed parts, no pieces", n, pieces)
	}
	got, _, err := osdtest.Get(ctx, cl, "gcb", "mp", client.GetOptions{})
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %v, %d bytes (equal %v)", err, len(got), bytes.Equal(got, want))
	}
}

// TestInternalUploads: a PUT put whole in pieces (WholeETag) is an upload
// of the SDK's own, which ListMultipartUploads does not show while it
// streams. Stalled for good (a gateway that died), AbortStaleUploads
// collects it with its pieces once it is older than the age, and not
// before; the users' uploads only with All.
func TestInternalUploads(t *testing.T) {
	// A user's upload, with a part.
	cl, ctx, userID := startUpload(t, "user")
	if _, err := cl.PutObjectPart(ctx, "gcb", "user", userID, 1, bytes.NewReader([]byte("a part")), 6); err != nil {
		t.Fatal(err)
	}
	// A PUT of 40 MiB in pieces of 5 MiB that stalls after 2.
	body := newStalledReader(osdtest.Payload(10<<20, 6))
	put := make(chan error, 1)
	go func() {
		_, err := cl.PutObject(ctx, "gcb", "whole", body, 40<<20, client.PutOptions{PartSize: 5 << 20, WholeETag: true})
		put <- err
	}()
	osdtest.Eventually(t, 30*time.Second, "the PUT's first two pieces stored", func() bool {
		_, pieces := hiddenKeys(t, cl)
		return pieces == 2
	})
	ups, err := cl.ListMultipartUploads(ctx, "gcb", "")
	if err != nil || len(ups) != 1 || ups[0].UploadID != userID || ups[0].Internal {
		t.Fatalf("ListMultipartUploads during a PUT: %v %+v; want the user's upload alone", err, ups)
	}

	at := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	young, err := cl.AbortStaleUploads(ctx, "gcb", client.StaleUploadOptions{Now: at(23 * time.Hour)})
	if err != nil || len(young) != 0 {
		t.Fatalf("uploads of a day less an hour collected: %v %+v", err, young)
	}
	if _, err := cl.AbortStaleUploads(ctx, "gcb", client.StaleUploadOptions{Now: at(2 * time.Hour), Age: 3 * time.Hour, All: true}); err != nil {
		t.Fatal(err)
	}
	if n, pieces := hiddenKeys(t, cl); n != 3 || pieces != 2 {
		t.Fatalf("after collecting young uploads: %d records and parts, %d pieces; want 3 and 2, all there", n, pieces)
	}
	old, err := cl.AbortStaleUploads(ctx, "gcb", client.StaleUploadOptions{Now: at(25 * time.Hour)})
	if err != nil || len(old) != 1 || old[0].Key != "whole" || !old[0].Internal {
		t.Fatalf("the stale internal upload: %v %+v", err, old)
	}
	if n, pieces := hiddenKeys(t, cl); n != 2 || pieces != 0 {
		t.Fatalf("after collecting the stale PUT: %d records and parts, %d pieces; want the user's upload and part alone", n, pieces)
	}
	body.end <- errHungUp
	if err := <-put; err == nil {
		t.Fatal("a PUT whose upload was collected succeeded")
	}
	if _, err := cl.StatObject(ctx, "gcb", "whole"); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("the collected PUT's object: %v", err)
	}
	// The user's upload is the user's, however old, unless All.
	ups, err = cl.ListMultipartUploads(ctx, "gcb", "")
	if err != nil || len(ups) != 1 {
		t.Fatalf("the user's upload after collecting: %v %+v", err, ups)
	}
	all, err := cl.AbortStaleUploads(ctx, "gcb", client.StaleUploadOptions{Now: at(25 * time.Hour), All: true})
	if err != nil || len(all) != 1 || all[0].UploadID != userID || all[0].Internal {
		t.Fatalf("All: %v %+v", err, all)
	}
	if n, pieces := hiddenKeys(t, cl); n != 0 || pieces != 0 {
		t.Fatalf("after All: %d records and parts, %d pieces", n, pieces)
	}
}
