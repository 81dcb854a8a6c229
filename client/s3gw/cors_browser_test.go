package s3gw_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/browsertest"
)

// TestBrowserPresignedUpload: a web page in headless Chromium uploads to a
// presigned PUT URL of a gateway on another origin and reads the object
// back (the browser's preflight, then the PUT and its ETag, then a GET),
// as a web app does with S3; a gateway whose --cors-origin does not name
// the page's origin is kept from it by the browser.
func TestBrowserPresignedUpload(t *testing.T) {
	browsertest.Chromium(t)
	var page string
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	}))
	defer site.Close()
	e := newEnvWith(t, func(o *s3gw.Options) { o.CORSOrigins = []string{site.URL} })
	e.mb(t, "web")
	closed, err := s3gw.New(s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	other := httptest.NewServer(closed)
	defer other.Close()

	// upload is a page that PUTs to put and GETs get, leaving what it
	// saw in window.result.
	upload := func(put, get string) string {
		return `<!doctype html><title>upload</title><script>
window.result = "";
(async () => {
  try {
    const p = await fetch(` + jsString(put) + `, {method: "PUT", headers: {"Content-Type": "text/plain"}, body: "hello from a page"});
    const g = await fetch(` + jsString(get) + `);
    window.result = JSON.stringify({put: p.status, etag: p.headers.get("ETag"), get: g.status, text: await g.text()});
  } catch (e) {
    window.result = "failed: " + e;
  }
})();
</script>`
	}
	presigned := func(endpoint, key string) (put, get string) {
		t.Helper()
		ps := s3.NewPresignClient(s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "")}))
		pp, err := ps.PresignPutObject(e.ctx, &s3.PutObjectInput{Bucket: aws.String("web"), Key: aws.String(key), ContentType: aws.String("text/plain")},
			s3.WithPresignExpires(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		pg, err := ps.PresignGetObject(e.ctx, &s3.GetObjectInput{Bucket: aws.String("web"), Key: aws.String(key)}, s3.WithPresignExpires(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return pp.URL, pg.URL
	}
	run := func(put, get string) string {
		t.Helper()
		page = upload(put, get)
		p := browsertest.Open(t, site.URL, 800, 600)
		if err := p.Poll(30*time.Second, `window.result !== ""`); err != nil {
			t.Fatalf("the page's fetches: %v; its console: %q", err, p.Console())
		}
		r := p.Eval(t, "window.result")
		t.Logf("the page: %s; its console: %q", r, p.Console()) // the browser's reason, when it refused
		return r
	}

	got := run(presigned(e.url, "from-browser"))
	var res struct {
		Put, Get   int
		ETag, Text string
	}
	if err := json.Unmarshal([]byte(got), &res); err != nil {
		t.Fatalf("the page: %s", got)
	}
	if b, _ := e.get(t, "web", "from-browser", ""); res.Put != 200 || res.Get != 200 || res.Text != "hello from a page" || res.ETag != `"`+md5hex(b)+`"` ||
		string(b) != "hello from a page" {
		t.Fatalf("the page saw %+v; the object holds %q", res, b)
	}
	// Without the page's origin allowed, the browser refuses the page the
	// answer to its preflight, and sends no PUT.
	if got := run(presigned(other.URL, "kept-out")); !strings.HasPrefix(got, "failed: TypeError") {
		t.Fatalf("a page on an origin the gateway does not allow: %s", got)
	}
	if _, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String("web"), Key: aws.String("kept-out")}); err == nil {
		t.Fatal("a page the gateway does not allow uploaded")
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
