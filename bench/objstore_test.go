package bench

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestRunObjS3 runs every operation and a mix through Osprey's S3 gateway
// with --s3's path, and checks the rows and that the run cleans up after
// itself: the bucket it made is gone, and in a bucket that existed only
// its own keys are.
func TestRunObjS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	cl := c.Client(t, func(o *client.Options) { o.MD5 = true })
	gw, err := s3gw.New(s3gw.Options{Client: cl, Credentials: s3gw.StaticCredentials{"AK": "SK"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mix, err := ParseMix("get=50,put=30,delete=20")
	if err != nil {
		t.Fatal(err)
	}
	for _, signPayload := range []bool{false, true} {
		// A row counts the operations that end within its Duration; on a
		// loaded machine (race detector, CI) a short row can end before
		// any has, so a run with such a row (and no errors) is repeated
		// with rows twice as long, up to 2.4 s.
		const longest = 2400 * time.Millisecond
		for d := 150 * time.Millisecond; ; d *= 2 {
			rows, err := RunObj(ctx, ObjOptions{
				S3:    &S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK", SignPayload: signPayload},
				Sizes: []int{4 << 10}, Ops: ObjOps, Mix: mix, Objects: 20, Concurrency: 4,
				Duration: d, Segment: d / 3, Bucket: "s3bench",
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 9 {
				t.Fatalf("%d rows, want 9", len(rows))
			}
			if ok, err := cl.BucketExists(ctx, "s3bench"); err != nil || ok {
				t.Fatalf("the bucket the run made is left: %v %v", ok, err)
			}
			idle := false
			for _, r := range rows {
				if r.Errors != 0 || r.Transport != "s3" || r.CPUScope != CPUClient {
					t.Fatalf("%s: %d errors, transport %q, cpu scope %q", objRowLabel(&r), r.Errors, r.Transport, r.CPUScope)
				}
				if r.Ops == 0 && r.Op != OpDelete {
					if d >= longest {
						t.Fatalf("%s: no operation in %v", objRowLabel(&r), d)
					}
					idle = true
				}
			}
			if !idle {
				break
			}
			t.Logf("a row of %v measured no operation; again, twice as long", d)
		}
	}
	// In a bucket that existed, the run removes its keys and leaves the
	// rest.
	if err := cl.MakeBucket(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "mine", "keep", []byte("x"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := RunObj(ctx, ObjOptions{S3: &S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK"},
		Sizes: []int{1 << 10}, Ops: []ObjOp{OpPut}, Concurrency: 2, Duration: 100 * time.Millisecond, Bucket: "mine"}); err != nil {
		t.Fatal(err)
	}
	var left []string
	for info, err := range cl.ListObjects(ctx, "mine", client.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, info.Key)
	}
	if len(left) != 1 || left[0] != "keep" {
		t.Fatalf("left in a bucket that existed: %q", left)
	}
	// An earlier run's objects, kept (--no-cleanup), are the working set
	// a later run reads, and rewrites when it tops it up: they stay, as
	// they were there before it; what it added beyond them goes.
	if _, err := RunObj(ctx, ObjOptions{S3: &S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK"}, KeepObjects: true,
		Sizes: []int{1 << 10}, Ops: []ObjOp{OpPut}, Concurrency: 2, Duration: 100 * time.Millisecond, Bucket: "mine"}); err != nil {
		t.Fatal(err)
	}
	benchKeys := func() map[string]bool {
		keys := map[string]bool{}
		for info, err := range cl.ListObjects(ctx, "mine", client.ListOptions{Prefix: ObjKeyPrefix}) {
			if err != nil {
				t.Fatal(err)
			}
			keys[info.Key] = true
		}
		return keys
	}
	kept := benchKeys()
	if _, err := RunObj(ctx, ObjOptions{S3: &S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK"},
		Sizes: []int{1 << 10}, Ops: []ObjOp{OpGet}, Objects: len(kept) + 8, Concurrency: 2, Duration: 100 * time.Millisecond, Bucket: "mine"}); err != nil {
		t.Fatal(err)
	}
	after := benchKeys()
	if len(kept) == 0 || !maps.Equal(after, kept) {
		t.Fatalf("%d of the benchmark's keys kept by the first run, %d after a second run that deleted its own; want the same %d", len(kept), len(after), len(kept))
	}
	// A wrong key: the run fails, with the S3 error.
	if _, err := RunObj(ctx, ObjOptions{S3: &S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "wrong"},
		Sizes: []int{1 << 10}, Ops: []ObjOp{OpPut}, Duration: 100 * time.Millisecond}); err == nil {
		t.Fatal("a run with a wrong secret succeeded")
	}
}
