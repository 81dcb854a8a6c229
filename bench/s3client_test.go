package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/ospreystore/osprey/internal/sigv4"
)

// TestS3ClientSignsAsAWSSDK checks the benchmark client's requests
// against aws-sdk-go-v2's signer: the same request, signed by both at the
// same time, carries the same Authorization.
func TestS3ClientSignsAsAWSSDK(t *testing.T) {
	now := time.Date(2026, 12, 3, 23, 59, 58, 0, time.UTC)
	body := []byte("hello, world")
	for _, c := range []struct {
		name, method, bucket, key, query string
		body                             []byte
		signPayload                      bool
	}{
		{"put", http.MethodPut, "b", "bench/4096/00000001", "", body, false},
		{"put signed", http.MethodPut, "b", "bench/4096/00000001", "", body, true},
		{"get odd key", http.MethodGet, "b", "a b/é+*~(x)%2F", "", nil, false},
		{"head signed", http.MethodHead, "b", "k", "", nil, true},
		{"delete", http.MethodDelete, "bucket.with.dots", "k", "", nil, false},
		{"list", http.MethodGet, "b", "", "list-type=2&max-keys=100&prefix=" + sigv4.Escape("bench/4 096/", false) +
			"&start-after=" + sigv4.Escape("bench/4 096/0000+7", false), nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := newS3Client(S3Target{Endpoint: "http://127.0.0.1:9000/", AccessKey: "AKID", SecretKey: "SECRET/KEY",
				Region: "eu-west-3", SignPayload: c.signPayload}, 1)
			if err != nil {
				t.Fatal(err)
			}
			size := -1
			if c.body != nil {
				size = len(c.body)
			}
			head := cl.appendRequest(nil, c.method, c.bucket, c.key, c.query, c.body, size, now)
			got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(append(head, c.body...))))
			if err != nil {
				t.Fatalf("the request does not parse: %v\n%s", err, head)
			}
			if got.ContentLength != int64(size) && !(size < 0 && got.ContentLength == 0) {
				t.Fatalf("Content-Length %d, want %d", got.ContentLength, size)
			}
			payload := got.Header.Get("X-Amz-Content-Sha256")
			want := "UNSIGNED-PAYLOAD"
			if c.signPayload {
				sum := sha256.Sum256(c.body)
				want = hex.EncodeToString(sum[:])
			}
			if payload != want {
				t.Fatalf("x-amz-content-sha256 %q, want %q", payload, want)
			}
			ref, err := http.NewRequest(c.method, "http://127.0.0.1:9000"+got.RequestURI, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref.Header.Set("X-Amz-Content-Sha256", payload)
			if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
				aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET/KEY"}, ref, payload, "s3", "eu-west-3", now); err != nil {
				t.Fatal(err)
			}
			if g, w := got.Header.Get("Authorization"), ref.Header.Get("Authorization"); g != w {
				t.Fatalf("Authorization\n%s\nwant (aws-sdk-go-v2)\n%s\nrequest:\n%s", g, w, head)
			}
			if g, w := got.Header.Get("X-Amz-Date"), ref.Header.Get("X-Amz-Date"); g != w {
				t.Fatalf("X-Amz-Date %s, want %s", g, w)
			}
		})
	}
}

// TestS3ClientConnections drives the client against a plain HTTP server:
// a kept connection the server closed is replaced, an S3 error is read
// from its XML, a short body is an error, and a request whose context
// ends returns.
func TestS3ClientConnections(t *testing.T) {
	var conns atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/b/ok":
			io.WriteString(w, "abc")
		case "/b/missing":
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>`)
		case "/b/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		case "/b/big": // read past the 256 KiB of one read
			w.Write(make([]byte, 1<<20))
		case "/b/bigshort":
			w.Header().Set("Content-Length", strconv.Itoa(1<<20))
			w.Write(make([]byte, 300<<10))
		case "/b/stall":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	defer close(release)
	cl, err := newS3Client(S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	ctx := context.Background()
	var got bytes.Buffer
	for range 3 {
		got.Reset()
		if err := cl.do(ctx, http.MethodGet, "b", "ok", "", nil, false, &got); err != nil || got.String() != "abc" {
			t.Fatalf("GET: %q, %v", got.String(), err)
		}
	}
	// A HEAD's Content-Length is the object's, with no body after it.
	if err := cl.do(ctx, http.MethodHead, "b", "ok", "", nil, false, nil); err != nil {
		t.Fatalf("HEAD: %v", err)
	}
	got.Reset()
	if err := cl.do(ctx, http.MethodGet, "b", "ok", "", nil, false, &got); err != nil || got.String() != "abc" {
		t.Fatalf("GET after a HEAD: %q, %v", got.String(), err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("3 GETs, a HEAD and a GET in turn took %d connections, want 1 kept", n)
	}
	srv.CloseClientConnections()
	if err := cl.do(ctx, http.MethodGet, "b", "ok", "", nil, false, nil); err != nil {
		t.Fatalf("GET after the server closed the kept connection: %v", err)
	}
	err = cl.do(ctx, http.MethodGet, "b", "missing", "", nil, false, nil)
	var e *s3Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != "NoSuchKey" {
		t.Fatalf("GET of a missing key: %v", err)
	}
	if err := cl.do(ctx, http.MethodGet, "b", "ok", "", nil, false, nil); err != nil {
		t.Fatalf("GET after an error answer: %v", err)
	}
	if err := cl.do(ctx, http.MethodGet, "b", "big", "", nil, false, nil); err != nil {
		t.Fatalf("GET of 1 MiB: %v", err)
	}
	for _, k := range []string{"short", "bigshort"} {
		if err := cl.do(ctx, http.MethodGet, "b", k, "", nil, false, nil); err == nil {
			t.Fatalf("GET of a short body (%s) succeeded", k)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := cl.do(cctx, http.MethodGet, "b", "stall", "", nil, false, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a stalled GET whose context ended: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a stalled GET did not return when its context ended")
	}
}

// TestS3ClientTLS: an https:// endpoint is spoken to over TLS, its name
// checked.
func TestS3ClientTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		io.WriteString(w, "abc")
	}))
	defer srv.Close()
	cl, err := newS3Client(S3Target{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	if err := cl.do(context.Background(), http.MethodGet, "b", "k", "", nil, false, nil); err == nil {
		t.Fatal("a server whose certificate is not trusted was spoken to")
	}
	cl.tls.RootCAs = x509.NewCertPool()
	cl.tls.RootCAs.AddCert(srv.Certificate())
	cl.tls.ServerName = "example.com" // the name httptest's certificate is for
	var got bytes.Buffer
	if err := cl.do(context.Background(), http.MethodGet, "b", "k", "", nil, false, &got); err != nil || got.String() != "abc" {
		t.Fatalf("GET over TLS: %q, %v", got.String(), err)
	}
}
