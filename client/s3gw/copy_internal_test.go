package s3gw

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
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

// FuzzEvalConditions: any conditional headers evaluate to one outcome,
// never a panic, and If-Match of the object's own ETag never fails.
func FuzzEvalConditions(f *testing.F) {
	f.Add(`"abc"`, `W/"abc", "def"`, "Mon, 02 Jan 2006 15:04:05 GMT", "*")
	f.Add("", "", "garbage", "")
	f.Fuzz(func(t *testing.T, ifMatch, ifNoneMatch, date, etag string) {
		h := http.Header{}
		for k, v := range map[string]string{"If-Match": ifMatch, "If-None-Match": ifNoneMatch, "If-Modified-Since": date, "If-Unmodified-Since": date} {
			if v != "" {
				h.Set(k, v)
			}
		}
		info := client.ObjectInfo{ETag: etag, LastModified: time.Unix(1700000000, 0)}
		if c := evalConditions(h, "", info); c < condPass || c > condFailed {
			t.Fatalf("outcome %d", c)
		}
		if etag != "" && !strings.ContainsAny(etag, `", `) {
			h = http.Header{"If-Match": {`"` + etag + `"`}}
			if evalConditions(h, "", info) != condPass {
				t.Fatalf("If-Match of the object's own ETag %q failed", etag)
			}
		}
	})
}
