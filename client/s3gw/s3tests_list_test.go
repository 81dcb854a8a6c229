package s3gw_test

// ListObjects (v1 and v2) cases of ceph/s3-tests: test_bucket_list_* and
// test_bucket_listv2_*.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

func keysOf(objs []types.Object) []string {
	var keys []string
	for _, o := range objs {
		keys = append(keys, *o.Key)
	}
	return keys
}

func prefixesOf(cps []types.CommonPrefix) []string {
	var ps []string
	for _, p := range cps {
		ps = append(ps, *p.Prefix)
	}
	return ps
}

func (e *env) listV1(t *testing.T, in *s3.ListObjectsInput) *s3.ListObjectsOutput {
	t.Helper()
	out, err := e.s3.ListObjects(e.ctx, in)
	if err != nil {
		t.Fatalf("ListObjects %+v: %v", in, err)
	}
	return out
}

func (e *env) listV2(t *testing.T, in *s3.ListObjectsV2Input) *s3.ListObjectsV2Output {
	t.Helper()
	out, err := e.s3.ListObjectsV2(e.ctx, in)
	if err != nil {
		t.Fatalf("ListObjectsV2 %+v: %v", in, err)
	}
	return out
}

// validateList is s3-tests' validate_bucket_list: one v1 page, checked;
// it returns the page's NextMarker ("" when absent).
func (e *env) validateList(t *testing.T, bucket, prefix, delim, marker string, maxKeys int32, truncated bool,
	keys, prefixes []string, nextMarker string) string {
	t.Helper()
	out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix), Delimiter: aws.String(delim),
		Marker: aws.String(marker), MaxKeys: aws.Int32(maxKeys)})
	what := fmt.Sprintf("prefix %q marker %q max-keys %d", prefix, marker, maxKeys)
	if *out.IsTruncated != truncated {
		t.Fatalf("%s: IsTruncated %v", what, *out.IsTruncated)
	}
	next := aws.ToString(out.NextMarker)
	if next != nextMarker {
		t.Fatalf("%s: NextMarker %q, want %q", what, next, nextMarker)
	}
	wantStrings(t, what+": keys", keysOf(out.Contents), keys)
	wantStrings(t, what+": prefixes", prefixesOf(out.CommonPrefixes), prefixes)
	return next
}

// validateListV2 is validate_bucket_listv2: a first page (token nil:
// start-after "") or a continued one; last: no NextContinuationToken.
func (e *env) validateListV2(t *testing.T, bucket, prefix, delim string, token *string, maxKeys int32, truncated bool,
	keys, prefixes []string, last bool) *string {
	t.Helper()
	in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix), Delimiter: aws.String(delim), MaxKeys: aws.Int32(maxKeys)}
	if token != nil {
		in.ContinuationToken = token
	} else {
		in.StartAfter = aws.String("")
	}
	out := e.listV2(t, in)
	what := fmt.Sprintf("prefix %q token %v max-keys %d", prefix, deref(token), maxKeys)
	if *out.IsTruncated != truncated {
		t.Fatalf("%s: IsTruncated %v", what, *out.IsTruncated)
	}
	if last && out.NextContinuationToken != nil {
		t.Fatalf("%s: NextContinuationToken %q on the last page", what, *out.NextContinuationToken)
	}
	if truncated && out.NextContinuationToken == nil {
		t.Fatalf("%s: truncated without NextContinuationToken", what)
	}
	wantStrings(t, what+": keys", keysOf(out.Contents), keys)
	wantStrings(t, what+": prefixes", prefixesOf(out.CommonPrefixes), prefixes)
	return out.NextContinuationToken
}

// listed is one page of a listing, v1 or v2 alike; after is the echoed
// Marker (v1) or StartAfter (v2).
type listed struct {
	delimiter, prefix, after *string
	keys, prefixes           []string
	truncated                bool
	maxKeys                  int32
}

