package client_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// md5Reader is a client.MD5Reader whose MD5 is whatever the test says,
// so that the test can tell whether the SDK took it or hashed the bytes.
type md5Reader struct {
	r    *bytes.Reader
	sum  []byte // reported once the reader has returned its last byte
	skew int64  // added to the count it reports
	n    int64
}

func (m *md5Reader) Read(p []byte) (int, error) {
	k, err := m.r.Read(p)
	m.n += int64(k)
	return k, err
}

func (m *md5Reader) ReadMD5() ([]byte, int64, bool) {
	if m.r.Len() > 0 {
		return nil, m.n, true
	}
	return m.sum, m.n + m.skew, true
}

// TestPutTakesReaderMD5: a put of one op takes the ETag MD5 of a body
// that has it (the S3 gateway's, checked against Content-MD5) instead of
// hashing the bytes again; and hashes them itself when the reader's MD5
// does not cover exactly the bytes it put.
func TestPutTakesReaderMD5(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	cl := c.Client(t, func(o *client.Options) { o.MD5 = true })
	ctx := t.Context()
	if err := cl.MakeBucket(ctx, "md5b"); err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(1<<20+7, 3)
	real := md5.Sum(data)
	marker := bytes.Repeat([]byte{0xab}, 16) // no body has this MD5 here
	for _, tc := range []struct {
		name string
		skew int64
		want []byte
	}{
		{"taken", 0, marker},
		{"other bytes", 1, real[:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &md5Reader{r: bytes.NewReader(data), sum: marker, skew: tc.skew}
			info, err := cl.PutObject(ctx, "md5b", tc.name, r, int64(len(data)), client.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := info.ETag; got != hex.EncodeToString(tc.want) {
				t.Errorf("ETag %s, want %x", got, tc.want)
			}
		})
	}
}

// TestNewMD5Sizes: an MD5 started for any size, inline below the
// threshold or on the md5-simd server above it or when the size is not
// known, is the MD5 of what was written, whatever was announced.
func TestNewMD5Sizes(t *testing.T) {
	data := osdtest.Payload(300<<10, 7)
	for _, c := range []struct{ announced, written int64 }{
		{0, 0}, {-1, 0}, {4 << 10, 4 << 10}, {128 << 10, 128 << 10}, {128<<10 + 1, 128<<10 + 1},
		{-1, 300 << 10}, {4 << 10, 300 << 10}, {300 << 10, 4 << 10},
	} {
		h := client.NewMD5(c.announced)
		// In pieces, as a body arrives.
		for p := data[:c.written]; len(p) > 0; {
			k := min(len(p), 10_000)
			h.Write(p[:k])
			p = p[k:]
		}
		want := md5.Sum(data[:c.written])
		if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Errorf("NewMD5(%d) of %d bytes: %x, want %x", c.announced, c.written, got, want)
		}
		h.Close()
	}
}
