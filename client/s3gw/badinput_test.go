package s3gw_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// served is a gateway run by Serve, as `osprey s3` runs it (net/http's
// limits and the client timeouts are Serve's), logging to log.
type served struct {
	addr string
	url  string
	log  *osdtest.LogBuffer
	s3   *s3.Client
	gw   *s3gw.Gateway
}

func serve(t *testing.T, e *env, clientTimeout time.Duration) *served {
	t.Helper()
	return serveWith(t, e, func(o *s3gw.Options) { o.ClientTimeout = clientTimeout })
}

// serveWith is serve with the options set sets.
func serveWith(t *testing.T, e *env, set func(*s3gw.Options)) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, e, ln, set)
}

// serveOn is serveWith on ln.
func serveOn(t *testing.T, e *env, ln net.Listener, set func(*s3gw.Options)) *served {
	t.Helper()
	sv := &served{log: &osdtest.LogBuffer{}}
	opts := s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
		Logger: slog.New(slog.NewTextHandler(sv.log, nil))}
	set(&opts)
	gw, err := s3gw.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	sv.addr, sv.gw = ln.Addr().String(), gw
	sv.url = "http://" + sv.addr
	sv.s3 = s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(sv.url), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "")})
	return sv
}

// signed is a request signed with aws-sdk-go-v2's signer over body's
// SHA-256.
func signed(t *testing.T, method, url string, body []byte) *http.Request {
	t.Helper()
	return signedWith(t, method, url, body, nil)
}

// signedWith is signed with these headers set before the signature, so
// that it covers them.
func signedWith(t *testing.T, method, url string, body []byte, h map[string]string) *http.Request {
	t.Helper()
	return signedBy(t, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret}, method, url, body, h)
}

// signedAs is signed with another key.
func signedAs(t *testing.T, access, secret, method, url string, body []byte) *http.Request {
	t.Helper()
	return signedBy(t, aws.Credentials{AccessKeyID: access, SecretAccessKey: secret}, method, url, body, nil)
}

func signedBy(t *testing.T, creds aws.Credentials, method, url string, body []byte, h map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	sum := sha256hex(body)
	req.Header.Set("X-Amz-Content-Sha256", sum)
	// S3 signs the path as sent, not escaped again (the SDK's S3 client
	// sets the same).
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, sum, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

// rawConn sends req's headers and the first n bytes of its body (all of
// it when n < 0) on a connection of its own, and leaves it open.
func rawConn(t *testing.T, addr string, req *http.Request, n int) net.Conn {
	t.Helper()
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatal(err)
	}
	wire := buf.Bytes()
	if n >= 0 {
		head := bytes.Index(wire, []byte("\r\n\r\n")) + 4
		wire = wire[:head+n]
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(wire); err != nil {
		t.Fatal(err)
	}
	return conn
}

// wantS3Error checks an XML error answer.
func wantS3Error(t *testing.T, what string, resp *http.Response, body []byte, code string, status int) {
	t.Helper()
	if resp.StatusCode != status || !bytes.Contains(body, []byte("<Code>"+code+"</Code>")) ||
		!bytes.Contains(body, []byte("<RequestId>"+resp.Header.Get("x-amz-request-id")+"</RequestId>")) {
		t.Fatalf("%s: %d %s, want %s %d", what, resp.StatusCode, body, code, status)
	}
}

// unharmed checks that the gateway still serves.
func (sv *served) unharmed(t *testing.T, ctx context.Context, after string) {
	t.Helper()
	if _, err := sv.s3.ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
		t.Fatalf("after %s the gateway does not serve: %v", after, err)
	}
}