// listReq is a listing request, v1 or v2 alike: after is the marker (v1)
// or start-after (v2).
type listReq struct {
	prefix, delim, after *string
	maxKeys              *int32
	enc                  types.EncodingType
}

// list asks for one page, as v1 or v2 (the s3-tests pairs
// test_bucket_list_X and test_bucket_listv2_X); a v2 page's KeyCount is
// checked on the way.
func (e *env) list(t *testing.T, v2 bool, bucket string, r listReq) listed {
	t.Helper()
	if v2 {
		out := e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: r.prefix, Delimiter: r.delim, MaxKeys: r.maxKeys,
			EncodingType: r.enc, StartAfter: r.after})
		if kc := aws.ToInt32(out.KeyCount); int(kc) != len(out.Contents)+len(out.CommonPrefixes) {
			t.Fatalf("KeyCount %d, %d keys and %d prefixes", kc, len(out.Contents), len(out.CommonPrefixes))
		}
		return listed{out.Delimiter, out.Prefix, out.StartAfter, keysOf(out.Contents), prefixesOf(out.CommonPrefixes),
			*out.IsTruncated, aws.ToInt32(out.MaxKeys)}
	}
	out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(bucket), Prefix: r.prefix, Delimiter: r.delim, MaxKeys: r.maxKeys,
		EncodingType: r.enc, Marker: r.after})
	return listed{out.Delimiter, out.Prefix, out.Marker, keysOf(out.Contents), prefixesOf(out.CommonPrefixes),
		*out.IsTruncated, aws.ToInt32(out.MaxKeys)}
}

// wantPage checks a page's keys and IsTruncated.
func wantPage(t *testing.T, what string, got listed, keys []string, truncated bool) {
	t.Helper()
	wantStrings(t, what+": keys", got.keys, keys)
	if got.truncated != truncated {
		t.Fatalf("%s: IsTruncated %v", what, got.truncated)
	}
}

// listCase is one listing asked of both versions: the bucket's keys, the
// request, and what must come back.
type listCase struct {
	name           string // the v1 case, bucket_list_X; bucket_listv2_X is the v2 one
	keys           []string
	prefix, delim  *string
	maxKeys        *int32
	enc            types.EncodingType
	wantKeys       []string
	wantPrefixes   []string
	wantDelim      *string // nil: no Delimiter in the answer
	wantPrefix     *string // checked when checkPrefix
	checkPrefix    bool
	wantTruncated  bool
	onlyV1, onlyV2 bool
}

