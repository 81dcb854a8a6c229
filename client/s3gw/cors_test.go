package s3gw_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/client/s3gw"
)

// TestCORS: with CORSOrigins, a preflight from an allowed origin is
// answered what the page may send, one from any other origin (or for a
// method S3 has not) is refused as S3 refuses it, and every answer to an
// allowed origin's request, errors too, lets its script read it.
func TestCORS(t *testing.T) {
	e := newEnvWith(t, func(o *s3gw.Options) {
		o.CORSOrigins = []string{"https://app.example.com", "https://*.example.org"}
	})
	e.mb(t, "web")
	e.put(t, "web", "k", []byte("data"))
	preflight := func(origin, method, headers string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, e.url+"/web/upload.bin", nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if method != "" {
			req.Header.Set("Access-Control-Request-Method", method)
		}
		if headers != "" {
			req.Header.Set("Access-Control-Request-Headers", headers)
		}
		resp, _ := send(t, req, "")
		return resp
	}
	for _, origin := range []string{"https://app.example.com", "https://a.example.org", "https://b.c.example.org"} {
		resp := preflight(origin, "PUT", "content-type,x-amz-date,authorization,x-amz-content-sha256")
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "PUT") ||
			h.Get("Access-Control-Allow-Headers") != "content-type,x-amz-date,authorization,x-amz-content-sha256" || !strings.Contains(h.Get("Vary"), "Origin") {
			t.Fatalf("a preflight from %s: %d %v", origin, resp.StatusCode, h)
		}
	}
	// A presigned URL's preflight carries its query, which S3 does not
	// check on an OPTIONS.
	req, _ := http.NewRequest(http.MethodOptions, e.url+"/web/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00", nil)
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Access-Control-Request-Method", "PUT")
	if resp, body := send(t, req, ""); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("a presigned URL's preflight: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct {
		what, origin, method string
		status               int
	}{
		{"another origin", "https://evil.example.com", "PUT", 403},
		{"the domain itself, not a subdomain", "https://example.org", "PUT", 403},
		{"another scheme", "http://app.example.com", "GET", 403},
		{"a method S3 has not", "https://app.example.com", "PATCH", 403},
		{"a part of a method's name", "https://app.example.com", "T", 403},
		{"a method in lower case", "https://app.example.com", "put", 403},
		{"no origin", "", "PUT", 400},
		{"no method", "https://app.example.com", "", 400},
	} {
		resp := preflight(c.origin, c.method, "")
		if resp.StatusCode != c.status || resp.Header.Get("Access-Control-Allow-Methods") != "" {
			t.Errorf("a preflight with %s: %d %v, want %d", c.what, resp.StatusCode, resp.Header, c.status)
		}
	}
	// Requests from a page: its origin may read the answer, an error's
	// too (the SDK reads its code), and the headers SDKs read.
	for _, key := range []string{"k", "missing"} {
		req := signedWith(t, http.MethodGet, e.url+"/web/"+key, nil, map[string]string{"Origin": "https://app.example.com"})
		resp, _ := send(t, req, "")
		if resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "ETag") {
			t.Fatalf("GET %s from an allowed origin: %d %v", key, resp.StatusCode, resp.Header)
		}
	}
	req = signedWith(t, http.MethodGet, e.url+"/web/k", nil, map[string]string{"Origin": "https://evil.example.com"})
	if resp, _ := send(t, req, ""); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Vary") != "Origin" {
		t.Fatalf("GET from another origin: %d %v", resp.StatusCode, resp.Header)
	}

	// "*": any origin, answered "*".
	any := newEnvWith(t, func(o *s3gw.Options) { o.CORSOrigins = []string{"*"} })
	any.mb(t, "web")
	req, _ = http.NewRequest(http.MethodOptions, any.url+"/web/k", nil)
	req.Header.Set("Origin", "https://anywhere.test")
	req.Header.Set("Access-Control-Request-Method", "GET")
	if resp, _ := send(t, req, ""); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("a preflight with every origin allowed: %d %v", resp.StatusCode, resp.Header)
	}
	// Without CORSOrigins: refused, as S3 refuses a bucket without CORS.
	none := newEnv(t)
	req, _ = http.NewRequest(http.MethodOptions, none.url+"/web/k", nil)
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Access-Control-Request-Method", "GET")
	if resp, body := send(t, req, ""); resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a preflight to a gateway without CORS: %d %s", resp.StatusCode, body)
	}
	for _, bad := range []string{"app.example.com", "https://*.*.example.com", "https://a.com, https://b.com", "https://a.com/", "https://a.com/app"} {
		if _, err := s3gw.New(s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret}, CORSOrigins: []string{bad}}); err == nil {
			t.Errorf("CORSOrigins %q taken", bad)
		}
	}
}
