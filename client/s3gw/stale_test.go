package s3gw_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestInternalUploads: a PUT above 64 MiB is, while it streams, an upload
// of the SDK's own, which ListMultipartUploads never shows. One whose
// writer stalls for good (as if its gateway had died) is aborted once
// older than StaleUploadAge: by a listing of its bucket's uploads, and by
// the sweep Serve runs; a younger one is not, nor the users' uploads.
// The clock the uploads are aged by is moved, not waited on.
func TestInternalUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: PUTs above 64 MiB")
	}
	e := newEnv(t)
	ctx := e.ctx
	e.mb(t, "stale")
	cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("stale"), Key: aws.String("user")})
	if err != nil {
		t.Fatal(err)
	}
	// uploads is every upload of the bucket, the internal ones too.
	uploads := func() []client.MultipartUpload {
		t.Helper()
		ups, err := e.cl.AbortStaleUploads(ctx, "stale", client.StaleUploadOptions{Age: -1, All: true, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		return ups
	}
	internal := func() int {
		return len(slices.DeleteFunc(uploads(), func(u client.MultipartUpload) bool { return !u.Internal }))
	}
	// listed lists the uploads through a gateway, and checks that the
	// user's is the only one.
	listed := func(what string, c *s3.Client) {
		t.Helper()
		out, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("stale")})
		if err != nil || len(out.Uploads) != 1 || *out.Uploads[0].UploadId != *cr.UploadId {
			t.Fatalf("%s: ListMultipartUploads: %v %+v; want the user's upload alone", what, err, out)
		}
	}
	// stalled sends a PUT of 80 MiB of which 32 MiB come, and waits for
	// its internal upload.
	stalled := func(key string) {
		t.Helper()
		req := signed(t, http.MethodPut, e.url+"/stale/"+key, osdtest.Payload(80<<20, 1))
		rawConn(t, e.srvAddr, req, 32<<20)
		osdtest.Eventually(t, 30*time.Second, "the stalled PUT's upload", func() bool { return internal() == 1 })
	}

	stalled("big")
	listed("a PUT in flight", e.s3)
	if n := internal(); n != 1 {
		t.Fatalf("a listing collected an internal upload younger than the age: %d left", n)
	}
	later := serveWith(t, e, func(o *s3gw.Options) {
		o.StaleUploadNow = func() time.Time { return time.Now().Add(25 * time.Hour) }
		o.StaleUploadSweep = -1
	})
	listed("a day later", later.s3)
	if ups := uploads(); len(ups) != 1 || ups[0].Internal {
		t.Fatalf("after a listing a day later: %+v; want the user's upload alone", ups)
	}

	stalled("big2")
	serveWith(t, e, func(o *s3gw.Options) {
		o.StaleUploadNow = func() time.Time { return time.Now().Add(25 * time.Hour) }
		o.StaleUploadSweep = time.Millisecond
	})
	osdtest.Eventually(t, 30*time.Second, "the sweep to abort the stalled PUT's upload", func() bool { return internal() == 0 })
	listed("after the sweep", e.s3)
}