var listCases = []listCase{
	{name: "bucket_list_delimiter_basic", keys: []string{"foo/bar", "foo/bar/xyzzy", "quux/thud", "asdf"}, delim: aws.String("/"),
		wantKeys: []string{"asdf"}, wantPrefixes: []string{"foo/", "quux/"}, wantDelim: aws.String("/")},
	{name: "bucket_list_encoding_basic", keys: []string{"foo+1/bar", "foo/bar/xyzzy", "quux ab/thud", "asdf+b"}, delim: aws.String("/"),
		enc: types.EncodingTypeUrl, wantKeys: []string{"asdf%2Bb"}, wantPrefixes: []string{"foo%2B1/", "foo/", "quux%20ab/"}, wantDelim: aws.String("/")},
	{name: "bucket_list_delimiter_alt", keys: []string{"bar", "baz", "cab", "foo"}, delim: aws.String("a"),
		wantKeys: []string{"foo"}, wantPrefixes: []string{"ba", "ca"}, wantDelim: aws.String("a")},
	{name: "bucket_list_delimiter_percentage", keys: []string{"b%ar", "b%az", "c%ab", "foo"}, delim: aws.String("%"),
		wantKeys: []string{"foo"}, wantPrefixes: []string{"b%", "c%"}, wantDelim: aws.String("%")},
	{name: "bucket_list_delimiter_whitespace", keys: []string{"b ar", "b az", "c ab", "foo"}, delim: aws.String(" "),
		wantKeys: []string{"foo"}, wantPrefixes: []string{"b ", "c "}, wantDelim: aws.String(" ")},
	{name: "bucket_list_delimiter_dot", keys: []string{"b.ar", "b.az", "c.ab", "foo"}, delim: aws.String("."),
		wantKeys: []string{"foo"}, wantPrefixes: []string{"b.", "c."}, wantDelim: aws.String(".")},
	{name: "bucket_list_delimiter_unreadable", keys: []string{"bar", "baz", "cab", "foo"}, delim: aws.String("\x0a"),
		wantKeys: []string{"bar", "baz", "cab", "foo"}, wantDelim: aws.String("\x0a")},
	{name: "bucket_list_delimiter_empty", keys: []string{"bar", "baz", "cab", "foo"}, delim: aws.String(""),
		wantKeys: []string{"bar", "baz", "cab", "foo"}},
	{name: "bucket_list_delimiter_none", keys: []string{"bar", "baz", "cab", "foo"},
		wantKeys: []string{"bar", "baz", "cab", "foo"}},
	{name: "bucket_list_delimiter_not_exist", keys: []string{"bar", "baz", "cab", "foo"}, delim: aws.String("/"),
		wantKeys: []string{"bar", "baz", "cab", "foo"}, wantDelim: aws.String("/")},
	{name: "bucket_list_prefix_basic", keys: []string{"foo/bar", "foo/baz", "quux"}, prefix: aws.String("foo/"),
		wantKeys: []string{"foo/bar", "foo/baz"}, wantPrefix: aws.String("foo/"), checkPrefix: true},
	{name: "bucket_list_prefix_alt", keys: []string{"bar", "baz", "foo"}, prefix: aws.String("ba"),
		wantKeys: []string{"bar", "baz"}, wantPrefix: aws.String("ba"), checkPrefix: true},
	// _empty and _none send the same request in s3-tests (Prefix='').
	{name: "bucket_list_prefix_empty", keys: []string{"foo/bar", "foo/baz", "quux"}, prefix: aws.String(""),
		wantKeys: []string{"foo/bar", "foo/baz", "quux"}, wantPrefix: aws.String(""), checkPrefix: true},
	{name: "bucket_list_prefix_none", keys: []string{"foo/bar", "foo/baz", "quux"}, prefix: aws.String(""),
		wantKeys: []string{"foo/bar", "foo/baz", "quux"}, wantPrefix: aws.String(""), checkPrefix: true},
	{name: "bucket_list_prefix_not_exist", keys: []string{"foo/bar", "foo/baz", "quux"}, prefix: aws.String("d"),
		wantPrefix: aws.String("d"), checkPrefix: true},
	{name: "bucket_list_prefix_unreadable", keys: []string{"foo/bar", "foo/baz", "quux"}, prefix: aws.String("\x0a"),
		wantPrefix: aws.String("\x0a"), checkPrefix: true},
	{name: "bucket_list_prefix_delimiter_basic", keys: []string{"foo/bar", "foo/baz/xyzzy", "quux/thud", "asdf"},
		prefix: aws.String("foo/"), delim: aws.String("/"), wantKeys: []string{"foo/bar"}, wantPrefixes: []string{"foo/baz/"},
		wantDelim: aws.String("/"), wantPrefix: aws.String("foo/"), checkPrefix: true},
	{name: "bucket_list_prefix_delimiter_alt", keys: []string{"bar", "bazar", "cab", "foo"},
		prefix: aws.String("ba"), delim: aws.String("a"), wantKeys: []string{"bar"}, wantPrefixes: []string{"baza"},
		wantDelim: aws.String("a"), wantPrefix: aws.String("ba"), checkPrefix: true},
	{name: "bucket_list_prefix_delimiter_prefix_not_exist", keys: []string{"b/a/r", "b/a/c", "b/a/g", "g"},
		prefix: aws.String("/"), delim: aws.String("d"), wantDelim: aws.String("d")},
	{name: "bucket_list_prefix_delimiter_delimiter_not_exist", keys: []string{"b/a/c", "b/a/g", "b/a/r", "g"},
		prefix: aws.String("b"), delim: aws.String("z"), wantKeys: []string{"b/a/c", "b/a/g", "b/a/r"}, wantDelim: aws.String("z")},
	{name: "bucket_list_prefix_delimiter_prefix_delimiter_not_exist", keys: []string{"b/a/c", "b/a/g", "b/a/r", "g"},
		prefix: aws.String("y"), delim: aws.String("z"), wantDelim: aws.String("z")},
	{name: "bucket_list_maxkeys_zero", keys: []string{"bar", "baz", "foo", "quxx"}, maxKeys: aws.Int32(0)},
	{name: "bucket_list_special_prefix", keys: []string{"_bla/1", "_bla/2", "_bla/3", "_bla/4", "abcd"}, prefix: aws.String("_bla/"),
		wantKeys: []string{"_bla/1", "_bla/2", "_bla/3", "_bla/4"}, onlyV1: true},
	// v1's twin is in s3testsListing, paged by validateList as s3-tests does.
	{name: "bucket_list_delimiter_prefix_ends_with_delimiter", keys: []string{"asdf/"}, prefix: aws.String("asdf/"), delim: aws.String("/"),
		wantKeys: []string{"asdf/"}, wantDelim: aws.String("/"), onlyV2: true},
}

