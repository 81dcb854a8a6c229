package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// cancellingReader gives its bytes 64 KiB a Read and cancels the put's
// context once it has given cancelAt of them; it counts the Reads after.
type cancellingReader struct {
	r        io.Reader
	given    int
	cancelAt int
	cancel   context.CancelFunc
	after    int // Reads once the context was cancelled
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	if c.given >= c.cancelAt {
		c.after++
	}
	n, err := c.r.Read(p[:min(len(p), 64<<10)])
	c.given += n
	if c.given >= c.cancelAt && c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	return n, err
}

// TestPutObjectEndsWithItsContext: a put whose context ends while it reads
// the body stops reading the caller's reader at once and returns the
// context's error, whether it goes in one op, by multipart upload or as
// one part in pieces, of a known size or not; the object before it stays.
func TestPutObjectEndsWithItsContext(t *testing.T) {
	cl, ctx := setup(t)
	old := osdtest.Payload(1000, 1)
	for _, tc := range []struct {
		name string
		size int
		opts client.PutOptions
	}{
		{"one op", 4 << 20, client.PutOptions{}},
		{"multipart", 24 << 20, client.PutOptions{PartSize: 5 << 20}},
		{"multipart, size unknown", -1, client.PutOptions{PartSize: 5 << 20}},
		{"in pieces", 24 << 20, client.PutOptions{PartSize: 5 << 20, WholeETag: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "cancel/" + tc.name
			if _, err := osdtest.Put(ctx, cl, "s3tests", key, old, client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			putCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			body := osdtest.Payload(24<<20, 2)
			r := &cancellingReader{r: bytes.NewReader(body), cancelAt: 3 << 20, cancel: cancel}
			_, err := cl.PutObject(putCtx, "s3tests", key, r, int64(tc.size), tc.opts)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("put cancelled mid-body: %v, want context.Canceled", err)
			}
			if r.after != 0 {
				t.Fatalf("%d Reads of the body after the context ended", r.after)
			}
			got, _, err := osdtest.Get(ctx, cl, "s3tests", key, client.GetOptions{})
			if err != nil || !bytes.Equal(got, old) {
				t.Fatalf("after the cancelled put: %d bytes, %v; want the old %d", len(got), err, len(old))
			}
		})
	}
}

// countingReader counts the bytes taken from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestPutObjectTakesSizeBytes: a put of a known size reads that many bytes
// of a longer reader, and stores them, in one op as by multipart upload
// (the bytes after them are the caller's); a body shorter than its size
// fails with io.ErrUnexpectedEOF, never io.EOF, whatever the path, and
// stores nothing.
func TestPutObjectTakesSizeBytes(t *testing.T) {
	cl, ctx := setup(t)
	src := osdtest.Payload(20<<20, 3)
	for _, tc := range []struct {
		name string
		size int
		opts client.PutOptions
	}{
		{"one op", 1 << 20, client.PutOptions{}},
		{"multipart", 17 << 20, client.PutOptions{PartSize: 5 << 20}},
		{"in pieces", 17 << 20, client.PutOptions{PartSize: 5 << 20, WholeETag: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReader{r: bytes.NewReader(src)}
			key := "size/" + tc.name
			info, err := cl.PutObject(ctx, "s3tests", key, r, int64(tc.size), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.n != tc.size || info.Size != int64(tc.size) {
				t.Fatalf("read %d bytes, stored %d; want %d", r.n, info.Size, tc.size)
			}
			if got, _, err := osdtest.Get(ctx, cl, "s3tests", key, client.GetOptions{}); err != nil || !bytes.Equal(got, src[:tc.size]) {
				t.Fatalf("read back %d bytes: %v", len(got), err)
			}
			for _, short := range []int{0, tc.size / 2} {
				_, err := cl.PutObject(ctx, "s3tests", key+"/short", bytes.NewReader(src[:short]), int64(tc.size), tc.opts)
				if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
					t.Fatalf("a body of %d of its %d bytes: %v, want io.ErrUnexpectedEOF alone", short, tc.size, err)
				}
				if _, err := cl.StatObject(ctx, "s3tests", key+"/short"); !errors.Is(err, client.ErrNoSuchKey) {
					t.Fatalf("after a short body: %v, want NoSuchKey", err)
				}
			}
		})
	}
	if _, err := cl.PutObject(ctx, "s3tests", "size/c", bytes.NewReader(src), -1, client.PutOptions{Concurrency: -3}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Concurrency -3: %v, want InvalidArgument", err)
	}
	// A part too: its size bytes, and a short one is io.ErrUnexpectedEOF.
	id, err := cl.NewMultipartUpload(ctx, "s3tests", "size/part", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &countingReader{r: bytes.NewReader(src)}
	if p, err := cl.PutObjectPart(ctx, "s3tests", "size/part", id, 1, r, 6<<20); err != nil || r.n != 6<<20 || p.Size != 6<<20 {
		t.Fatalf("part: %+v, read %d: %v", p, r.n, err)
	}
	if _, err := cl.PutObjectPart(ctx, "s3tests", "size/part", id, 2, bytes.NewReader(nil), 10); !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		t.Fatalf("an empty part of 10 bytes: %v", err)
	}
}

