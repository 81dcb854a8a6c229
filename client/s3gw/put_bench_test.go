package s3gw_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// benchGateway is a gateway over a one-OSD cluster in this process, its
// client as the gateway's (Options.MD5), with a bucket "bench".
func benchGateway(b *testing.B) (*client.Client, *s3gw.Gateway) {
	c := osdtest.Start(b, osdtest.Options{OSDs: 1, PGs: 8})
	cl := c.Client(b, func(o *client.Options) { o.MD5 = true })
	gw, err := s3gw.New(s3gw.Options{Client: cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	if err := cl.MakeBucket(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
	return cl, gw
}

// BenchmarkPut4MiB is a 4 MiB PUT through the gateway's handler (no
// connection in the way), 16 in flight as `osprey bench obj
// --concurrency 16` has them, against the SDK's PutObject alone on the
// same one-OSD cluster in this process. cpu-s/GB is the whole process's
// CPU (gateway, SDK, messenger, OSD) per GB put: on a shared machine the
// figure to trust, where MB/s moves with the neighbours.
//
//   - signed: x-amz-content-sha256 is the body's SHA-256, which the
//     gateway must verify; the ETag MD5 is the SDK's.
//   - signed+md5: Content-MD5 too, as the AWS CLI and s3cmd send it.
//   - unsigned: UNSIGNED-PAYLOAD, only the SDK's MD5 and CRC32C.
//   - sdk: PutObject with Options.MD5, as the gateway's client.
func BenchmarkPut4MiB(b *testing.B) { benchPut(b, 4<<20) }

// BenchmarkPut4KiB is BenchmarkPut4MiB's rows for 4 KiB bodies, where
// what each PUT costs besides its bytes shows (cpu-µs/op): the MD5s of
// bodies this small are hashed inline, not on the md5-simd server.
func BenchmarkPut4KiB(b *testing.B) { benchPut(b, 4<<10) }

func benchPut(b *testing.B, size int64) {
	cl, gw := benchGateway(b)
	ctx := context.Background()
	data := osdtest.Payload(int(size), 1)
	sum := sha256.Sum256(data)
	md := md5.Sum(data)
	etag := `"` + hex.EncodeToString(md[:]) + `"`

	// signedPut is one signed request per key, replayed: a signature is
	// good for 15 minutes, and the gateway keeps no state between them.
	signedPut := func(key, payloadHash string, contentMD5 bool) *http.Request {
		r, err := http.NewRequest(http.MethodPut, "http://gw/bench/"+key, nil)
		if err != nil {
			b.Fatal(err)
		}
		r.ContentLength = size
		r.Header.Set("X-Amz-Content-Sha256", payloadHash)
		if contentMD5 {
			r.Header.Set("Content-Md5", base64.StdEncoding.EncodeToString(md[:]))
		}
		if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
			r, payloadHash, "s3", "us-east-1", time.Now()); err != nil {
			b.Fatal(err)
		}
		return r
	}
	for _, bc := range []struct {
		name        string
		payloadHash string
		contentMD5  bool
	}{
		{"signed", hex.EncodeToString(sum[:]), false},
		{"signed+md5", hex.EncodeToString(sum[:]), true},
		{"unsigned", "UNSIGNED-PAYLOAD", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const keys = 16
			signed := make([]*http.Request, keys)
			for i := range signed {
				signed[i] = signedPut(fmt.Sprintf("k%d", i), bc.payloadHash, bc.contentMD5)
			}
			put16(b, size, func(i int) error {
				s := signed[i%keys]
				r := httptest.NewRequest(http.MethodPut, s.URL.String(), bytes.NewReader(data))
				r.Header = s.Header.Clone()
				w := httptest.NewRecorder()
				gw.ServeHTTP(w, r)
				if w.Code != http.StatusOK || w.Header().Get("ETag") != etag {
					return fmt.Errorf("PUT: %d, ETag %s: %s", w.Code, w.Header().Get("ETag"), w.Body)
				}
				return nil
			})
		})
	}
	b.Run("sdk", func(b *testing.B) {
		put16(b, size, func(i int) error {
			_, err := cl.PutObject(ctx, "bench", fmt.Sprintf("s%d", i%16), bytes.NewReader(data), size, client.PutOptions{})
			return err
		})
	})
}

// put16 runs op with 16 in flight (GOMAXPROCS where that is more), with
// osdtest.BenchOps's CPU figures.
func put16(b *testing.B, size int64, op func(i int) error) {
	osdtest.BenchOps(b, size, max(1, 16/runtime.GOMAXPROCS(0)), op)
}