func listCaseTests() []s3testsCase {
	var cs []s3testsCase
	for _, c := range listCases {
		for _, v2 := range []bool{false, true} {
			if (v2 && c.onlyV1) || (!v2 && c.onlyV2) {
				continue
			}
			name := c.name
			if v2 {
				name = "bucket_listv2_" + strings.TrimPrefix(name, "bucket_list_")
			}
			cs = append(cs, s3testsCase{name, func(t *testing.T, e *env) {
				bucket := e.createObjects(t, c.keys...)
				got := e.list(t, v2, bucket, listReq{prefix: c.prefix, delim: c.delim, maxKeys: c.maxKeys, enc: c.enc})
				wantStrings(t, "keys", got.keys, c.wantKeys)
				wantStrings(t, "common prefixes", got.prefixes, c.wantPrefixes)
				wantPtr(t, "Delimiter", got.delimiter, c.wantDelim)
				if c.checkPrefix {
					wantPtr(t, "Prefix", got.prefix, c.wantPrefix)
				}
				if got.truncated != c.wantTruncated {
					t.Fatalf("IsTruncated %v", got.truncated)
				}
			}})
		}
	}
	return cs
}

var s3testsListing = append(listCaseTests(), []s3testsCase{
	// test_bucket_list_empty, test_bucket_list_distinct
	{"bucket_list_empty", func(t *testing.T, e *env) {
		out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(e.newBucket(t))})
		wantStrings(t, "keys", keysOf(out.Contents), nil)
	}},
	{"bucket_list_distinct", func(t *testing.T, e *env) {
		e.createObjects(t, "asdf")
		out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(e.newBucket(t))})
		wantStrings(t, "keys of the other bucket", keysOf(out.Contents), nil)
	}},
	// test_bucket_list_many, test_bucket_listv2_many
	{"bucket_list_many", func(t *testing.T, e *env) { manyCase(t, e, false) }},
	{"bucket_listv2_many", func(t *testing.T, e *env) { manyCase(t, e, true) }},
	{"basic_key_count", func(t *testing.T, e *env) {
		b := e.createObjects(t, "0", "1", "2", "3", "4")
		if out := e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b)}); aws.ToInt32(out.KeyCount) != 5 {
			t.Fatalf("KeyCount %d", aws.ToInt32(out.KeyCount))
		}
	}},
	// test_bucket_list_delimiter_prefix, test_bucket_list_delimiter_prefix_underscore
	{"bucket_list_delimiter_prefix", func(t *testing.T, e *env) { delimiterPrefixV1(t, e, "asdf", "boo", "cquux") }},
	{"bucket_list_delimiter_prefix_underscore", func(t *testing.T, e *env) { delimiterPrefixV1(t, e, "_obj1_", "_under1", "_under2") }},
	{"bucket_listv2_delimiter_prefix", func(t *testing.T, e *env) { delimiterPrefixV2(t, e, "asdf", "boo", "cquux") }},
	{"bucket_listv2_delimiter_prefix_underscore", func(t *testing.T, e *env) { delimiterPrefixV2(t, e, "_obj1_", "_under1", "_under2") }},
	{"bucket_list_delimiter_prefix_ends_with_delimiter", func(t *testing.T, e *env) {
		b := e.createObjects(t, "asdf/")
		e.validateList(t, b, "asdf/", "/", "", 1000, false, []string{"asdf/"}, nil, "")
	}},
	{"bucket_list_delimiter_not_skip_special", func(t *testing.T, e *env) {
		keys := []string{"0/"}
		for i := 1000; i < 1999; i++ {
			keys = append(keys, fmt.Sprintf("0/%d", i))
		}
		tail := []string{"1999", "1999#", "1999+", "2000"}
		b := e.createObjects(t, append(keys, tail...)...)
		out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(b), Delimiter: aws.String("/")})
		wantStrings(t, "keys", keysOf(out.Contents), tail)
		wantStrings(t, "prefixes", prefixesOf(out.CommonPrefixes), []string{"0/"})
	}},
	// test_bucket_list_maxkeys_one, _none and their v2 twins
	{"bucket_list_maxkeys_one", func(t *testing.T, e *env) { maxKeysOneCase(t, e, false) }},
	{"bucket_listv2_maxkeys_one", func(t *testing.T, e *env) { maxKeysOneCase(t, e, true) }},
	{"bucket_list_maxkeys_none", func(t *testing.T, e *env) { maxKeysNoneCase(t, e, false) }},
	{"bucket_listv2_maxkeys_none", func(t *testing.T, e *env) { maxKeysNoneCase(t, e, true) }},
	{"bucket_list_maxkeys_invalid", func(t *testing.T, e *env) {
		b := e.createObjects(t, "bar")
		resp, body := send(t, signed(t, http.MethodGet, e.url+"/"+b+"?max-keys=blah", nil), "")
		wantS3Error(t, "max-keys=blah", resp, body, "InvalidArgument", 400)
	}},
	{"bucket_list_marker_none", func(t *testing.T, e *env) {
		b := e.createObjects(t, "bar", "baz", "foo", "quxx")
		out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(b)})
		wantPtr(t, "Marker", out.Marker, aws.String(""))
	}},
	// test_bucket_list_marker_empty, _unreadable, _not_in_list, _after_list
	// and the v2 start-after cases of the same names.
	{"bucket_list_marker_empty", func(t *testing.T, e *env) { markerCase(t, e, false, "", []string{"bar", "baz", "foo", "quxx"}) }},
	{"bucket_list_marker_unreadable", func(t *testing.T, e *env) { markerCase(t, e, false, "\x0a", []string{"bar", "baz", "foo", "quxx"}) }},
	{"bucket_list_marker_not_in_list", func(t *testing.T, e *env) { markerCase(t, e, false, "blah", []string{"foo", "quxx"}) }},
	{"bucket_list_marker_after_list", func(t *testing.T, e *env) { markerCase(t, e, false, "zzz", nil) }},
	{"bucket_listv2_startafter_unreadable", func(t *testing.T, e *env) { markerCase(t, e, true, "\x0a", []string{"bar", "baz", "foo", "quxx"}) }},
	{"bucket_listv2_startafter_not_in_list", func(t *testing.T, e *env) { markerCase(t, e, true, "blah", []string{"foo", "quxx"}) }},
	{"bucket_listv2_startafter_after_list", func(t *testing.T, e *env) { markerCase(t, e, true, "zzz", nil) }},
	{"bucket_listv2_continuationtoken_empty", func(t *testing.T, e *env) {
		b := e.createObjects(t, "bar", "baz", "foo", "quxx")
		out := e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b), ContinuationToken: aws.String("")})
		wantPtr(t, "ContinuationToken", out.ContinuationToken, aws.String(""))
		wantStrings(t, "keys", keysOf(out.Contents), []string{"bar", "baz", "foo", "quxx"})
		if *out.IsTruncated {
			t.Fatal("truncated")
		}
	}},
	{"bucket_listv2_continuationtoken", func(t *testing.T, e *env) {
		b := e.createObjects(t, "bar", "baz", "foo", "quxx")
		out := e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b), MaxKeys: aws.Int32(1)})
		next := out.NextContinuationToken
		if next == nil {
			t.Fatal("no NextContinuationToken")
		}
		out = e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b), ContinuationToken: next})
		wantPtr(t, "ContinuationToken", out.ContinuationToken, next)
		wantStrings(t, "keys", keysOf(out.Contents), []string{"baz", "foo", "quxx"})
		if *out.IsTruncated {
			t.Fatal("truncated")
		}
	}},
	{"bucket_listv2_both_continuationtoken_startafter", func(t *testing.T, e *env) {
		b := e.createObjects(t, "bar", "baz", "foo", "quxx")
		out := e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b), StartAfter: aws.String("bar"), MaxKeys: aws.Int32(1)})
		next := out.NextContinuationToken
		if next == nil {
			t.Fatal("no NextContinuationToken")
		}
		out = e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b), StartAfter: aws.String("bar"), ContinuationToken: next})
		wantPtr(t, "ContinuationToken", out.ContinuationToken, next)
		wantPtr(t, "StartAfter", out.StartAfter, aws.String("bar"))
		wantStrings(t, "keys", keysOf(out.Contents), []string{"foo", "quxx"})
		if *out.IsTruncated {
			t.Fatal("truncated")
		}
	}},
	// test_bucket_listv2_fetchowner_notempty, _defaultempty, _empty
	{"bucket_listv2_fetchowner_notempty", func(t *testing.T, e *env) { fetchOwnerCase(t, e, aws.Bool(true), true) }},
	{"bucket_listv2_fetchowner_defaultempty", func(t *testing.T, e *env) { fetchOwnerCase(t, e, nil, false) }},
	{"bucket_listv2_fetchowner_empty", func(t *testing.T, e *env) { fetchOwnerCase(t, e, aws.Bool(false), false) }},
	// test_bucket_list_return_data, less the owner's DisplayName that
	// s3-tests takes from GetObjectAcl (ACLs are not served): the ID is
	// the requester's, as ListBuckets' Owner.
	{"bucket_list_return_data", func(t *testing.T, e *env) {
		b := e.createObjects(t, "bar", "baz", "foo")
		out := e.listV1(t, &s3.ListObjectsInput{Bucket: aws.String(b)})
		if len(out.Contents) != 3 {
			t.Fatalf("%d objects", len(out.Contents))
		}
		for _, o := range out.Contents {
			h, err := e.s3.HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: o.Key})
			if err != nil {
				t.Fatal(err)
			}
			// The times equal exactly: S3 lists whole seconds (.000Z),
			// as Last-Modified says them, and sync tools compare the two.
			if *o.ETag != *h.ETag || *o.Size != *h.ContentLength || !o.LastModified.Equal(*h.LastModified) {
				t.Fatalf("%s: listed ETag %s size %d modified %v, head %s %d %v", *o.Key, *o.ETag, *o.Size, o.LastModified, *h.ETag, *h.ContentLength, h.LastModified)
			}
			if o.Owner == nil || aws.ToString(o.Owner.ID) != testAccess {
				t.Fatalf("%s: owner %+v", *o.Key, o.Owner)
			}
		}
	}},
}...)