// TestGetRangePastTheEnd: an offset at or past the end is InvalidRange
// for an object stored in parts as for one in one op, and so is a length
// below -1.
func TestGetRangePastTheEnd(t *testing.T) {
	cl, ctx := setup(t)
	size := 12 << 20
	body := osdtest.Payload(size, 4)
	for key, o := range map[string]client.PutOptions{
		"range/one-op":    {},
		"range/multipart": {PartSize: 5 << 20},
		"range/pieces":    {PartSize: 5 << 20, WholeETag: true},
	} {
		if _, err := osdtest.Put(ctx, cl, "s3tests", key, body, o); err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{int64(size), int64(size) + 1, int64(size) + 100<<20} {
			if _, err := cl.GetObject(ctx, "s3tests", key, client.GetOptions{Range: true, Offset: off, Length: -1}); !errors.Is(err, client.ErrInvalidRange) {
				t.Fatalf("%s: offset %d of %d bytes: %v, want InvalidRange", key, off, size, err)
			}
		}
		if _, err := cl.GetObject(ctx, "s3tests", key, client.GetOptions{Range: true, Offset: 0, Length: -5}); !errors.Is(err, client.ErrInvalidRange) {
			t.Fatalf("%s: length -5: %v, want InvalidRange", key, err)
		}
		got, _, err := osdtest.Get(ctx, cl, "s3tests", key, client.GetOptions{Range: true, Offset: int64(size) - 3, Length: -1})
		if err != nil || !bytes.Equal(got, body[size-3:]) {
			t.Fatalf("%s: the last 3 bytes: %d, %v", key, len(got), err)
		}
	}
	// An empty last part reads as no bytes at the end (GET ?partNumber=N).
	id, err := cl.NewMultipartUpload(ctx, "s3tests", "range/empty-part", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var parts []client.CompletePart
	for i, b := range [][]byte{body[:5<<20], nil} {
		p, err := cl.PutObjectPart(ctx, "s3tests", "range/empty-part", id, i+1, bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, client.CompletePart{PartNumber: i + 1, ETag: p.ETag})
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "range/empty-part", id, parts); err != nil {
		t.Fatal(err)
	}
	if got, _, err := osdtest.Get(ctx, cl, "s3tests", "range/empty-part", client.GetOptions{Range: true, Offset: 5 << 20, Length: 0}); err != nil || len(got) != 0 {
		t.Fatalf("the empty last part: %d bytes, %v", len(got), err)
	}
	// An empty object reads at offset 0 (nothing), as S3 answers it.
	if _, err := osdtest.Put(ctx, cl, "s3tests", "range/empty", nil, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := osdtest.Get(ctx, cl, "s3tests", "range/empty", client.GetOptions{Range: true, Length: -1}); err != nil || len(got) != 0 {
		t.Fatalf("empty object at 0: %d bytes, %v", len(got), err)
	}
}
