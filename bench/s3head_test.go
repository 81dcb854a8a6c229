package bench

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

var headSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\nEtag: \"x\"\r\n\r\n",
	"HTTP/1.1 206 Partial Content\r\ncontent-length:\t12 \r\nConnection: keep-alive\r\n\r\nbody",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n folded\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 5\n\n",
	"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n",
	"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
}

// TestParseHead: the simple heads are read, with their length and size;
// the others are left to net/http.
func TestParseHead(t *testing.T) {
	for _, c := range []struct {
		in     string
		ok     bool
		status int
		length int64
	}{
		{headSeeds[0], true, 200, 4096},
		{headSeeds[1], true, 206, 12},
		{headSeeds[2], true, 200, 0},
		{headSeeds[3], true, 200, 5},
		{headSeeds[4], false, 0, 0},  // closes: net/http's
		{headSeeds[5], false, 0, 0},  // chunked
		{headSeeds[6], false, 0, 0},  // two lengths
		{headSeeds[7], false, 0, 0},  // not digits
		{headSeeds[8], false, 0, 0},  // obs-fold
		{headSeeds[9], false, 0, 0},  // bare LF
		{headSeeds[10], false, 0, 0}, // space before the colon
		{headSeeds[11], false, 0, 0}, // HTTP/1.0
		{headSeeds[12], false, 0, 0},
		{headSeeds[13], false, 0, 0},
		{headSeeds[14], false, 0, 0},                        // not whole yet
		{"HTTP/1.1 200 OK\r\nEtag: x\r\n\r\n", false, 0, 0}, // no length
	} {
		h, ok := parseHead([]byte(c.in))
		if ok != c.ok || ok && (h.status != c.status || h.length != c.length || c.in[:h.n] != c.in[:bytes.Index([]byte(c.in), []byte("\r\n\r\n"))+4]) {
			t.Errorf("parseHead(%q) = %+v, %v; want %v, %d, %d", c.in, h, ok, c.ok, c.status, c.length)
		}
	}
}

// FuzzParseHead: a head parseHead reads, net/http reads the same: status,
// length, kept connection, and where the body begins.
func FuzzParseHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := parseHead(b)
		if !ok {
			return
		}
		if h.n <= 0 || h.n > len(b) {
			t.Fatalf("head of %d bytes in %d", h.n, len(b))
		}
		// The head, then a body of its length.
		in := append(append([]byte{}, b[:h.n]...), bytes.Repeat([]byte{'x'}, int(min(h.length, 1<<16)))...)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), otherRequest)
		if err != nil {
			t.Fatalf("parseHead read %q as %+v, net/http: %v", b[:h.n], h, err)
		}
		if resp.StatusCode != h.status || resp.ContentLength != h.length || resp.Close || len(resp.TransferEncoding) > 0 {
			t.Fatalf("parseHead read %q as %+v, net/http as %d, %d bytes, close %v, %v", b[:h.n], h,
				resp.StatusCode, resp.ContentLength, resp.Close, resp.TransferEncoding)
		}
	})
}