func delimiterPrefixV1(t *testing.T, e *env, obj, dir1, dir2 string) {
	b := e.createObjects(t, obj, dir1+"/bar", dir1+"/baz/xyzzy", dir2+"/thud", dir2+"/bla")
	m := e.validateList(t, b, "", "/", "", 1, true, []string{obj}, nil, obj)
	m = e.validateList(t, b, "", "/", m, 1, true, nil, []string{dir1 + "/"}, dir1+"/")
	e.validateList(t, b, "", "/", m, 1, false, nil, []string{dir2 + "/"}, "")
	m = e.validateList(t, b, "", "/", "", 2, true, []string{obj}, []string{dir1 + "/"}, dir1+"/")
	e.validateList(t, b, "", "/", m, 2, false, nil, []string{dir2 + "/"}, "")
	p := dir1 + "/"
	m = e.validateList(t, b, p, "/", "", 1, true, []string{p + "bar"}, nil, p+"bar")
	e.validateList(t, b, p, "/", m, 1, false, nil, []string{p + "baz/"}, "")
	e.validateList(t, b, p, "/", "", 2, false, []string{p + "bar"}, []string{p + "baz/"}, "")
}

func delimiterPrefixV2(t *testing.T, e *env, obj, dir1, dir2 string) {
	b := e.createObjects(t, obj, dir1+"/bar", dir1+"/baz/xyzzy", dir2+"/thud", dir2+"/bla")
	tok := e.validateListV2(t, b, "", "/", nil, 1, true, []string{obj}, nil, false)
	tok = e.validateListV2(t, b, "", "/", tok, 1, true, nil, []string{dir1 + "/"}, false)
	e.validateListV2(t, b, "", "/", tok, 1, false, nil, []string{dir2 + "/"}, true)
	tok = e.validateListV2(t, b, "", "/", nil, 2, true, []string{obj}, []string{dir1 + "/"}, false)
	e.validateListV2(t, b, "", "/", tok, 2, false, nil, []string{dir2 + "/"}, true)
	p := dir1 + "/"
	tok = e.validateListV2(t, b, p, "/", nil, 1, true, []string{p + "bar"}, nil, false)
	e.validateListV2(t, b, p, "/", tok, 1, false, nil, []string{p + "baz/"}, true)
	e.validateListV2(t, b, p, "/", nil, 2, false, []string{p + "bar"}, []string{p + "baz/"}, true)
}

