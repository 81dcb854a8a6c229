package store_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/osd/store"
)

func listKeys(t *testing.T, e *env, bucket string, o store.ListOptions) (keys, prefixes []string, truncated bool) {
	t.Helper()
	res, err := e.s.List(e.ctx, bucket, o)
	must(t, err)
	for _, obj := range res.Objects {
		keys = append(keys, obj.Key)
		if obj.Meta == nil || obj.Meta.Etag != "etag" {
			t.Fatalf("object %q without its meta", obj.Key)
		}
	}
	return keys, res.CommonPrefixes, res.Truncated
}

// model is the reference S3 ListObjectsV2 over a sorted key set.
func model(all []string, o store.ListOptions) (keys, prefixes []string, truncated bool) {
	max := o.MaxKeys
	if max == 0 {
		max = 1000
	}
	n := 0
	for _, k := range all {
		if !strings.HasPrefix(k, o.Prefix) || k <= o.StartAfter || (o.Include != nil && !o.Include(k)) {
			continue
		}
		item, isCP := k, false
		if o.Delimiter != "" {
			if i := strings.Index(k[len(o.Prefix):], o.Delimiter); i >= 0 {
				item, isCP = k[:len(o.Prefix)+i+len(o.Delimiter)], true
				if item == o.StartAfter || (len(prefixes) > 0 && prefixes[len(prefixes)-1] == item) {
					continue
				}
			}
		}
		if n == max {
			return keys, prefixes, true
		}
		n++
		if isCP {
			prefixes = append(prefixes, item)
		} else {
			keys = append(keys, item)
		}
	}
	return keys, prefixes, false
}

func TestList(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	e.createBucket(0, "b2") // a neighbour whose keys must never leak in
	all := []string{
		"a", "a/1", "a/2", "a/b/c", "ab", "b/x", "b/y/z", "c", "c/",
		"zz", "é", "éa/1", "日本/語", "\x01low", "~tilde", "a\u07ffz", "a/\U0010ffff", "\u007f",
	}
	for i, k := range all {
		e.put(uint32(i%5), "b", k, []byte(k))
	}
	e.put(0, "b2", "a/1", []byte("other"))
	slices.Sort(all) // byte order

	include := func(k string) bool { return len(k)%2 == 1 }
	cases := []store.ListOptions{
		{},
		{MaxKeys: 3},
		{Prefix: "a"},
		{Prefix: "a/"},
		{Delimiter: "/"},
		{Delimiter: "/", MaxKeys: 2},
		{Delimiter: "/", Prefix: "a/"},
		{Delimiter: "/", StartAfter: "a/"},
		{Delimiter: "/", StartAfter: "a/1"},
		{StartAfter: "b"},
		{StartAfter: "é"},
		{Prefix: "é"},
		{Delimiter: "語"},
		{Delimiter: "/", Include: include},
		{Include: include, MaxKeys: 2},
		{Prefix: "nothing"},
		{Prefix: "b", StartAfter: "zzz"},
		{Delimiter: "/", MaxKeys: 1, StartAfter: "b/"},
	}
	for _, o := range cases {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			keys, prefixes, trunc := listKeys(t, e, "b", o)
			wk, wp, wt := model(all, o)
			if !slices.Equal(keys, wk) || !slices.Equal(prefixes, wp) || trunc != wt {
				t.Fatalf("got keys %q prefixes %q truncated %v\nwant keys %q prefixes %q truncated %v", keys, prefixes, trunc, wk, wp, wt)
			}
		})
	}

	// Paging with StartAfter = the last item visits everything exactly once.
	for _, o := range []store.ListOptions{{MaxKeys: 2}, {MaxKeys: 2, Delimiter: "/"}, {MaxKeys: 1, Delimiter: "/", Include: include}} {
		var got []string
		for {
			res, err := e.s.List(e.ctx, "b", o)
			must(t, err)
			var page []string
			for _, obj := range res.Objects {
				page = append(page, obj.Key)
			}
			page = append(page, res.CommonPrefixes...)
			slices.Sort(page)
			got = append(got, page...)
			if !res.Truncated {
				break
			}
			o.StartAfter = page[len(page)-1]
		}
		o.StartAfter, o.MaxKeys = "", 0
		wk, wp, _ := model(all, o)
		want := append(wk, wp...)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("paged %+v: %q, want %q", o, got, want)
		}
	}

	_, err := e.s.List(e.ctx, "nob", store.ListOptions{})
	wantErr(t, err, store.ErrNoSuchBucket)
}

// TestListSeeksPastCommonPrefix: a common prefix over many keys costs one
// seek, so a page of 2 over 2000 rolled-up keys must not call Include for
// each of them.
func TestListSeeksPastCommonPrefix(t *testing.T) {
	e := newEnv(t, store.Options{})
	e.createBucket(0, "b")
	for i := range 200 {
		e.put(0, "b", fmt.Sprintf("dir/%04d", i), nil)
	}
	e.put(0, "b", "file", nil)
	calls := 0
	res, err := e.s.List(e.ctx, "b", store.ListOptions{Delimiter: "/", Include: func(string) bool { calls++; return true }})
	must(t, err)
	if !slices.Equal(res.CommonPrefixes, []string{"dir/"}) || len(res.Objects) != 1 || res.Objects[0].Key != "file" {
		t.Fatalf("result %v %v", res.CommonPrefixes, res.Objects)
	}
	if calls > 2 {
		t.Fatalf("Include called %d times: the listing walked the common prefix", calls)
	}
}
