package s3gw_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// BenchmarkGet4KiB is a 4 KiB GET through the gateway's handler (served
// with a recorder: no connection in the way), through HTTP, and through
// the SDK, so that the differences are what the gateway and HTTP add per
// request.
func BenchmarkGet4KiB(b *testing.B) {
	cl, gw := benchGateway(b)
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 4<<10)
	if _, err := cl.PutObject(ctx, "bench", "k", bytes.NewReader(data), int64(len(data)), client.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	// One signed request, replayed: a signature is good for 15 minutes,
	// and the gateway keeps no state between requests.
	signed, err := http.NewRequest(http.MethodGet, srv.URL+"/bench/k", nil)
	if err != nil {
		b.Fatal(err)
	}
	signed.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
		signed, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		b.Fatal(err)
	}
	b.Run("handler", func(b *testing.B) {
		osdtest.BenchOps(b, int64(len(data)), 1, func(int) error {
			r := httptest.NewRequest(http.MethodGet, signed.URL.String(), nil)
			r.Header = signed.Header.Clone()
			w := httptest.NewRecorder()
			gw.ServeHTTP(w, r)
			if w.Code != http.StatusOK || w.Body.Len() != len(data) {
				return fmt.Errorf("GET: %d, %d bytes", w.Code, w.Body.Len())
			}
			return nil
		})
	})
	b.Run("http", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		defer hc.CloseIdleConnections()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 8<<10)
			for pb.Next() {
				r := signed.Clone(ctx)
				resp, err := hc.Do(r)
				if err != nil {
					b.Error(err)
					return
				}
				n, _ := io.ReadFull(resp.Body, buf)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n != len(data) {
					b.Errorf("GET: %d, %d bytes", resp.StatusCode, n)
					return
				}
			}
		})
	})
	b.Run("sdk", func(b *testing.B) {
		osdtest.BenchOps(b, int64(len(data)), 1, func(int) error {
			o, err := cl.GetObject(ctx, "bench", "k", client.GetOptions{})
			if err != nil {
				return err
			}
			defer o.Close()
			if n, err := io.Copy(io.Discard, o); err != nil || n != int64(len(data)) {
				return fmt.Errorf("GET: %d bytes, %v", n, err)
			}
			return nil
		})
	})
}
