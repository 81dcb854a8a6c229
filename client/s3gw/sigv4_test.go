package s3gw

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
)

// The examples of AWS's "Signature Calculations for the Authorization
// Header" and "Query String Authentication" pages for S3: the same
// request, credentials and signature as published.
var docCreds = StaticCredentials{"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}

var docTime = time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)

func docGet(t testing.TB) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, "http://examplebucket.s3.amazonaws.com/test.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.RequestURI = "/test.txt"
	r.Header.Set("Range", "bytes=0-9")
	r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	r.Header.Set("X-Amz-Date", "20130524T000000Z")
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"+
		"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
	return r
}

func TestSigV4DocumentedHeaderExample(t *testing.T) {
	r := docGet(t)
	res, err := verify(r, docCreds, docTime.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.AccessKey != "AKIAIOSFODNN7EXAMPLE" || res.PayloadHash != emptySHA256 {
		t.Fatalf("%+v", res)
	}
	// The same request changed in a signed header, or checked too late.
	r.Header.Set("Range", "bytes=0-10")
	if _, err := verify(r, docCreds, docTime); !errors.Is(err, ErrSignatureDoesNotMatch) {
		t.Fatalf("changed Range: %v", err)
	}
	if _, err := verify(docGet(t), docCreds, docTime.Add(16*time.Minute)); !errors.Is(err, ErrRequestTimeTooSkewed) {
		t.Fatalf("16 minutes late: %v", err)
	}
	if _, err := verify(docGet(t), StaticCredentials{"AKIAIOSFODNN7EXAMPLE": "other"}, docTime); !errors.Is(err, ErrSignatureDoesNotMatch) {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, err := verify(docGet(t), StaticCredentials{}, docTime); !errors.Is(err, ErrInvalidAccessKeyID) {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestSigV4DocumentedPresignedExample(t *testing.T) {
	raw := "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request" +
		"&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host" +
		"&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
	mk := func() *http.Request {
		r, err := http.NewRequest(http.MethodGet, "http://examplebucket.s3.amazonaws.com/test.txt?"+raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RequestURI = "/test.txt?" + raw
		return r
	}
	res, err := verify(mk(), docCreds, docTime.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.PayloadHash != "" {
		t.Fatalf("presigned payload %q, want unsigned", res.PayloadHash)
	}
	if _, err := verify(mk(), docCreds, docTime.Add(86401*time.Second)); !errors.Is(err, ErrAccessDenied) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("after expiry: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	for _, c := range []struct {
		name, authz, query string
		want               *Error
	}{
		{"anonymous", "", "", ErrAccessDenied},
		{"v2 header", "AWS AKID:c2ln", "", ErrAccessDenied},
		{"v2 query", "", "AWSAccessKeyId=AKID&Signature=x&Expires=1", ErrAccessDenied},
		{"garbage", "AWS4-HMAC-SHA256 nonsense", "", ErrAuthorizationHeaderMalformed},
		{"no signature", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host", "", ErrAuthorizationHeaderMalformed},
		{"unsorted headers", "AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/s3/aws4_request, SignedHeaders=x-amz-date;host, Signature=" + strings.Repeat("0", 64), "", ErrAuthorizationHeaderMalformed},
		{"presign bad expiry", "", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=604801&X-Amz-SignedHeaders=host&X-Amz-Signature=" + strings.Repeat("0", 64), ErrAuthorizationQueryParametersError},
		{"both", "AWS4-HMAC-SHA256 x", "X-Amz-Algorithm=AWS4-HMAC-SHA256", ErrInvalidArgument},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://h/b/k?"+c.query, nil)
		if c.authz != "" {
			r.Header.Set("Authorization", c.authz)
		}
		_, err := verify(r, docCreds, docTime)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want.Code)
		}
	}
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		h           string
		ok          bool
		size        int64
		off, n      int64
		satisfiable bool
	}{
		{"bytes=0-9", true, 100, 0, 10, true},
		{"bytes=10-", true, 100, 10, 90, true},
		{"bytes=-5", true, 100, 95, 5, true},
		{"bytes=-500", true, 100, 0, 100, true},
		{"bytes=90-200", true, 100, 90, 10, true},
		{"bytes=100-", true, 100, 0, 0, false},
		{"bytes=-1", true, 0, 0, 0, false},
		{"bytes=5-4", false, 100, 0, 0, false},
		{"bytes=0-1,3-4", false, 100, 0, 0, false},
		{"items=0-1", false, 100, 0, 0, false},
		{"bytes=-0", true, 100, 0, 0, false},
		{"bytes=-0", true, 0, 0, 0, false},
		{"bytes=+1-2", false, 100, 0, 0, false},
		{"bytes=", false, 100, 0, 0, false},
		// Numbers past int64: the end clipped, a start past the end
		// unsatisfiable, as S3 answers them (206, 416).
		{"bytes=0-99999999999999999999", true, 12, 0, 12, true},
		{"bytes=9223372036854775807-9223372036854775807", true, 12, 0, 0, false},
		{"bytes=99999999999999999999-", true, 12, 0, 0, false},
		{"bytes=-99999999999999999999", true, 12, 0, 12, true},
		{"bytes=99999999999999999999-9999999999999999999", false, 12, 0, 0, false},
	} {
		r, ok := parseRange(c.h)
		if ok != c.ok {
			t.Errorf("%q: ok %v", c.h, ok)
			continue
		}
		if !ok {
			continue
		}
		off, n, sat := r.resolve(c.size)
		if sat != c.satisfiable || sat && (off != c.off || n != c.n) {
			t.Errorf("%q of %d: %d+%d %v, want %d+%d %v", c.h, c.size, off, n, sat, c.off, c.n, c.satisfiable)
		}
	}
}

func TestCanonicalQuery(t *testing.T) {
	got, err := canonicalQuery("prefix=a%20b&list-type=2&delete&max-keys=10&prefix=a", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "delete=&list-type=2&max-keys=10&prefix=a&prefix=a%20b"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := canonicalQuery("a=%zz", false); err == nil {
		t.Fatal("a bad escape was accepted")
	}
}

func FuzzParseAuthorization(f *testing.F) {
	f.Add(docGet(&testing.T{}).Header.Get("Authorization"))
	f.Add("AWS4-HMAC-SHA256 Credential=a/20200101/r/s3/aws4_request,SignedHeaders=host,Signature=")
	f.Fuzz(func(t *testing.T, h string) {
		s, err := parseAuthorization(h)
		if err != nil {
			return
		}
		if !validSignature(s.Signature) || s.signedHeaders == "" || s.AccessKey == "" || len(s.Date) != 8 {
			t.Fatalf("accepted %q as %+v", h, s)
		}
	})
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=10-", "bytes=-5", "bytes=1-0", "bytes=0-1,2-3", "bytes=0-99999999999999999999"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		r, ok := parseRange(h)
		if !ok || size < 0 {
			return
		}
		off, n, sat := r.resolve(size)
		if sat && (off < 0 || n <= 0 || off+n > size) {
			t.Fatalf("%q of %d: %d+%d", h, size, off, n)
		}
	})
}

func FuzzVerify(f *testing.F) {
	f.Add(docGet(&testing.T{}).Header.Get("Authorization"), "")
	f.Add("", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature="+strings.Repeat("0", 64))
	f.Fuzz(func(t *testing.T, authz, query string) {
		u := &url.URL{Scheme: "http", Host: "h", Path: "/b/k", RawQuery: query}
		r := &http.Request{Method: http.MethodGet, URL: u, Host: "h", Header: http.Header{}, RequestURI: "/b/k?" + query}
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		r.Header.Set("X-Amz-Date", "20130524T000000Z")
		r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		if _, err := verify(r, docCreds, docTime); err == nil {
			t.Fatalf("a made-up signature verified: %q %q", authz, query)
		}
		canonicalQuery(query, true)
	})
}

func FuzzParseDeleteRequest(f *testing.F) {
	f.Add([]byte(`<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>`))
	f.Add([]byte(`<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a b</Key><VersionId>1</VersionId></Object></Delete>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDeleteRequest(b)
		if err == nil && (len(d.Objects) == 0 || len(d.Objects) > maxDeleteKeys) {
			t.Fatalf("accepted %d objects", len(d.Objects))
		}
	})
}

func FuzzParseCreateBucket(f *testing.F) {
	f.Add([]byte(``))
	f.Add([]byte(`<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>`))
	f.Add([]byte(`<CreateBucketConfiguration><LocationConstraint>`))
	f.Add([]byte(`<Delete><Object><Key>a</Key></Object></Delete>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := parseCreateBucket(b); err != nil && !errors.Is(err, ErrMalformedXML) {
			t.Fatalf("%q: %v, want MalformedXML", b, err)
		}
	})
}

func FuzzCanonicalQuery(f *testing.F) {
	f.Add("prefix=a%20b&list-type=2&delete&max-keys=10")
	f.Add("X-Amz-Signature=00&X-Amz-Date=20130524T000000Z&a=%2F")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := canonicalQuery(raw, true)
		if err != nil {
			return
		}
		// Canonical means a fixed point: encoding it again changes nothing.
		if again, err := canonicalQuery(q, true); err != nil || again != q {
			t.Fatalf("%q: canonical %q, again %q (%v)", raw, q, again, err)
		}
	})
}

func FuzzParseListQuery(f *testing.F) {
	f.Add("list-type=2&prefix=a%2F&delimiter=%2F&max-keys=7&continuation-token=x&fetch-owner=true&encoding-type=url")
	f.Add("marker=m&max-keys=-1")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		lq, err := parseListQuery(q, q.Get("list-type") == "2")
		if err == nil && (lq.maxKeys < 0 || lq.maxKeys > 1000 || lq.encodingType != "" && lq.encodingType != "url") {
			t.Fatalf("%q: %+v", raw, lq)
		}
	})
}

func FuzzParseCompleteRequest(f *testing.F) {
	f.Add([]byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"a"</ETag></Part></CompleteMultipartUpload>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseCompleteRequest(b)
		if err == nil && (len(c.Parts) == 0 || len(c.Parts) > 10000) {
			t.Fatalf("accepted %d parts", len(c.Parts))
		}
		for i, p := range c.Parts {
			if err == nil && (p.PartNumber == nil || p.ETag == nil) {
				t.Fatalf("accepted part %d without its number or ETag", i+1)
			}
		}
	})
}

func TestErrorsHaveMessages(t *testing.T) {
	for _, err := range []error{client.ErrNoSuchBucket, client.ErrNoSuchKey, client.ErrStorageFull, ErrAccessDenied, errors.New("x")} {
		if e := toS3Error(err); e.Message == "" || e.Code == "" || e.Status == 0 {
			t.Errorf("%v: %+v", err, e)
		}
	}
}

// FuzzCollapsed: collapsed's fast path never takes a value that the
// canonical form would change.
func FuzzCollapsed(f *testing.F) {
	for _, s := range []string{"", "a", "a b", " a", "a ", "a  b", "a\tb", "a\u00a0b", "20130524T000000Z", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if collapsed(v) && strings.Join(strings.Fields(v), " ") != v {
			t.Fatalf("collapsed(%q), but its canonical form is %q", v, strings.Join(strings.Fields(v), " "))
		}
	})
}

// BenchmarkVerify is the signature check of a GET as aws-sdk-go-v2
// signs it (the documented example's request): what each request pays
// for SigV4, with its allocations.
func BenchmarkVerify(b *testing.B) {
	r := docGet(b)
	now := docTime.Add(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := verify(r, docCreds, now); err != nil {
			b.Fatal(err)
		}
	}
}
