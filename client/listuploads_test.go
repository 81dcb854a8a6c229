package client_test

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// entry is a listed upload ("key upload-id") or common prefix ("key/").
func entry(u client.MultipartUpload) string {
	if u.IsPrefix {
		return "prefix " + u.Key
	}
	return u.Key + " " + u.UploadID
}

// TestListUploadsPages: uploads of several keys, several of one key, and
// an internal one (and records of "a" that sort among those of "a/1"
// whatever their ids, as "a/UPLOADID" is under prefix "a/"), listed a page of 3 at a time from the markers each page
// answers, with and without a delimiter, give what one listing gives,
// once each and in its order; the internal upload is never listed.
func TestListUploadsPages(t *testing.T) {
	cl, ctx := setup(t)
	// a/<U+10FFFF>z sorts after a/ + U+10FFFF, where a listing goes on
	// after common prefix a/: it must not yield a/ again.
	keys := []string{"a", "a", "a", "a", "a.txt", "a/1", "a/1", "a/\U0010FFFFz", "b", "c/d/e", "c/f", "d", "d", "d", "d", "e f", "é", "z/1", "z/2", "z/3/4", "zz"}
	want := map[string]bool{}
	for _, k := range keys {
		id, err := cl.NewMultipartUpload(ctx, "s3tests", k, client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[k+" "+id] = true
	}
	if _, err := client.NewInternalUpload(ctx, cl, "s3tests", "d"); err != nil {
		t.Fatal(err)
	}

	all := func(opts client.UploadListOptions) []string {
		t.Helper()
		var got []string
		for u, err := range cl.ListUploads(ctx, "s3tests", opts) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, entry(u))
			if len(got) > 10*len(keys) {
				t.Fatalf("%+v: a listing that does not end: %q...", opts, got[:20])
			}
		}
		return got
	}
	paged := func(opts client.UploadListOptions) []string {
		t.Helper()
		var got []string
		for range 100 {
			page, err := cl.ListUploadsPage(ctx, "s3tests", opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Uploads) == 0 || len(page.Uploads) > opts.MaxUploads {
				t.Fatalf("a page of %d entries, max %d (after %q %q)", len(page.Uploads), opts.MaxUploads, opts.KeyMarker, opts.UploadIDMarker)
			}
			for _, u := range page.Uploads {
				got = append(got, entry(u))
			}
			if !page.IsTruncated {
				return got
			}
			opts.KeyMarker, opts.UploadIDMarker = page.NextKeyMarker, page.NextUploadIDMarker
		}
		t.Fatal("a listing that does not end")
		return nil
	}

	whole := all(client.UploadListOptions{})
	if len(whole) != len(keys) {
		t.Fatalf("listed %d uploads, want %d: %q", len(whole), len(keys), whole)
	}
	for _, e := range whole {
		if !want[e] {
			t.Fatalf("listed %q: not one of the uploads started (the internal one?)", e)
		}
	}
	// The documented order: by record, "KEY/UPLOADID".
	if !slices.IsSortedFunc(whole, func(a, b string) int {
		ka, ia, _ := strings.Cut(a, " ")
		kb, ib, _ := strings.Cut(b, " ")
		return strings.Compare(ka+"/"+ia, kb+"/"+ib)
	}) {
		t.Fatalf("not in record order: %q", whole)
	}
	for _, opts := range []client.UploadListOptions{
		{},
		{Delimiter: "/"},
		{Prefix: "z/", Delimiter: "/"},
		{Prefix: "d"},
		{Delimiter: "a"},
		{Prefix: "a", Delimiter: "/"},
	} {
		one := all(opts)
		for _, max := range []int{1, 3, len(one)} {
			opts.MaxUploads = max
			if got := paged(opts); !slices.Equal(got, one) {
				t.Fatalf("%+v: pages give\n%q\nwant\n%q", opts, got, one)
			}
		}
	}
	if got, want := all(client.UploadListOptions{Delimiter: "/"}), []string{"prefix a/", "prefix c/", "prefix z/"}; !containsAll(got, want) || len(got) != 13+3 {
		t.Fatalf("delimiter /: %q; want the uploads of a (4), a.txt, b, d (4), e f, é, zz and prefixes %q", got, want)
	}
	if got := all(client.UploadListOptions{Prefix: "a/"}); len(got) != 3 || !strings.HasPrefix(got[0], "a/1 ") || !strings.HasPrefix(got[1], "a/1 ") ||
		!strings.HasPrefix(got[2], "a/\U0010FFFFz ") {
		t.Fatalf("prefix a/: %q; want the uploads of a/1 and a/<U+10FFFF>z", got)
	}
	if got := all(client.UploadListOptions{Prefix: "z/", Delimiter: "/"}); len(got) != 3 || got[2] != "prefix z/3/" {
		t.Fatalf("prefix z/, delimiter /: %q; want z/1, z/2 and prefix z/3/", got)
	}

	// ListMultipartUploads, the old call, lists the same.
	ups, err := cl.ListMultipartUploads(ctx, "s3tests", "")
	if err != nil || len(ups) != len(whole) {
		t.Fatalf("ListMultipartUploads: %v, %d uploads; want %d", err, len(ups), len(whole))
	}
	if _, err := cl.ListUploadsPage(ctx, "nosuchbucket", client.UploadListOptions{}); client.ErrorCode(err) != "NoSuchBucket" {
		t.Fatalf("a missing bucket's uploads: %v", err)
	}
}

