package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/sigv4"
)

// s3Client is the benchmark's client for the operations it measures (PUT,
// GET, HEAD, DELETE and ListObjectsV2 of an object), as warp has minio-go:
// a load generator should spend its CPU on the requests, not on a general
// SDK's middleware. Each request is signed with SigV4 (checked against
// aws-sdk-go-v2's signer in the tests), written in one write on a kept
// HTTP/1.1 connection of its own and its response read on the same
// goroutine, with net/http's parser. A connection serves one request at a
// time; there are as many as requests in flight.
type s3Client struct {
	addr     string // host:port to dial
	host     string // the Host header
	tls      *tls.Config
	basePath string // the endpoint's path, "" or "/prefix"
	access   string
	secret   string
	region   string
	// signPayload signs each body's SHA-256 rather than UNSIGNED-PAYLOAD.
	signPayload bool
	now         func() time.Time

	idle chan *s3Conn
	key  atomic.Pointer[dayKey]
}

// dayKey is the signing key of one day, and its credential scope.
type dayKey struct {
	date  string // YYYYMMDD
	key   *sigv4.Key
	scope []byte
}

// s3Conn is one connection and its buffers.
type s3Conn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte // the request's head, and a small body after it
	// scratch is where a large body is read to be dropped: in reads of
	// up to its size, where io.Discard reads 8 KiB at a time.
	scratch []byte
	body    io.LimitedReader // a simple response's body (parseHead)
}

// discard reads r to its end, size bytes if known, and drops it.
func (conn *s3Conn) discard(r io.Reader, size int64) (int64, error) {
	if size >= 0 && size <= 64<<10 {
		return io.Copy(io.Discard, r)
	}
	if conn.scratch == nil {
		conn.scratch = make([]byte, 256<<10)
	}
	var n int64
	for {
		m, err := r.Read(conn.scratch)
		n += int64(m)
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil:
			return n, err
		}
	}
}

// readBody reads r, a body of length bytes (-1: not known), to sink, or
// drops it when sink is nil.
func (conn *s3Conn) readBody(r io.Reader, length int64, sink io.Writer) error {
	var n int64
	var err error
	if sink == nil {
		n, err = conn.discard(r, length)
	} else {
		n, err = io.Copy(sink, r)
	}
	if err == nil && length >= 0 && n != length {
		err = fmt.Errorf("%d bytes of %d: %w", n, length, io.ErrUnexpectedEOF)
	}
	return err
}

// maxInlineBody is the largest body written in the same write as the
// request's head.
const maxInlineBody = 64 << 10

