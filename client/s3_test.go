package client_test

// Behaviour ported from what ceph/s3-tests checks: multipart rules and
// ETags, ranges, listing order, delimiters and max-keys, overwrite
// atomicity, error codes. Against a real three-OSD cluster in process.

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

func setup(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	cl := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if err := cl.MakeBucket(ctx, "s3tests"); err != nil {
		t.Fatal(err)
	}
	return cl, ctx
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func TestMultipartExplicit(t *testing.T) {
	cl, ctx := setup(t)
	parts := [][]byte{osdtest.Payload(5<<20, 1), osdtest.Payload(5<<20, 2), osdtest.Payload(1000, 3)}
	id, err := cl.NewMultipartUpload(ctx, "s3tests", "mp/obj", client.PutOptions{ContentType: "text/x-test", UserMetadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	ups, err := cl.ListMultipartUploads(ctx, "s3tests", "mp/")
	if err != nil || len(ups) != 1 || ups[0].UploadID != id || ups[0].Key != "mp/obj" {
		t.Fatalf("uploads: %+v %v", ups, err)
	}
	var done []client.CompletePart
	etags := md5.New()
	// Out of order on purpose: parts are independent objects.
	for _, i := range []int{2, 0, 1} {
		p, err := cl.PutObjectPart(ctx, "s3tests", "mp/obj", id, i+1, bytes.NewReader(parts[i]), int64(len(parts[i])))
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		if p.ETag != md5hex(parts[i]) {
			t.Fatalf("part %d ETag %s", i+1, p.ETag)
		}
	}
	listed, err := cl.ListObjectParts(ctx, "s3tests", "mp/obj", id)
	if err != nil || len(listed) != 3 || listed[0].PartNumber != 1 || listed[2].Size != 1000 {
		t.Fatalf("parts: %+v %v", listed, err)
	}
	for i, p := range parts {
		done = append(done, client.CompletePart{PartNumber: i + 1, ETag: `"` + md5hex(p) + `"`})
		s := md5.Sum(p)
		etags.Write(s[:])
	}
	// S3's rules first.
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "mp/obj", id, []client.CompletePart{done[1], done[0], done[2]}); !errors.Is(err, client.ErrInvalidPartOrder) {
		t.Fatalf("unordered parts: %v", err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "mp/obj", id, []client.CompletePart{done[0], done[1], {PartNumber: 4, ETag: done[2].ETag}}); !errors.Is(err, client.ErrInvalidPart) {
		t.Fatalf("a part never uploaded: %v", err)
	}
	// Part numbers past 1 to 10000 are refused, never wrapped into
	// range: 2^32+1 is not part 1.
	nums := []int{0, -1, 10001}
	if big := uint64(1)<<32 + 1; strconv.IntSize == 64 {
		nums = append(nums, int(big))
	}
	for _, n := range nums {
		if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "mp/obj", id, []client.CompletePart{{PartNumber: n, ETag: done[0].ETag}}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("complete with part number %d: %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "mp/obj", id, []client.CompletePart{{PartNumber: 1, ETag: md5hex(nil)}}); !errors.Is(err, client.ErrInvalidPart) {
		t.Fatalf("a wrong ETag: %v", err)
	}
	info, err := cl.CompleteMultipartUpload(ctx, "s3tests", "mp/obj", id, done)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x-3", etags.Sum(nil))
	if info.ETag != want || info.Size != 10<<20+1000 {
		t.Fatalf("completed: %+v, want ETag %s", info, want)
	}
	obj, err := cl.GetObject(ctx, "s3tests", "mp/obj", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, slices.Concat(parts...)) {
		t.Fatalf("read back %d bytes: %v", len(got), err)
	}
	st, _ := obj.Stat()
	if st.ContentType != "text/x-test" || st.UserMetadata["k"] != "v" {
		t.Fatalf("metadata: %+v", st)
	}
	// ReadAt across the part boundary.
	buf := make([]byte, 100)
	if _, err := obj.ReadAt(buf, 5<<20-50); err != nil || !bytes.Equal(buf, slices.Concat(parts...)[5<<20-50:5<<20+50]) {
		t.Fatalf("ReadAt across parts: %v", err)
	}
	if ups, _ := cl.ListMultipartUploads(ctx, "s3tests", ""); len(ups) != 0 {
		t.Fatalf("uploads after completion: %+v", ups)
	}
	if _, err := cl.ListObjectParts(ctx, "s3tests", "mp/obj", id); !errors.Is(err, client.ErrNoSuchUpload) {
		t.Fatalf("parts of a completed upload: %v", err)
	}
	// The object's parts are the completed upload's: a part sent with its
	// id, under its key or another (a writer of another bucket who learnt
	// the id), is refused by the part's OSD, also from a client that does
	// not ask first, and the object reads the same.
	for _, key := range []string{"mp/obj", "elsewhere"} {
		if err := client.PutPartUnchecked(ctx, cl, "s3tests", key, id, 1, []byte("replaced")); !errors.Is(err, client.ErrNoSuchUpload) {
			t.Fatalf("a part of the completed upload under %s: %v, want NoSuchUpload", key, err)
		}
	}
	if obj, err = cl.GetObject(ctx, "s3tests", "mp/obj", client.GetOptions{}); err == nil {
		got, err = io.ReadAll(obj)
		obj.Close()
	}
	if err != nil || !bytes.Equal(got, slices.Concat(parts...)) {
		t.Fatalf("the object after refused parts: %d bytes, %v", len(got), err)
	}
}

func TestMultipartSmallPartAndAbort(t *testing.T) {
	cl, ctx := setup(t)
	id, err := cl.NewMultipartUpload(ctx, "s3tests", "small", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var done []client.CompletePart
	for i := 1; i <= 2; i++ {
		p, err := cl.PutObjectPart(ctx, "s3tests", "small", id, i, bytes.NewReader(osdtest.Payload(1<<20, uint64(i))), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, client.CompletePart{PartNumber: i, ETag: p.ETag})
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "small", id, done); !errors.Is(err, client.ErrEntityTooSmall) {
		t.Fatalf("1 MiB first part: %v", err)
	}
	if err := cl.AbortMultipartUpload(ctx, "s3tests", "small", id); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ListObjectParts(ctx, "s3tests", "small", id); !errors.Is(err, client.ErrNoSuchUpload) {
		t.Fatalf("parts after abort: %v", err)
	}
	if err := cl.AbortMultipartUpload(ctx, "s3tests", "small", id); !errors.Is(err, client.ErrNoSuchUpload) {
		t.Fatalf("second abort: %v", err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "s3tests", "small", id, done); !errors.Is(err, client.ErrNoSuchUpload) {
		t.Fatalf("complete after abort: %v", err)
	}
	// A part of an aborted upload, or of one that never was, is refused,
	// and leaves nothing behind.
	for _, up := range []string{id, "0123456789abcdef0123456789abcdef"} {
		if _, err := cl.PutObjectPart(ctx, "s3tests", "small", up, 3, bytes.NewReader([]byte("late")), 4); !errors.Is(err, client.ErrNoSuchUpload) {
			t.Fatalf("a part of upload %s: %v", up, err)
		}
	}
	if ups, err := cl.ListMultipartUploads(ctx, "s3tests", ""); err != nil || len(ups) != 0 {
		t.Fatalf("uploads after refused parts: %+v %v", ups, err)
	}
	if _, err := cl.StatObject(ctx, "s3tests", "small"); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("object of an aborted upload: %v", err)
	}
}

func TestAutomaticMultipartAndStreaming(t *testing.T) {
	cl, ctx := setup(t)
	data := osdtest.Payload(23<<20+5, 9)
	for _, size := range []int64{int64(len(data)), -1} {
		info, err := cl.PutObject(ctx, "s3tests", "auto", bytes.NewReader(data), size, client.PutOptions{PartSize: 5 << 20, Concurrency: 3})
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if info.Size != int64(len(data)) || info.ETag[len(info.ETag)-2:] != "-5" {
			t.Fatalf("size %d: %+v", size, info)
		}
		got, _, err := osdtest.Get(ctx, cl, "s3tests", "auto", client.GetOptions{})
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: read back %d bytes: %v", size, len(got), err)
		}
	}
	// A short reader is an error, not a short object.
	if _, err := cl.PutObject(ctx, "s3tests", "short", bytes.NewReader(data[:100]), 200, client.PutOptions{}); err == nil {
		t.Fatal("short reader accepted")
	}
	if ups, _ := cl.ListMultipartUploads(ctx, "s3tests", ""); len(ups) != 0 {
		t.Fatalf("uploads left over: %+v", ups)
	}
}

func TestRanges(t *testing.T) {
	cl, ctx := setup(t)
	data := osdtest.Payload(3<<20+17, 4)
	if _, err := osdtest.Put(ctx, cl, "s3tests", "r", data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, 1}, {1 << 20, 100}, {3<<20 + 16, 1}, {3<<20 + 10, -1}, {5, 1 << 30}} {
		got, _, err := osdtest.Get(ctx, cl, "s3tests", "r", client.GetOptions{Range: true, Offset: r[0], Length: r[1]})
		end := int64(len(data))
		if r[1] >= 0 {
			end = min(end, r[0]+r[1])
		}
		if err != nil || !bytes.Equal(got, data[r[0]:end]) {
			t.Fatalf("range %v: %d bytes, %v", r, len(got), err)
		}
	}
	if _, err := cl.GetObject(ctx, "s3tests", "r", client.GetOptions{Range: true, Offset: int64(len(data))}); !errors.Is(err, client.ErrInvalidRange) {
		t.Fatalf("range at the end: %v", err)
	}
	// Seek and read.
	obj, err := cl.GetObject(ctx, "s3tests", "r", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.Seek(-10, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	tail, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(tail, data[len(data)-10:]) {
		t.Fatalf("seek to the end: %v", err)
	}
}

func TestListingV2(t *testing.T) {
	cl, ctx := setup(t)
	keys := []string{"a", "a/b", "a/b/c", "a/c", "b", "b/x", "c", "é", "z/1", "z/2"}
	for _, k := range slices.Backward(keys) {
		if _, err := osdtest.Put(ctx, cl, "s3tests", k, []byte(k), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(opts client.ListOptions) []string {
		var out []string
		for o, err := range cl.ListObjects(ctx, "s3tests", opts) {
			if err != nil {
				t.Fatal(err)
			}
			if o.IsPrefix {
				out = append(out, "PRE "+o.Key)
			} else {
				out = append(out, o.Key)
			}
		}
		return out
	}
	for _, tc := range []struct {
		opts client.ListOptions
		want string
	}{
		{client.ListOptions{}, "[a a/b a/b/c a/c b b/x c z/1 z/2 é]"},
		{client.ListOptions{Delimiter: "/"}, "[a PRE a/ b PRE b/ c PRE z/ é]"},
		{client.ListOptions{Prefix: "a/", Delimiter: "/"}, "[a/b PRE a/b/ a/c]"},
		{client.ListOptions{StartAfter: "b"}, "[b/x c z/1 z/2 é]"},
		{client.ListOptions{MaxKeys: 3}, "[a a/b a/b/c]"},
		{client.ListOptions{Prefix: "q"}, "[]"},
	} {
		got := list(tc.opts)
		// Common prefixes sort with the keys, in byte order.
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%+v: %v, want %s", tc.opts, got, tc.want)
		}
	}
	for _, err := range cl.ListObjects(ctx, "nosuchbucket", client.ListOptions{}) {
		if !errors.Is(err, client.ErrNoSuchBucket) {
			t.Fatalf("listing a missing bucket: %v", err)
		}
	}
}

// TestOverwriteAtomicity: while one writer flips an object between two
// contents, readers only ever see one of the two, whole.
func TestOverwriteAtomicity(t *testing.T) {
	cl, ctx := setup(t)
	a, b := osdtest.Payload(2<<20+3, 1), osdtest.Payload(3<<20+5, 2)
	if _, err := osdtest.Put(ctx, cl, "s3tests", "flip", a, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if _, err := osdtest.Put(ctx, cl, "s3tests", "flip", [][]byte{a, b}[i%2], client.PutOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 30 {
		// Both versions fit one read window: each read is one op on one
		// state of the store.
		got, _, err := osdtest.Get(ctx, cl, "s3tests", "flip", client.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			t.Fatalf("read %d bytes that are neither version", len(got))
		}
	}
	stop.Store(true)
	wg.Wait()
}

// TestListingPages walks a listing page by page with continuation tokens,
// with and without a delimiter, and checks it equals the one-shot listing.
func TestListingPages(t *testing.T) {
	cl, ctx := setup(t)
	var keys []string
	for i := range 23 {
		k := fmt.Sprintf("d%d/k%02d", i%3, i)
		keys = append(keys, k)
		if _, err := osdtest.Put(ctx, cl, "s3tests", k, []byte("x"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(keys)
	walk := func(opts client.ListOptions) []string {
		var out []string
		for pages := 0; ; pages++ {
			p, err := cl.ListObjectsPage(ctx, "s3tests", opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Objects) > opts.MaxKeys {
				t.Fatalf("page of %d with max-keys %d", len(p.Objects), opts.MaxKeys)
			}
			for _, o := range p.Objects {
				out = append(out, o.Key)
			}
			if !p.IsTruncated {
				return out
			}
			if p.NextContinuationToken == "" || pages > 100 {
				t.Fatalf("truncated page without a token (page %d)", pages)
			}
			opts.ContinuationToken = p.NextContinuationToken
		}
	}
	if got := walk(client.ListOptions{MaxKeys: 5}); fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Fatalf("paged listing %v, want %v", got, keys)
	}
	if got := walk(client.ListOptions{MaxKeys: 1, Delimiter: "/"}); fmt.Sprint(got) != "[d0/ d1/ d2/]" {
		t.Fatalf("paged listing with a delimiter: %v", got)
	}
	if got := walk(client.ListOptions{MaxKeys: 4, StartAfter: "d1/", Prefix: "d1/"}); len(got) != 8 {
		t.Fatalf("paged listing of d1/: %v", got)
	}
	if _, err := cl.ListObjectsPage(ctx, "s3tests", client.ListOptions{ContinuationToken: "garbage!"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a bad token: %v", err)
	}
}

// TestListingPastMaxRune: a listing goes on after a common prefix past
// all of it, a key that goes on with U+10FFFF (the largest rune) right
// after the prefix too: by continuation tokens, and in the rounds a
// listing takes within itself.
func TestListingPastMaxRune(t *testing.T) {
	cl, ctx := setup(t)
	keys := []string{"a/\U0010FFFFz", "b", "c"}
	for i := range 20 {
		// Keys of the prefix, and after it, on every primary.
		keys = append(keys, fmt.Sprintf("a/%02d", i), fmt.Sprintf("d%02d", i))
	}
	for _, k := range keys {
		if _, err := osdtest.Put(ctx, cl, "s3tests", k, []byte("x"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for o, err := range cl.ListObjects(ctx, "s3tests", client.ListOptions{Delimiter: "/"}) {
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, o.Key)
	}
	if len(want) != 23 || want[0] != "a/" {
		t.Fatalf("listing with a delimiter: %q", want)
	}
	var paged []string
	opts := client.ListOptions{Delimiter: "/", MaxKeys: 1}
	for pages := 0; ; pages++ {
		p, err := cl.ListObjectsPage(ctx, "s3tests", opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			paged = append(paged, o.Key)
		}
		if !p.IsTruncated || pages > 30 {
			break
		}
		opts.ContinuationToken = p.NextContinuationToken
	}
	if !slices.Equal(paged, want) {
		t.Errorf("by pages of 1: %q, want %q", paged, want)
	}
	var rounds []string
	for o, err := range client.ListBatch(ctx, cl, "s3tests", client.ListOptions{Delimiter: "/"}, 1) {
		if err != nil {
			t.Fatal(err)
		}
		if rounds = append(rounds, o.Key); len(rounds) > 100 {
			break
		}
	}
	if !slices.Equal(rounds, want) {
		t.Errorf("in rounds from 1 entry a primary: %q, want %q", rounds, want)
	}
}

// TestMultipartPartsCollected: overwriting or deleting a multipart object
// deletes its parts (they are hidden objects of their own PGs).
func TestMultipartPartsCollected(t *testing.T) {
	cl, ctx := setup(t)
	data := osdtest.Payload(11<<20, 5)
	for round, finish := range []func() error{
		func() error {
			_, err := osdtest.Put(ctx, cl, "s3tests", "big", []byte("small now"), client.PutOptions{})
			return err
		},
		func() error { return cl.RemoveObject(ctx, "s3tests", "big") },
	} {
		if _, err := cl.PutObject(ctx, "s3tests", "big", bytes.NewReader(data), int64(len(data)), client.PutOptions{PartSize: 5 << 20}); err != nil {
			t.Fatal(err)
		}
		if n := hiddenParts(t, cl, ctx); n != 3 {
			t.Fatalf("round %d: %d parts stored, want 3", round, n)
		}
		if err := finish(); err != nil {
			t.Fatal(err)
		}
		osdtest.Eventually(t, 10*time.Second, "parts deleted", func() bool { return hiddenParts(t, cl, ctx) == 0 })
	}
}

// hiddenParts counts the parts stored in the multipart bucket.
func hiddenParts(t *testing.T, cl *client.Client, ctx context.Context) int {
	t.Helper()
	n := 0
	for o, err := range client.ListHidden(ctx, cl) {
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Key) == 38 { // UPLOADID/NNNNN
			n++
		}
	}
	return n
}

// TestMultipartReadVerifiesParts corrupts nothing but checks the reader's
// promise: a sequential read of a multipart object reads each part whole,
// so each part's CRC32C is checked (a part read in pieces could not be).
func TestMultipartReadVerifiesParts(t *testing.T) {
	cl, ctx := setup(t)
	data := osdtest.Payload(17<<20+9, 8)
	if _, err := cl.PutObject(ctx, "s3tests", "mp", bytes.NewReader(data), int64(len(data)), client.PutOptions{PartSize: 6 << 20}); err != nil {
		t.Fatal(err)
	}
	obj, err := cl.GetObject(ctx, "s3tests", "mp", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	var got []byte
	buf := make([]byte, 1<<20) // small reads: the window, not the caller, decides the fetches
	for {
		n, err := obj.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("multipart object read back wrong")
	}
	if n := client.WholePartFetches(obj); n != 3 {
		t.Fatalf("%d whole-part fetches, want 3 (one per part, each CRC-checked)", n)
	}
}

// TestErrorCodes: each S3 error a user can provoke comes back typed, with
// its S3 code in the message.
func TestErrorCodes(t *testing.T) {
	cl, ctx := setup(t)
	if _, err := osdtest.Put(ctx, cl, "s3tests", "k", []byte("v"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	long := string(bytes.Repeat([]byte("k"), 1025))
	cases := []struct {
		name string
		err  error
		want error
		code string
	}{
		{"make an existing bucket", cl.MakeBucket(ctx, "s3tests"), client.ErrBucketAlreadyExists, "BucketAlreadyExists"},
		{"make a bad name", cl.MakeBucket(ctx, "a_b"), client.ErrInvalidBucketName, "InvalidBucketName"},
		{"remove a full bucket", cl.RemoveBucket(ctx, "s3tests"), client.ErrBucketNotEmpty, "BucketNotEmpty"},
		{"remove a missing bucket", cl.RemoveBucket(ctx, "nosuchbucket"), client.ErrNoSuchBucket, "NoSuchBucket"},
		{"stat a missing key", func() error { _, err := cl.StatObject(ctx, "s3tests", "nope"); return err }(), client.ErrNoSuchKey, "NoSuchKey"},
		{"put to a missing bucket", func() error {
			_, err := osdtest.Put(ctx, cl, "nosuchbucket", "k", nil, client.PutOptions{})
			return err
		}(), client.ErrNoSuchBucket, "NoSuchBucket"},
		{"a key too long", func() error { _, err := osdtest.Put(ctx, cl, "s3tests", long, nil, client.PutOptions{}); return err }(), client.ErrKeyTooLong, "KeyTooLongError"},
		{"an empty key", func() error { _, err := cl.StatObject(ctx, "s3tests", ""); return err }(), client.ErrInvalidKey, "InvalidKey"},
		{"an unknown upload", cl.AbortMultipartUpload(ctx, "s3tests", "k", "0123456789abcdef0123456789abcdef"), client.ErrNoSuchUpload, "NoSuchUpload"},
		{"a range past the end", func() error {
			_, err := cl.GetObject(ctx, "s3tests", "k", client.GetOptions{Range: true, Offset: 9})
			return err
		}(), client.ErrInvalidRange, "InvalidRange"},
		// Bad input to a put is refused before anything is sent.
		{"a size below -1", func() error {
			_, err := cl.PutObject(ctx, "s3tests", "k", bytes.NewReader([]byte("v")), -5, client.PutOptions{})
			return err
		}(), client.ErrInvalidArgument, "InvalidArgument"},
		{"a content type with a line break", func() error {
			_, err := osdtest.Put(ctx, cl, "s3tests", "k", nil, client.PutOptions{ContentType: "text/plain\r\nX-Evil: 1"})
			return err
		}(), client.ErrInvalidArgument, "InvalidArgument"},
		{"a PartSize out of range", func() error {
			_, err := osdtest.Put(ctx, cl, "s3tests", "k", nil, client.PutOptions{PartSize: 1})
			return err
		}(), client.ErrInvalidArgument, "InvalidArgument"},
		{"a part of unknown size", func() error {
			_, err := cl.PutObjectPart(ctx, "s3tests", "k", "0123456789abcdef0123456789abcdef", 1, bytes.NewReader(nil), -1)
			return err
		}(), client.ErrInvalidArgument, "InvalidArgument"},
	}
	for _, tc := range cases {
		var ce *client.Error
		if !errors.Is(tc.err, tc.want) || !errors.As(tc.err, &ce) || !strings.HasPrefix(ce.Error(), tc.code) {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.code)
		}
	}
}

// TestOverwriteAtomicityLarge: objects larger than one read window are
// read in several ops; a read that straddles an overwrite or a delete
// still returns the version it began on, whole (the primary keeps it for
// the reader: store.Options.KeepReplacedFor), as S3 does.
func TestOverwriteAtomicityLarge(t *testing.T) {
	cl, ctx := setup(t)
	a, b := osdtest.Payload(12<<20, 1), osdtest.Payload(12<<20, 2)
	if _, err := osdtest.Put(ctx, cl, "s3tests", "flip", a, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// One read, its first window fetched, then an overwrite and a delete.
	obj, err := cl.GetObject(ctx, "s3tests", "flip", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(obj, head); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "s3tests", "flip", b, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveObject(ctx, "s3tests", "flip"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || !bytes.Equal(append(head, rest...), a) {
		t.Fatalf("a read across an overwrite and a delete: %d bytes, %v", len(head)+len(rest), err)
	}
	if _, err := osdtest.Put(ctx, cl, "s3tests", "flip", a, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; !stop.Load(); i++ {
			if _, err := osdtest.Put(ctx, cl, "s3tests", "flip", [][]byte{a, b}[i%2], client.PutOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := range 12 {
		got, _, err := osdtest.Get(ctx, cl, "s3tests", "flip", client.GetOptions{})
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			t.Fatalf("read %d bytes that are neither version", len(got))
		}
	}
	stop.Store(true)
	wg.Wait()
}

// TestListingStopsWithItsContext: a listing whose context ends yields the
// context's error next, not the rest of a page it had fetched.
func TestListingStopsWithItsContext(t *testing.T) {
	cl, ctx := setup(t)
	for i := range 20 {
		if _, err := osdtest.Put(ctx, cl, "s3tests", fmt.Sprintf("c%02d", i), nil, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := 0
	var last error
	for _, err := range cl.ListObjects(lctx, "s3tests", client.ListOptions{Prefix: "c"}) {
		if err != nil {
			last = err
			break
		}
		if n++; n == 5 {
			cancel()
		}
	}
	if n != 5 || !errors.Is(last, context.Canceled) {
		t.Fatalf("a listing cancelled at its 5th entry: %d entries, then %v", n, last)
	}
}
