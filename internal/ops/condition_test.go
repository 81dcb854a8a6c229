package ops

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestParseETagList(t *testing.T) {
	for in, want := range map[string][]string{
		`*`:                                     {"*"},
		`"abc"`:                                 {"abc"},
		`abc`:                                   {"abc"},
		` "a" , W/"b",c-2 `:                     {"a", "b", "c-2"},
		`"0123456789abcdef0123456789abcdef-12"`: {"0123456789abcdef0123456789abcdef-12"},
	} {
		got, err := ParseETagList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", `"a",`, `""`, `"a"b"`, "a b", "\x00", strings.Repeat("a", 65),
		strings.Repeat("a,", MaxConditionETags) + "a"} {
		if got, err := ParseETagList(in); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%.40q: got %q, %v; want InvalidArgument", in, got, err)
		}
	}
}

func TestConditionHolds(t *testing.T) {
	obj := &osdpb.ObjectMeta{Etag: "e1"}
	for _, c := range []struct {
		name string
		cond *osdpb.Condition
		cur  *osdpb.ObjectMeta
		want error
	}{
		{"none-match * on missing", &osdpb.Condition{IfNoneMatchStar: true}, nil, nil},
		{"none-match * on existing", &osdpb.Condition{IfNoneMatchStar: true}, obj, ErrPreconditionFailed},
		{"match on missing", &osdpb.Condition{IfMatch: []string{"e1"}}, nil, ErrNoSuchKey},
		{"match *", &osdpb.Condition{IfMatch: []string{"*"}}, obj, nil},
		{"match right", &osdpb.Condition{IfMatch: []string{"x", "e1"}}, obj, nil},
		{"match wrong", &osdpb.Condition{IfMatch: []string{"e2"}}, obj, ErrPreconditionFailed},
		{"both, existing", &osdpb.Condition{IfMatch: []string{"e1"}, IfNoneMatchStar: true}, obj, ErrPreconditionFailed},
	} {
		err := ConditionHolds(c.cond, c.cur)
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		// A write-only entity learns no ETag (an MD5 of what it may not read).
		if err != nil && strings.Contains(err.Error(), obj.Etag) {
			t.Errorf("%s: %v names the object's ETag", c.name, err)
		}
	}
	if err := CheckCondition(&osdpb.Condition{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty condition: %v", err)
	}
	if err := CheckCondition(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil condition: %v", err)
	}
	if err := CheckCondition(&osdpb.Condition{IfMatch: []string{`"quoted"`}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("quoted tag on the wire: %v", err)
	}
	if err := CheckCondition(&osdpb.Condition{IfMatch: make([]string, MaxConditionETags+1)}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("too many tags: %v", err)
	}
}

// FuzzParseETagList: any header value either parses into tags that
// CheckCondition accepts, or is InvalidArgument; it never panics.
func FuzzParseETagList(f *testing.F) {
	for _, s := range []string{"*", `"a", W/"b"`, `""`, ",,", `"a"b"`, strings.Repeat(`"x",`, 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tags, err := ParseETagList(v)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%q: %v", v, err)
			}
			return
		}
		if err := CheckCondition(&osdpb.Condition{IfMatch: tags}); err != nil {
			t.Fatalf("%q parsed to %q, which CheckCondition refuses: %v", v, tags, err)
		}
	})
}