func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// TestListPagesAskForTheirPage: a page of 3 uploads, or of 3 objects,
// asks each primary for the 4 entries it may use (one more tells whether
// it is truncated), not for 1000: it moves a small part of what the whole
// listing of 120 moves.
func TestListPagesAskForTheirPage(t *testing.T) {
	cl, ctx := setup(t)
	const n = 120
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		if _, err := cl.NewMultipartUpload(ctx, "s3tests", key, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := osdtest.Put(ctx, cl, "s3tests", key, []byte("x"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(list iter.Seq2[string, error]) (int, error) {
		n := 0
		for _, err := range list {
			if err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	for _, l := range []struct {
		what string
		page func() (int, bool, error)
		all  iter.Seq2[string, error]
	}{
		{"uploads", func() (int, bool, error) {
			page, err := cl.ListUploadsPage(ctx, "s3tests", client.UploadListOptions{MaxUploads: 3})
			return len(page.Uploads), page.IsTruncated, err
		}, keysOf(cl.ListUploads(ctx, "s3tests", client.UploadListOptions{}), func(u client.MultipartUpload) string { return u.Key })},
		{"objects", func() (int, bool, error) {
			page, err := cl.ListObjectsPage(ctx, "s3tests", client.ListOptions{MaxKeys: 3})
			return len(page.Objects), page.IsTruncated, err
		}, keysOf(cl.ListObjects(ctx, "s3tests", client.ListOptions{}), func(o client.ObjectInfo) string { return o.Key })},
	} {
		before := client.BytesReceived(cl)
		got, truncated, err := l.page()
		if err != nil || got != 3 || !truncated {
			t.Fatalf("a page of 3 %s: %d, truncated %v, %v", l.what, got, truncated, err)
		}
		page := client.BytesReceived(cl) - before
		before = client.BytesReceived(cl)
		if got, err := count(l.all); err != nil || got != n {
			t.Fatalf("all %s: %d, %v; want %d", l.what, got, err, n)
		}
		all := client.BytesReceived(cl) - before
		t.Logf("%s: a page of 3 moved %d bytes, the whole listing %d", l.what, page, all)
		if page*4 > all {
			t.Errorf("a page of 3 %s moved %d bytes, the listing of all %d of them %d", l.what, page, n, all)
		}
	}
}

// keysOf is list's keys.
func keysOf[T any](list iter.Seq2[T, error], key func(T) string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for v, err := range list {
			if !yield(key(v), err) || err != nil {
				return
			}
		}
	}
}
