package client_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/client"
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
	keys := []string{"a", "a", "a", "a", "a.txt", "a/1", "a/1", "b", "c/d/e", "c/f", "d", "d", "d", "d", "e f", "é", "z/1", "z/2", "z/3/4", "zz"}
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
	if got := all(client.UploadListOptions{Prefix: "a/"}); len(got) != 2 || !strings.HasPrefix(got[0], "a/1 ") || !strings.HasPrefix(got[1], "a/1 ") {
		t.Fatalf("prefix a/: %q; want the uploads of a/1 alone", got)
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