var fourKeys = []string{"bar", "baz", "foo", "quxx"}

func manyCase(t *testing.T, e *env, v2 bool) {
	b := e.createObjects(t, "foo", "bar", "baz")
	wantPage(t, "page 1", e.list(t, v2, b, listReq{maxKeys: aws.Int32(2)}), []string{"bar", "baz"}, true)
	wantPage(t, "page 2", e.list(t, v2, b, listReq{maxKeys: aws.Int32(2), after: aws.String("baz")}), []string{"foo"}, false)
}

func maxKeysOneCase(t *testing.T, e *env, v2 bool) {
	b := e.createObjects(t, fourKeys...)
	wantPage(t, "page 1", e.list(t, v2, b, listReq{maxKeys: aws.Int32(1)}), fourKeys[:1], true)
	wantPage(t, "after bar", e.list(t, v2, b, listReq{after: aws.String("bar")}), fourKeys[1:], false)
}

func maxKeysNoneCase(t *testing.T, e *env, v2 bool) {
	b := e.createObjects(t, fourKeys...)
	got := e.list(t, v2, b, listReq{})
	wantPage(t, "all", got, fourKeys, false)
	if got.maxKeys != 1000 {
		t.Fatalf("MaxKeys %d", got.maxKeys)
	}
}

// markerCase: a v1 marker or a v2 start-after, echoed back.
func markerCase(t *testing.T, e *env, v2 bool, after string, want []string) {
	b := e.createObjects(t, fourKeys...)
	got := e.list(t, v2, b, listReq{after: aws.String(after)})
	wantPtr(t, "Marker/StartAfter", got.after, aws.String(after))
	wantPage(t, "after "+after, got, want, false)
}

