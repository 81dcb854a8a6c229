package s3gw

import (
	"errors"
	"testing"
)

func FuzzParseCopySource(f *testing.F) {
	for _, s := range []string{"b/k", "/b/k%20x", "b/k?versionId=null", "b", "b/k?x=1", "%zz/k", "bucket/a/b?versionId=7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, k, err := parseCopySource(s)
		var e *Error
		switch {
		case err != nil && !errors.As(err, &e):
			t.Fatalf("%q: untyped error %v", s, err)
		case err == nil && (b == "" || k == ""):
			t.Fatalf("%q parsed to %q %q", s, b, k)
		}
	})
}