// TestBadInput: the bad input of issue 21, each answered with its S3 error,
// nothing stored, and the gateway serving on.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	sv := serve(t, e, time.Second)
	e.mb(t, "bad")
	e.put(t, "bad", "k", []byte("before"))
	url := sv.url + "/bad/k"

	// What was not found is named, as AWS names it: of a copy, the source.
	for _, c := range []struct{ method, url, source, code, elem string }{
		{http.MethodGet, sv.url + "/bad/nope", "", "NoSuchKey", "<Key>nope</Key>"},
		{http.MethodGet, sv.url + "/nobucket/k", "", "NoSuchBucket", "<BucketName>nobucket</BucketName>"},
		{http.MethodPut, sv.url + "/bad/copy", "bad/nope-src", "NoSuchKey", "<Key>nope-src</Key>"},
		{http.MethodPut, sv.url + "/bad/copy", "nobucket-src/k", "NoSuchBucket", "<BucketName>nobucket-src</BucketName>"},
	} {
		req := signed(t, c.method, c.url, nil)
		if c.source != "" {
			req = signedWith(t, c.method, c.url, nil, map[string]string{"X-Amz-Copy-Source": c.source})
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantS3Error(t, "GET "+c.url, resp, b, c.code, 404)
		if !bytes.Contains(b, []byte(c.elem)) {
			t.Errorf("GET %s: %s, want %s", c.url, b, c.elem)
		}
	}

	logLine := func(resp *http.Response) string {
		id := resp.Header.Get("x-amz-request-id")
		for l := range strings.SplitSeq(sv.log.String(), "\n") {
			if strings.Contains(l, "id="+id) && strings.Contains(l, "msg=s3 ") {
				return l
			}
		}
		return ""
	}
	t.Run("AccessLog", func(t *testing.T) {
		resp, _ := send(t, signed(t, http.MethodGet, url, nil), "")
		line := logLine(resp)
		for _, want := range []string{"msg=s3", "op=GetObject", "method=GET", "bucket=bad", "key=k", "status=200", "bytes_out=6",
			"access_key=" + testAccess, "remote=127.0.0.1:"} {
			if !strings.Contains(line, want) {
				t.Fatalf("access log line: no %s in %q", want, line)
			}
		}
		if strings.Contains(line, "error=") {
			t.Fatalf("access log line of a GET that worked: %q", line)
		}
		// A refusal names its cause and the key it claimed: a wrong
		// secret, an unknown key and a skewed clock read apart.
		resp, _ = send(t, signedBy(t, aws.Credentials{AccessKeyID: "NOSUCHKEY", SecretAccessKey: testSecret}, http.MethodGet, url, nil, nil), "")
		line = logLine(resp)
		for _, want := range []string{"op=Auth", "status=403", "access_key=NOSUCHKEY", "error=InvalidAccessKeyId"} {
			if !strings.Contains(line, want) {
				t.Fatalf("access log line of an unknown key: no %s in %q", want, line)
			}
		}
		resp, _ = send(t, signedBy(t, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: "wrong secret"}, http.MethodGet, url, nil, nil), "")
		if line = logLine(resp); !strings.Contains(line, "access_key="+testAccess) || !strings.Contains(line, "error=SignatureDoesNotMatch") {
			t.Fatalf("access log line of a wrong secret: %q", line)
		}
		resp, _ = send(t, signed(t, http.MethodGet, sv.url+"/bad/missing", nil), "")
		if line = logLine(resp); !strings.Contains(line, "status=404") || !strings.Contains(line, "error=NoSuchKey") {
			t.Fatalf("access log line of a missing key: %q", line)
		}
	})
	t.Run("BadSignature", func(t *testing.T) {
		req := signed(t, http.MethodPut, url, []byte("tampered"))
		auth := req.Header.Get("Authorization")
		last := "0"
		if strings.HasSuffix(auth, "0") {
			last = "1"
		}
		req.Header.Set("Authorization", auth[:len(auth)-1]+last)
		resp, body := send(t, req, "")
		wantS3Error(t, "a changed signature", resp, body, "SignatureDoesNotMatch", 403)
	})
	t.Run("SkewedClock", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		// S3 signs the path as sent, not escaped again (the SDK's S3 client
		// sets the same).
		signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		if err := signer.SignHTTP(ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
			req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		resp, body := send(t, req, "")
		wantS3Error(t, "signed an hour ago", resp, body, "RequestTimeTooSkewed", 403)
	})
	t.Run("TruncatedBody", func(t *testing.T) {
		resp, body := sendTruncated(t, signed(t, http.MethodPut, url, osdtest.Payload(100<<10, 51)), 50<<10)
		wantS3Error(t, "half a body", resp, body, "IncompleteBody", 400)
	})
	t.Run("WrongContentMD5", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader("other"))
		req.Header.Set("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg==") // of ""
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		// S3 signs the path as sent, not escaped again (the SDK's S3 client
		// sets the same).
		signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		if err := signer.SignHTTP(ctx, aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
			req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, body := send(t, req, "")
		wantS3Error(t, "a wrong Content-MD5", resp, body, "BadDigest", 400)
	})
	t.Run("HugeHeader", func(t *testing.T) {
		req := signed(t, http.MethodGet, url, nil)
		req.Header.Set("X-Big", strings.Repeat("x", 66<<10))
		resp, body := send(t, req, "")
		wantS3Error(t, "a 66 KiB header", resp, body, "RequestHeaderSectionTooLarge", 400)
		// Past net/http's own bound (64 KiB and 4 KiB of slack) it
		// answers by itself.
		req.Header.Set("X-Big", strings.Repeat("x", 100<<10))
		if resp, _ := send(t, req, ""); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 100 KiB header: %d", resp.StatusCode)
		}
		// Far past it, more than the sockets' buffers hold is left unsent
		// when net/http hangs up: the client may see the 431 or the reset.
		req.Header.Set("X-Big", strings.Repeat("x", 2<<20))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("a 2 MiB header: %d", resp.StatusCode)
			}
		}
	})
	t.Run("GarbageHeaders", func(t *testing.T) {
		for _, tc := range []struct {
			what, name, value, code string
			status                  int
		}{
			{"a garbage Authorization", "Authorization", "AWS4-HMAC-SHA256 garbage", "AuthorizationHeaderMalformed", 400},
			{"SigV2", "Authorization", "AWS AK:c2ln", "AccessDenied", 403},
			{"a garbage X-Amz-Date", "X-Amz-Date", "yesterday", "AccessDenied", 403},
			{"a garbage x-amz-content-sha256", "X-Amz-Content-Sha256", "zz", "InvalidArgument", 400},
		} {
			req := signed(t, http.MethodGet, url, nil)
			req.Header.Set(tc.name, tc.value)
			resp, body := send(t, req, "")
			wantS3Error(t, tc.what, resp, body, tc.code, tc.status)
		}
		// A header line net/http cannot parse: it answers 400 itself.
		conn, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /bad/k HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Fatalf("a header line without a colon: %v %v", err, resp)
		}
	})
	t.Run("MalformedXML", func(t *testing.T) {
		up, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bad"), Key: aws.String("mp")})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ what, url, body string }{
			{"DeleteObjects, cut", sv.url + "/bad?delete", "<Delete><Object><Key>k</Key></Obj"},
			{"DeleteObjects, not XML", sv.url + "/bad?delete", "\x00\x01 binary"},
			{"DeleteObjects, no objects", sv.url + "/bad?delete", "<Delete></Delete>"},
			{"DeleteObjects, an object without a key", sv.url + "/bad?delete", "<Delete><Object><Key>k</Key></Object><Object></Object></Delete>"},
			{"DeleteObjects, an empty key", sv.url + "/bad?delete", "<Delete><Object><Key></Key></Object></Delete>"},
			{"Complete, cut", sv.url + "/bad/mp?uploadId=" + *up.UploadId, "<CompleteMultipartUpload><Part><PartNumber>1"},
			{"Complete, no parts", sv.url + "/bad/mp?uploadId=" + *up.UploadId, "<CompleteMultipartUpload/>"},
			{"Complete, a number that is not", sv.url + "/bad/mp?uploadId=" + *up.UploadId,
				"<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>"},
			{"DeleteObjects, another root", sv.url + "/bad?delete", "<Undelete><Object><Key>k</Key></Object></Undelete>"},
			{"Complete, another root", sv.url + "/bad/mp?uploadId=" + *up.UploadId,
				"<Delete><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></Delete>"},
			// A part without its number or its ETag, as S3 answers (not a
			// part 0, InvalidArgument, or a part not found, InvalidPart).
			{"Complete, a part without a number", sv.url + "/bad/mp?uploadId=" + *up.UploadId,
				"<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>"},
			{"Complete, a part without an ETag", sv.url + "/bad/mp?uploadId=" + *up.UploadId,
				"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>"},
		} {
			resp, body := send(t, signed(t, http.MethodPost, tc.url, []byte(tc.body)), "")
			wantS3Error(t, tc.what, resp, body, "MalformedXML", 400)
		}
		// A CreateBucket's configuration, cut or of another root: refused,
		// and no bucket made.
		for i, body := range []string{"<CreateBucketConfiguration><LocationConstraint>eu", "<Delete><Object><Key>k</Key></Object></Delete>"} {
			name := fmt.Sprint("badxml", i)
			resp, rbody := send(t, signed(t, http.MethodPut, sv.url+"/"+name, []byte(body)), "")
			wantS3Error(t, "CreateBucket "+body, resp, rbody, "MalformedXML", 400)
			if _, err := e.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err == nil {
				t.Fatalf("CreateBucket %q made the bucket", body)
			}
		}
		big := "<Delete>" + strings.Repeat("<Object><Key>k</Key></Object>", 100<<10) + "</Delete>"
		resp, body := send(t, signed(t, http.MethodPost, sv.url+"/bad?delete", []byte(big)), "")
		wantS3Error(t, "DeleteObjects of 3 MiB", resp, body, "MalformedXML", 400)
	})
	t.Run("UnreadBodyEndsConnection", func(t *testing.T) {
		// A request refused before its body is read whole: the rest of
		// that body must not be read as the connection's next request.
		// One connection, reused when the server allows it.
		cl := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
		defer cl.CloseIdleConnections()
		// The leftover ends in a request of its own, which must not run.
		smuggled := []byte("DELETE /bad/k HTTP/1.1\r\nHost: x\r\n\r\n")
		bigXML := "<Delete>" + strings.Repeat("<Object><Key>k</Key></Object>", 100<<10) + "</Delete>"
		for _, tc := range []struct {
			what   string
			req    *http.Request
			code   string
			status int
		}{
			{"an oversized DeleteObjects", signed(t, http.MethodPost, sv.url+"/bad?delete", append([]byte(bigXML), smuggled...)), "MalformedXML", 400},
			{"a PUT with a malformed Content-MD5", signedWith(t, http.MethodPut, url, append(osdtest.Payload(1<<20, 54), smuggled...),
				map[string]string{"Content-MD5": "not base64"}), "InvalidDigest", 400},
			{"a PUT to no bucket", signed(t, http.MethodPut, sv.url+"/nobucket/k", append(osdtest.Payload(1<<20, 55), smuggled...)), "NoSuchBucket", 404},
			// S3 takes one checksum of a body, not two.
			{"a PUT with two checksums", signedWith(t, http.MethodPut, url, append(osdtest.Payload(1<<20, 56), smuggled...),
				map[string]string{"x-amz-checksum-crc32": "AAAAAA==", "x-amz-checksum-crc32c": "AAAAAA=="}), "InvalidRequest", 400},
			// A checksum the gateway does not check is refused, never
			// stored unchecked as if checked.
			{"a PUT with an MD5 checksum", signedWith(t, http.MethodPut, url, append(osdtest.Payload(1<<20, 57), smuggled...),
				map[string]string{"x-amz-checksum-md5": "AAAAAAAAAAAAAAAAAAAAAA==", "x-amz-checksum-algorithm": "MD5"}), "InvalidArgument", 400},
			{"a PUT naming SHA-512", signedWith(t, http.MethodPut, url, append(osdtest.Payload(1<<20, 58), smuggled...),
				map[string]string{"x-amz-checksum-algorithm": "SHA512"}), "InvalidArgument", 400},
			// Nor is the whole object's on a completion.
			{"a completion with an MD5 checksum", signedWith(t, http.MethodPost, url+"?uploadId=u",
				append([]byte("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>"), smuggled...),
				map[string]string{"x-amz-checksum-md5": "AAAAAAAAAAAAAAAAAAAAAA=="}), "InvalidArgument", 400},
		} {
			resp, body := sendOn(t, cl, tc.req)
			wantS3Error(t, tc.what, resp, body, tc.code, tc.status)
			resp, body = sendOn(t, cl, signed(t, http.MethodGet, url, nil))
			if resp.StatusCode != http.StatusOK || string(body) != "before" {
				t.Fatalf("the request after %s: %d %q", tc.what, resp.StatusCode, body)
			}
		}
	})
	t.Run("CopySourceOnAnotherMethod", func(t *testing.T) {
		// x-amz-copy-source makes only a PUT a copy: a GET ?uploadId
		// (ListParts) carrying it is refused, not run as UploadPartCopy.
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			resp, body := send(t, signedWith(t, m, url+"?uploadId=u", nil, map[string]string{"x-amz-copy-source": "/bad/k"}), "")
			wantS3Error(t, m+" ?uploadId with x-amz-copy-source", resp, body, "InvalidRequest", 400)
		}
	})
	t.Run("SubresourceOfAnotherMethod", func(t *testing.T) {
		// A subresource selects the operation: with a method it has no
		// operation for, the request is refused, not taken for the plain
		// operation of that method (a DELETE ?location is no DeleteBucket).
		e.mb(t, "keep")
		for _, tc := range []struct{ method, url string }{
			{http.MethodDelete, sv.url + "/keep?location"},
			{http.MethodPut, sv.url + "/keep?delete"},
			{http.MethodDelete, sv.url + "/keep?uploads"},
			{http.MethodPut, url + "?uploads"},
			{http.MethodDelete, url + "?uploads"},
			{http.MethodHead, url + "?uploads"},
		} {
			resp, body := send(t, signed(t, tc.method, tc.url, []byte("x")), "")
			if tc.method == http.MethodHead {
				if resp.StatusCode != http.StatusMethodNotAllowed {
					t.Fatalf("%s %s: %d, want 405", tc.method, tc.url, resp.StatusCode)
				}
				continue
			}
			wantS3Error(t, tc.method+" "+tc.url, resp, body, "MethodNotAllowed", http.StatusMethodNotAllowed)
		}
		if _, err := e.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("keep")}); err != nil {
			t.Fatalf("the bucket is gone: %v", err)
		}
		// Where the subresource belongs to another scope, the plain
		// operation runs: ?location and ?delete name bucket operations.
		resp, body := send(t, signed(t, http.MethodGet, url+"?location", nil), "")
		if resp.StatusCode != http.StatusOK || string(body) != "before" {
			t.Fatalf("GET /bad/k?location: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("EmptyBucketSegment", func(t *testing.T) {
		// "//keep/k" names an empty bucket, not the service: a GET of it
		// is no ListBuckets, a PUT no write anywhere.
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			resp, body := send(t, signed(t, m, sv.url+"//bad/k", nil), "")
			wantS3Error(t, m+" //bad/k", resp, body, "InvalidBucketName", http.StatusBadRequest)
		}
	})
	t.Run("SemicolonInQuery", func(t *testing.T) {
		// A literal ';' in the query: SigV4 splits the query on '&' only,
		// net/url drops any pair with a ';' in it, so the request run
		// would not be the one signed (a DELETE ?versionId=x;y would
		// delete the current object). Refused, signed in a header or
		// presigned; S3 clients send ';' percent-encoded.
		ps := s3.NewPresignClient(sv.s3)
		pdel, err := ps.PresignDeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bad"), Key: aws.String("k"), VersionId: aws.String("3HL4kqtJlcpXroDTDmJ;x")})
		if err != nil {
			t.Fatal(err)
		}
		pget, err := ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bad"), Key: aws.String("k"),
			ResponseContentDisposition: aws.String("attachment; filename=x.txt")})
		if err != nil {
			t.Fatal(err)
		}
		presigned := func(method, u string) *http.Request {
			req, err := http.NewRequest(method, u, nil)
			if err != nil {
				t.Fatal(err)
			}
			return req
		}
		for _, tc := range []struct {
			what string
			req  *http.Request
		}{
			{"DELETE ?versionId=...;x", signed(t, http.MethodDelete, url+"?versionId=3HL4kqtJlcpXroDTDmJ%3Bx", nil)},
			{"GET ?response-content-disposition=...;...", signed(t, http.MethodGet, url+"?response-content-disposition=attachment%3B%20filename%3Dx.txt", nil)},
			{"presigned DELETE ?versionId=...;x", presigned(http.MethodDelete, pdel.URL)},
			{"presigned GET ?response-content-disposition=...;...", presigned(http.MethodGet, pget.URL)},
		} {
			// Signed with ';' escaped (its canonical form is the same),
			// sent with it literal.
			if !strings.Contains(tc.req.URL.RawQuery, "%3B") {
				t.Fatalf("%s: no %%3B in %q", tc.what, tc.req.URL.RawQuery)
			}
			tc.req.URL.RawQuery = strings.ReplaceAll(tc.req.URL.RawQuery, "%3B", ";")
			resp, body := send(t, tc.req, "")
			wantS3Error(t, tc.what, resp, body, "InvalidArgument", 400)
		}
		if b, _ := e.get(t, "bad", "k", ""); string(b) != "before" {
			t.Fatalf("a request with a literal ';' changed the object: %q", b)
		}
		// Percent-encoded, as clients send it, the ';' is served.
		resp, body := send(t, presigned(http.MethodGet, pget.URL), "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Disposition") != "attachment; filename=x.txt" {
			t.Fatalf("presigned GET with response-content-disposition: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Disposition"), body)
		}
	})
	t.Run("ExpectContinueMissingBucket", func(t *testing.T) {
		// A PUT that waits for 100 Continue before sending its body: to a
		// missing bucket it is answered 404 at once, as S3 does, its body
		// never asked for; to a bucket that is there it is asked for.
		up, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bad"), Key: aws.String("expect")})
		if err != nil {
			t.Fatal(err)
		}
		body := osdtest.Payload(1<<20, 56)
		first := func(u string) (*http.Response, []byte) {
			t.Helper()
			req := signedWith(t, http.MethodPut, u, body, map[string]string{"Expect": "100-continue"})
			conn := rawConn(t, sv.addr, req, 0)
			conn.SetReadDeadline(time.Now().Add(time.Minute))
			resp, err := http.ReadResponse(bufio.NewReader(conn), req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			return resp, b
		}
		for _, u := range []string{sv.url + "/nobucket/k", sv.url + "/nobucket/k?partNumber=1&uploadId=" + *up.UploadId} {
			resp, b := first(u)
			wantS3Error(t, "PUT "+u+" waiting for 100 Continue", resp, b, "NoSuchBucket", 404)
		}
		for _, u := range []string{url, sv.url + "/bad/expect?partNumber=1&uploadId=" + *up.UploadId} {
			if resp, b := first(u); resp.StatusCode != http.StatusContinue {
				t.Fatalf("PUT %s waiting for 100 Continue: %d %s, want 100", u, resp.StatusCode, b)
			}
		}
	})
	t.Run("SlowBody", func(t *testing.T) {
		// Headers and 10 bytes of 100000, then nothing: RequestTimeout
		// after ClientTimeout, and nothing stored.
		conn := rawConn(t, sv.addr, signed(t, http.MethodPut, url, osdtest.Payload(100000, 52)), 10)
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		wantS3Error(t, "a stalled body", resp, body, "RequestTimeout", 400)
	})
	t.Run("SlowSteadyBody", func(t *testing.T) {
		// A body that never stalls for ClientTimeout (1 s) but takes
		// twice that in all: stored, and the 200 arrives.
		req := signed(t, http.MethodPut, sv.url+"/bad/steady", []byte("0123456789"))
		conn := rawConn(t, sv.addr, req, 0)
		for i := range 10 {
			time.Sleep(200 * time.Millisecond) // a slow client's pace, not synchronization
			if _, err := conn.Write([]byte{byte('0' + i)}); err != nil {
				t.Fatal(err)
			}
		}
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a slow, steady PUT of 2 s: %v %v; want 200", resp, err)
		}
		if b, _ := e.get(t, "bad", "steady", ""); string(b) != "0123456789" {
			t.Fatalf("stored %q", b)
		}
	})
	t.Run("SlowHeaders", func(t *testing.T) {
		conn, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /bad/k HTTP/1.1\r\nHost: x\r\n")
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		// The gateway hangs up (net/http may first say 408).
		if _, err := io.ReadAll(conn); err != nil {
			t.Fatalf("a client that stalls in its headers: %v (the connection was not closed)", err)
		}
	})
	t.Run("SlowSteadyReader", func(t *testing.T) {
		// A GET whose client takes 32 KiB every 20 ms, through a pipe
		// with no socket buffers: it never stalls for ClientTimeout (600
		// ms), though the body, handed over in one 2 MiB write, takes
		// twice that. The whole body arrives.
		data := osdtest.Payload(2<<20, 54)
		e.put(t, "bad", "steady-get", data)
		ln := newPipeListener()
		pv := serveOn(t, e, ln, func(o *s3gw.Options) { o.ClientTimeout = 600 * time.Millisecond })
		hc := &http.Client{Transport: &http.Transport{DialContext: ln.dial}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Do(signed(t, http.MethodGet, "http://pipe/bad/steady-get", nil))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %v %v", resp, err)
		}
		defer resp.Body.Close()
		var got []byte
		buf := make([]byte, 32<<10)
		for {
			n, err := io.ReadFull(resp.Body, buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // a slow client's pace, not synchronization
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("a steady reader of 1.6 MiB/s got %d of %d bytes; log:\n%s", len(got), len(data), pv.log.String())
		}
	})
	t.Run("SlowReader", func(t *testing.T) {
		// A GET whose client takes nothing: once the socket buffers are
		// full the write stalls, and the gateway gives up on it.
		data := osdtest.Payload(32<<20, 53)
		e.put(t, "bad", "big", data)
		conn := rawConn(t, sv.addr, signed(t, http.MethodGet, sv.url+"/bad/big", nil), -1)
		deadline := time.Now().Add(time.Minute)
		for {
			if strings.Contains(sv.log.String(), "request failed after its response began") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the gateway still writes to a client that reads nothing; log:\n%s", sv.log.String())
			}
			time.Sleep(20 * time.Millisecond) // polling the log, with a deadline
		}
		conn.Close()
	})
	t.Run("ClientHangsUp", func(t *testing.T) {
		// A client that takes the start of a GET and hangs up (rclone
		// cat --count, a media player seeking): the request ends, and
		// its write error is the client's doing, not a warning of ours.
		e.put(t, "bad", "hangup", osdtest.Payload(32<<20, 55))
		conn := rawConn(t, sv.addr, signed(t, http.MethodGet, sv.url+"/bad/hangup", nil), -1)
		if _, err := io.ReadFull(conn, make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
		conn.(*net.TCPConn).SetLinger(0) // a reset, as a killed client's
		conn.Close()
		sv.hungUp(t, "hangup", "GetObject")
	})
	t.Run("ClientHangsUpMidPut", func(t *testing.T) {
		// A client killed while it sends a PUT's body: the request ends,
		// nothing is stored, and it is counted as the client's (499),
		// not as a server error (a 500 would page someone).
		// It asks 100-continue and sends part of the body once told to,
		// so that the reset comes while the handler reads the body, not
		// before the server has read the request's head.
		body := osdtest.Payload(8<<20, 56)
		req := signed(t, http.MethodPut, sv.url+"/bad/hangput", body)
		req.Header.Set("Expect", "100-continue")
		conn := rawConn(t, sv.addr, req, 0)
		cont, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.Contains(cont, " 100 ") {
			t.Fatalf("waiting for 100 Continue: %q, %v", cont, err)
		}
		if _, err := conn.Write(body[:1<<20]); err != nil {
			t.Fatal(err)
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		if line := sv.hungUp(t, "hangput", "PutObject"); !strings.Contains(line, "status=499") {
			t.Fatalf("a PUT whose client hung up: %s", line)
		}
		if _, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bad"), Key: aws.String("hangput")}); err == nil {
			t.Fatal("a PUT cut short stored an object")
		}
	})
	if b, _ := e.get(t, "bad", "k", ""); string(b) != "before" {
		t.Fatalf("bad input changed the object: %q", b)
	}
	sv.unharmed(t, ctx, "all of it")
}