func fetchOwnerCase(t *testing.T, e *env, fetch *bool, want bool) {
	b := e.createObjects(t, "foo/bar", "foo/baz", "quux")
	out := e.listV2(t, &s3.ListObjectsV2Input{Bucket: aws.String(b), FetchOwner: fetch})
	if len(out.Contents) == 0 || (out.Contents[0].Owner != nil) != want {
		t.Fatalf("fetch-owner %v: owner %+v", deref(fetch), out.Contents)
	}
}

// TestListObjectVersions: a bucket lists its objects as S3 lists an
// unversioned bucket's versions, each one version "null", the latest, so
// that clean-up code deleting every version (by its versionId, null)
// empties the bucket; the SDK's paginator walks it page by page.
func TestListObjectVersions(t *testing.T) {
	e := newEnv(t)
	keys := []string{"a/1", "a/2", "b", "c d", "e"}
	b := e.createObjects(t, keys...)
	var got []string
	p := s3.NewListObjectVersionsPaginator(e.s3, &s3.ListObjectVersionsInput{Bucket: aws.String(b), MaxKeys: aws.Int32(2)})
	pages := 0
	for p.HasMorePages() {
		page, err := p.NextPage(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, v := range page.Versions {
			if aws.ToString(v.VersionId) != "null" || !aws.ToBool(v.IsLatest) || aws.ToInt64(v.Size) != int64(len(aws.ToString(v.Key))) || aws.ToString(v.ETag) == "" {
				t.Fatalf("version %+v", v)
			}
			got = append(got, aws.ToString(v.Key))
		}
		if len(page.DeleteMarkers) > 0 {
			t.Fatalf("delete markers %+v", page.DeleteMarkers)
		}
	}
	if !slices.Equal(got, keys) || pages != 3 {
		t.Fatalf("listed %q in %d pages, want %q in 3", got, pages, keys)
	}
	out, err := e.s3.ListObjectVersions(e.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b), Delimiter: aws.String("/"), EncodingType: types.EncodingTypeUrl})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.CommonPrefixes) != 1 || aws.ToString(out.CommonPrefixes[0].Prefix) != "a/" || len(out.Versions) != 3 || aws.ToString(out.Versions[1].Key) != "c%20d" {
		t.Fatalf("with a delimiter: %+v %+v", out.CommonPrefixes, out.Versions)
	}
	// Past a key and its version, null; markers that cannot be.
	out, err = e.s3.ListObjectVersions(e.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b), KeyMarker: aws.String("b"), VersionIdMarker: aws.String("null")})
	if err != nil || len(out.Versions) != 2 || aws.ToString(out.Versions[0].Key) != "c d" {
		t.Fatalf("after b's null version: %v %+v", err, out)
	}
	_, err = e.s3.ListObjectVersions(e.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b), VersionIdMarker: aws.String("null")})
	wantCode(t, "a version-id marker without a key marker", err, "InvalidArgument", 400)
	_, err = e.s3.ListObjectVersions(e.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b), KeyMarker: aws.String("b"), VersionIdMarker: aws.String("3HL4kqtJl")})
	wantCode(t, "a version-id marker of no version", err, "InvalidArgument", 400)
	_, err = e.s3.ListObjectVersions(e.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("no-such-bucket")})
	wantCode(t, "the versions of a missing bucket", err, "NoSuchBucket", 404)
	// Every version deleted by its version id: the bucket is empty.
	var ids []types.ObjectIdentifier
	for _, k := range keys {
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k), VersionId: aws.String("null")})
	}
	del, err := e.s3.DeleteObjects(e.ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b), Delete: &types.Delete{Objects: ids}})
	if err != nil || len(del.Errors) > 0 || len(del.Deleted) != len(keys) {
		t.Fatalf("deleting every version: %v %+v", err, del)
	}
	for _, d := range del.Deleted {
		if aws.ToString(d.VersionId) != "null" { // echoed, as S3 does
			t.Fatalf("deleted %s, version %q", aws.ToString(d.Key), aws.ToString(d.VersionId))
		}
	}
	if _, err := e.s3.DeleteBucket(e.ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatalf("the bucket after deleting every version: %v", err)
	}
}