func newS3Client(t S3Target, concurrency int) (*s3Client, error) {
	u, err := url.Parse(t.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("bench: S3 endpoint %q: %w", t.Endpoint, err)
	}
	c := &s3Client{host: u.Host, basePath: trimSlash(u.Path), access: t.AccessKey, secret: t.SecretKey,
		region: t.Region, signPayload: t.SignPayload, now: time.Now, idle: make(chan *s3Conn, 2*concurrency+2)}
	if c.region == "" {
		c.region = "us-east-1"
	}
	port := u.Port()
	switch u.Scheme {
	case "http":
		port = cmpOr(port, "80")
	case "https":
		port = cmpOr(port, "443")
		c.tls = &tls.Config{ServerName: u.Hostname()}
	default:
		return nil, fmt.Errorf("bench: S3 endpoint %q: want http:// or https://", t.Endpoint)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("bench: S3 endpoint %q has no host", t.Endpoint)
	}
	c.addr = net.JoinHostPort(u.Hostname(), port)
	return c, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// s3Error is an S3 error answer.
type s3Error struct {
	Method, Path string
	Status       int
	Code         string `xml:"Code"`
	Message      string `xml:"Message"`
}

func (e *s3Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("%s %s: HTTP %d", e.Method, e.Path, e.Status)
	}
	return fmt.Sprintf("%s %s: HTTP %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// signingKey is the key of the day of amzDate, derived once a day.
func (c *s3Client) signingKey(amzDate []byte) *dayKey {
	if k := c.key.Load(); k != nil && k.date == string(amzDate[:8]) {
		return k
	}
	date := string(amzDate[:8])
	k := &dayKey{date: date, key: sigv4.DeriveKey(c.secret, date, c.region, "s3"),
		scope: sigv4.AppendScope(nil, date, c.region, "s3")}
	c.key.Store(k)
	return k
}

// appendRequest appends the head of a signed request to b: the path is
// /BUCKET/KEY (path style; KEY escaped as SigV4's canonical URI, so the
// path sent is the one signed), query is canonical already (sorted,
// escaped), and a body of size bytes follows when size >= 0.
func (c *s3Client) appendRequest(b []byte, method, bucket, key, query string, body []byte, size int, now time.Time) []byte {
	var dateBuf [len(sigv4.AmzDateLayout)]byte
	amzDate := now.UTC().AppendFormat(dateBuf[:0], sigv4.AmzDateLayout)
	payload := "UNSIGNED-PAYLOAD"
	var sumHex [2 * sha256.Size]byte
	if c.signPayload {
		sum := sha256.Sum256(body)
		payload = string(hex.AppendEncode(sumHex[:0], sum[:]))
	}
	// The canonical request is built in b past the request line's path,
	// then overwritten by the rest of the head.
	b = append(b, method...)
	b = append(b, ' ')
	pathStart := len(b)
	b = append(b, c.basePath...)
	b = append(b, '/')
	b = sigv4.AppendEscape(b, bucket, true)
	if key != "" {
		b = append(b, '/')
		b = sigv4.AppendEscape(b, key, true)
	}
	path := b[pathStart:]
	canonStart := len(b)
	b = append(b, method...)
	b = append(b, '\n')
	b = append(b, path...)
	b = append(b, '\n')
	b = append(b, query...)
	b = append(b, "\nhost:"...)
	b = append(b, c.host...)
	b = append(b, "\nx-amz-content-sha256:"...)
	b = append(b, payload...)
	b = append(b, "\nx-amz-date:"...)
	b = append(b, amzDate...)
	b = append(b, "\n\nhost;x-amz-content-sha256;x-amz-date\n"...)
	b = append(b, payload...)
	k := c.signingKey(amzDate)
	var sigBuf [2 * sha256.Size]byte
	sig := sigv4.AppendSignature(sigBuf[:0], k.key, string(amzDate), k.scope, b[canonStart:])
	b = b[:canonStart]
	if query != "" {
		b = append(b, '?')
		b = append(b, query...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nUser-Agent: osprey-bench\r\nX-Amz-Date: "...)
	b = append(b, amzDate...)
	b = append(b, "\r\nX-Amz-Content-Sha256: "...)
	b = append(b, payload...)
	b = append(b, "\r\nAuthorization: "+sigv4.Algorithm+" Credential="...)
	b = append(b, c.access...)
	b = append(b, '/')
	b = append(b, k.scope...)
	b = append(b, ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="...)
	b = append(b, sig...)
	if size >= 0 {
		b = append(b, "\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(size), 10)
	}
	return append(b, "\r\n\r\n"...)
}

// The requests ReadResponse is told a response answers: only HEAD's
// changes how the response is read (no body).
var (
	headRequest  = &http.Request{Method: http.MethodHead}
	otherRequest = &http.Request{Method: http.MethodGet}
)

// do sends a request and reads its response. A 2xx response's body goes
// to sink (io.Discard when nil), the length of a whole one checked; any
// other status is an *s3Error.
func (c *s3Client) do(ctx context.Context, method, bucket, key, query string, body []byte, withBody bool, sink io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		conn, reused, err := c.conn(ctx)
		if err != nil {
			return err
		}
		sent, err := c.roundTrip(ctx, conn, method, bucket, key, query, body, withBody, sink)
		if err != nil && reused && !sent && attempt == 0 && ctx.Err() == nil {
			// The server closed a kept connection before this request
			// reached it (an idle timeout): once more, on a new one.
			continue
		}
		return err
	}
}

// roundTrip is one request on conn, which it keeps for the next request
// or closes. sent is whether any of the response came back.
func (c *s3Client) roundTrip(ctx context.Context, conn *s3Conn, method, bucket, key, query string, body []byte, withBody bool, sink io.Writer) (bool, error) {
	var stop func() bool
	if ctx.Done() != nil {
		// Unblocks the connection's I/O when ctx ends; the connection is
		// then closed rather than kept.
		stop = context.AfterFunc(ctx, func() { conn.c.SetDeadline(time.Unix(1, 0)) })
	}
	sent, keep, err := c.exchange(conn, method, bucket, key, query, body, withBody, sink)
	if stop != nil && !stop() {
		keep = false
		if err != nil {
			err = ctx.Err()
		}
	}
	if !keep {
		conn.c.Close()
		return sent, err
	}
	select {
	case c.idle <- conn:
	default:
		conn.c.Close()
	}
	return sent, err
}

// exchange writes the request and reads its response; keep says whether
// conn may serve another.
func (c *s3Client) exchange(conn *s3Conn, method, bucket, key, query string, body []byte, withBody bool, sink io.Writer) (sent, keep bool, err error) {
	size := -1
	if withBody {
		size = len(body)
	}
	conn.buf = c.appendRequest(conn.buf[:0], method, bucket, key, query, body, size, c.now())
	inline := len(body) <= maxInlineBody
	if inline {
		conn.buf = append(conn.buf, body...)
	}
	if _, err = conn.c.Write(conn.buf); err == nil && !inline {
		_, err = conn.c.Write(body)
	}
	if err != nil {
		return false, false, err
	}
	if _, err = conn.br.Peek(1); err != nil {
		return false, false, err
	}
	// The usual response is read from its head in the buffer; any other
	// by net/http.
	buffered, _ := conn.br.Peek(conn.br.Buffered())
	if h, ok := parseHead(buffered); ok {
		conn.br.Discard(h.n)
		if method != http.MethodHead {
			conn.body = io.LimitedReader{R: conn.br, N: h.length}
			err = conn.readBody(&conn.body, h.length, sink)
		}
		if err != nil {
			return true, false, fmt.Errorf("%s /%s/%s: %w", method, bucket, key, err)
		}
		return true, true, nil
	}
	req := otherRequest
	if method == http.MethodHead {
		req = headRequest
	}
	resp, err := http.ReadResponse(conn.br, req)
	if err != nil {
		return true, false, err
	}
	if resp.StatusCode/100 != 2 {
		e := &s3Error{Method: method, Path: "/" + bucket + "/" + key, Status: resp.StatusCode}
		if b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20)); rerr == nil {
			xml.Unmarshal(b, e) // a body that is not S3's error document leaves only the status
		}
		return true, !resp.Close && resp.Body.Close() == nil, e
	}
	length := resp.ContentLength
	if method == http.MethodHead {
		length = -1 // the object's, with no body
	}
	if err = conn.readBody(resp.Body, length, sink); err != nil {
		return true, false, fmt.Errorf("%s /%s/%s: %w", method, bucket, key, err)
	}
	return true, !resp.Close && resp.Body.Close() == nil, nil
}

// conn takes a kept connection, or dials one; reused says which.
func (c *s3Client) conn(ctx context.Context) (*s3Conn, bool, error) {
	select {
	case conn := <-c.idle:
		return conn, true, nil
	default:
	}
	d := net.Dialer{Timeout: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	if c.tls != nil {
		tc := tls.Client(nc, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, false, err
		}
		nc = tc
	}
	return &s3Conn{c: nc, br: bufio.NewReaderSize(nc, 16<<10), buf: make([]byte, 0, 1<<10)}, false, nil
}

// close closes the kept connections.
func (c *s3Client) close() {
	for {
		select {
		case conn := <-c.idle:
			conn.c.Close()
		default:
			return
		}
	}
}