// hungUp waits for the access log line of op on key, a request whose
// client hung up, and checks that nothing of it was logged as a warning
// (a client's doing is no trouble of ours); it returns the line.
func (sv *served) hungUp(t *testing.T, key, op string) string {
	t.Helper()
	var line string
	osdtest.Eventually(t, time.Minute, "the hung-up "+op+"'s access log line", func() bool {
		for l := range strings.Lines(sv.log.String()) {
			if strings.Contains(l, "key="+key+" ") && strings.Contains(l, "op="+op+" ") {
				line = l
				return true
			}
		}
		return false
	})
	id := strings.Fields(line[strings.Index(line, " id="):])[0]
	for l := range strings.Lines(sv.log.String()) {
		if strings.Contains(l, id) && strings.Contains(l, "level=WARN") {
			t.Fatalf("a client's hang-up logged as a warning: %s", l)
		}
	}
	return line
}

// pipeListener hands a gateway the server ends of net.Pipe connections,
// which have no buffers: a write takes as long as the client takes to
// read it, whatever the kernel's socket buffers would hold.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial is an http.Transport's DialContext to the listener.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestNoAccessLog: Options.NoAccessLog (osprey s3 --access-log=false)
// leaves out the line per request, and nothing else the gateway logs.
func TestNoAccessLog(t *testing.T) {
	e := newEnv(t)
	for _, off := range []bool{false, true} {
		sv := serveWith(t, e, func(o *s3gw.Options) { o.NoAccessLog = off })
		_, err := sv.s3.HeadBucket(e.ctx, &s3.HeadBucketInput{Bucket: aws.String("nobucket")})
		wantCode(t, "HEAD of a missing bucket", err, "NotFound", http.StatusNotFound)
		logged := func() bool { return strings.Contains(sv.log.String(), `msg=s3 `) }
		if !off {
			osdtest.Eventually(t, 10*time.Second, "the access log line", logged)
		} else if logged() {
			// The line is written before the handler returns, so
			// before the answer goes out.
			t.Fatalf("an access log line with NoAccessLog:\n%s", sv.log.String())
		}
	}
}
