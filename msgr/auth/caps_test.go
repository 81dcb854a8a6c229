package auth

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseCapsAndAllows(t *testing.T) {
	c := mustCaps(t, map[string]string{
		"mon": "allow r",
		"osd": "allow r, allow rw bucket=photos, allow w bucket_prefix=logs-",
	})
	for _, tc := range []struct {
		svc    string
		want   Perm
		bucket string
		ok     bool
	}{
		{"mon", PermRead, "", true},
		{"mon", PermWrite, "", false},
		{"mon", PermExec, "", false},
		{"osd", PermRead, "anything", true},
		{"osd", PermRead, "", true},
		{"osd", PermWrite, "photos", true},
		{"osd", PermRead | PermWrite, "photos", true},
		{"osd", PermWrite, "photos2", false},
		{"osd", PermWrite, "logs-2026", true},
		{"osd", PermWrite, "logs", false},
		{"osd", PermWrite, "", false}, // a grant for buckets never covers an op that names none
		{"osd", PermExec, "photos", false},
	} {
		if got := c.Allows(tc.svc, tc.want, tc.bucket); got != tc.ok {
			t.Errorf("%s %s %q: Allows %v, want %v", tc.svc, tc.want, tc.bucket, got, tc.ok)
		}
	}
	// Canonical form round-trips.
	if again := mustCaps(t, c.Strings()); !reflect.DeepEqual(c, again) {
		t.Fatalf("round trip: %v became %v", c, again)
	}
	if want := `mon 'allow r' osd 'allow r, allow rw bucket=photos, allow w bucket_prefix=logs-'`; c.String() != want {
		t.Fatalf("String %q, want %q", c.String(), want)
	}
}

func TestCapsAllAndProfile(t *testing.T) {
	admin := mustCaps(t, map[string]string{"mon": "allow *", "osd": "allow *"})
	osd := mustCaps(t, map[string]string{"mon": "allow profile osd", "osd": "allow profile osd"})
	var none Caps
	for _, tc := range []struct {
		what string
		got  bool
		want bool
	}{
		{"admin: all on mon", admin.Allows("mon", PermAll, ""), true},
		{"admin: all on osd", admin.Allows("osd", PermAll, "b"), true},
		{"osd: profile on mon", osd.HasProfile("mon", ProfileOSD), true},
		{"osd: reads the map", osd.Allows("mon", PermRead, ""), true},
		{"osd: must not change the map", osd.Allows("mon", PermWrite, ""), false},
		{"osd: must not manage auth", osd.Allows("mon", PermExec, ""), false},
		{"osd: every object", osd.Allows("osd", PermRead|PermWrite, "any"), true},
		{"none: no read", none.Allows("osd", PermRead, "b"), false},
		{"none: no profile", none.HasProfile("mon", ProfileOSD), false},
		{"none: asking for nothing is allowed", none.Allows("osd", 0, "b"), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

func TestParseCapsRefuses(t *testing.T) {
	for _, tc := range []struct{ svc, s string }{
		{"mgr", "allow r"},
		{"osd", "allow"},
		{"osd", "deny r"},
		{"osd", "allow q"},
		{"osd", "allow rr"},
		{"osd", "allow r bucket="},
		{"osd", "allow r pool=x"},
		{"osd", "allow r bucket=a bucket=b"},
		{"mon", "allow r bucket=a"},
		{"osd", "allow profile"},
		{"osd", "allow profile admin"},
		{"osd", "allow r,"},
		{"osd", ", allow r"},
		{"osd", "allow rw bucket=.multipart"},
		{"osd", "allow rw bucket_prefix=."},
		{"osd", "allow r bucket=Photos"},
		{"osd", "allow r bucket_prefix=-a"},
	} {
		if _, err := ParseCaps(map[string]string{tc.svc: tc.s}); !errors.Is(err, ErrInvalidCaps) {
			t.Errorf("%s %q: %v, want ErrInvalidCaps", tc.svc, tc.s, err)
		}
	}
	if c := mustCaps(t, map[string]string{"osd": "  "}); len(c) != 0 {
		t.Fatalf("an empty string grants nothing, got %v", c)
	}
}

func FuzzParseCaps(f *testing.F) {
	f.Add("osd", "allow rw bucket=photos, allow r")
	f.Add("mon", "allow profile osd")
	f.Add("osd", "allow * ,allow x bucket_prefix=a=b")
	f.Fuzz(func(t *testing.T, svc, s string) {
		c, err := ParseCaps(map[string]string{svc: s})
		if err != nil {
			if !errors.Is(err, ErrInvalidCaps) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := ParseCaps(c.Strings())
		if err != nil {
			t.Fatalf("canonical form %q does not parse: %v", c.Strings(), err)
		}
		if c.String() != again.String() {
			t.Fatalf("round trip: %q became %q", c.String(), again.String())
		}
	})
}

func mustCaps(t testing.TB, in map[string]string) Caps {
	t.Helper()
	c, err := ParseCaps(in)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
