package s3gw

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// rewoundBody is a request body a benchmark reads again each op.
type rewoundBody struct{ bytes.Reader }

func (*rewoundBody) Close() error { return nil }

// BenchmarkChunkedBody is the gateway's part of an aws-chunked PUT's body
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER, CRC32C trailer, 64 KiB chunks as
// SDKs send them): the verified body made, read whole and closed, as
// ServeHTTP does. B/op is what each request leaves to the GC.
func BenchmarkChunkedBody(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			data := bytes.Repeat([]byte("osprey "), size/7+1)[:size]
			encoded := encodeChunked(data, 64<<10, crc32cTrailer(data))
			r, err := http.NewRequest(http.MethodPut, "http://gw/bench/k", nil)
			if err != nil {
				b.Fatal(err)
			}
			r.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(size))
			r.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32c")
			auth := authResult{Streaming: streamingUnsignedTrailer}
			body := &rewoundBody{}
			g := &Gateway{}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				body.Reset(encoded)
				r.Body, r.ContentLength = body, int64(len(encoded))
				vb := new(verifiedBody)
				if err := g.newVerifiedBody(vb, r, auth); err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, vb); err != nil || n != int64(size) {
					b.Fatalf("read %d bytes of %d: %v", n, size, err)
				}
				vb.Close()
			}
		})
	}
}
