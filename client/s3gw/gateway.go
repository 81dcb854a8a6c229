// Package s3gw is Osprey's S3 HTTP gateway: the S3 REST API (buckets,
// objects, listings, ranges, metadata, multipart uploads) over the Go SDK, so that aws-cli,
// boto3 or aws-sdk-go-v2 use an Osprey cluster unchanged. It is a client
// like any other: it holds no state of its own (any number of gateways can
// serve one cluster) and reaches the cluster only through package client's
// public API; the S3 keys come from the mons' auth table (access.go).
//
// Every request must be signed (AWS Signature Version 4, in the
// Authorization header or a presigned URL); the gateway verifies the
// signature itself against Credentials, checks the key's entity's caps
// for the operation, and verifies the body's SHA-256, MD5 or
// x-amz-checksum-* while it streams, before the object is committed.
//
// The gateway must never buffer a whole object: a body goes from the HTTP
// connection to the SDK's send buffers a piece at a time (at most 64 MiB
// for a body up to that size, put in one op; PartSize per piece in flight
// above, for a PUT or a part up to 5 GiB), and a GET streams the SDK's
// read windows to the connection.
package s3gw

import (
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr/auth"
)

// Options configure a Gateway.
type Options struct {
	// Client is the cluster the gateway serves; required. Make it with
	// client.Options{MD5: true}: S3 clients expect the ETag of an object
	// put in one request to be the MD5 of its body.
	Client *client.Client
	// Credentials verify signatures; required.
	Credentials Credentials
	// Region is what GetBucketLocation answers; default us-east-1.
	// Requests signed for any region are accepted.
	Region string
	// Domains enable virtual-hosted-style requests: a request to
	// BUCKET.DOMAIN (any port) addresses BUCKET. Path-style requests work
	// on any host.
	Domains []string
	// PartSize is the piece size of a PUT above 64 MiB, which goes to the
	// cluster in pieces, Concurrency in flight (default 16 MiB and 4):
	// memory per PUT is bounded by 64 MiB or PartSize*Concurrency,
	// whichever is larger. (A part above 64 MiB goes in the SDK's default
	// pieces, 16 MiB and 4.)
	PartSize    int64
	Concurrency int
	// Logger gets one access log line per request (Info) and the
	// gateway's own troubles; default slog.Default().
	Logger *slog.Logger
	// NoAccessLog leaves the access log lines out (RGW's ops log and
	// MinIO's are off unless asked for): some 330 bytes a request.
	NoAccessLog bool
	// ShutdownTimeout bounds how long Serve waits, once its context is
	// done, for requests in progress to finish. Default 30s.
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long Serve goes on taking new requests once
	// its context is done, Ready saying it drains, so that a load
	// balancer or Kubernetes probing it takes it out before it refuses
	// connections (Envoy's drain time, a preStop sleep). Default 0.
	ShutdownDelay time.Duration
	// ClientTimeout bounds how long a client may take to send its
	// request's headers, or the next bytes of its body, or to take the
	// next bytes of the response (default 1 minute). It is a bound on
	// stalls, not on a request's whole time, so a 5 GiB body that keeps
	// coming is never cut; a stalled body is answered RequestTimeout, a
	// stalled reader's connection is closed.
	ClientTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that has waited this
	// long for its next request (default 2 minutes); a new connection
	// must send its first request's headers within ClientTimeout.
	IdleTimeout time.Duration
	// MaxConnections caps the connections Serve holds open at once, each
	// a file descriptor and its buffers (the headers it may send are
	// bounded too: at most 64 KiB). At the cap Serve accepts none until
	// one closes: new clients wait in the kernel's listen backlog, and a
	// warning is logged (at most once a minute). Default (0):
	// DefaultMaxConnections(); negative: no cap.
	MaxConnections int
	// MaxNewPerHost bounds the connections from one source IP that have
	// not yet sent a whole request, once more than half of MaxConnections
	// are open: one over it is closed at accept (as msgr's
	// MaxUnauthPerHost), so that one host's slowloris cannot hold the
	// slots, nor the listen backlog behind them. Default (0): 256;
	// negative: none. A proxy in front counts as one host: it sends whole
	// requests, so only a flood it relays would meet the bound.
	MaxNewPerHost int
	// MaxBodyMemory bounds the memory the bodies of the PUTs and
	// UploadParts in progress hold at once, each counted as its length
	// up to the per-request bound (64 MiB, or PartSize*Concurrency if
	// larger): past it a request waits up to BodyMemoryWait for its
	// share, then is answered 503 SlowDown, which S3 clients back off
	// and retry. Default (0): DefaultMaxBodyMemory (1 GiB); negative: no
	// bound.
	MaxBodyMemory int64
	// MaxBodyMemoryPerUser is the most of MaxBodyMemory one user (an
	// entity; an access key without one) holds at once: past it, its
	// requests wait and are answered SlowDown as above while other
	// users' go on. A body is charged its declared length and may come
	// slowly, so without it one user's slow uploads (or a presigned
	// URL's) held the whole of it. A request takes at most the whole of
	// its user's. Default (0): a quarter of MaxBodyMemory; negative: none.
	MaxBodyMemoryPerUser int64
	// BodyMemoryWait is that wait; default 10s.
	BodyMemoryWait time.Duration
	// OnBodyMemory, if set, is told how much of MaxBodyMemory is held
	// each time that changes (internal/metrics' gauge); it must be quick.
	OnBodyMemory func(held int64)
	// CORSOrigins are the web origins whose pages may call the gateway
	// from a browser (Cross-Origin Resource Sharing; cors.go):
	// "https://app.example.com", one '*' for any part
	// ("https://*.example.com"), or "*" for every origin. The same for
	// every bucket. None (the default): a preflight is refused, as S3
	// refuses one for a bucket without CORS rules.
	CORSOrigins []string
	// Now is the clock signatures are checked against (tests).
	Now func() time.Time
	// StaleUploadAge: a PUT above 64 MiB is an upload of the SDK's own
	// while it streams (client.MultipartUpload.Internal), which no S3
	// client sees; one whose gateway died half-way stays with its pieces.
	// The gateway aborts such internal uploads once older than this:
	// those of a bucket when it lists its uploads, and those of every
	// bucket every StaleUploadSweep while Serve runs. Default 24h
	// (client.DefaultStaleUploadAge); negative: never. The users'
	// uploads are never aborted by it (osprey rm --incomplete does that).
	StaleUploadAge time.Duration
	// StaleUploadSweep is the interval of that sweep: default 1 hour;
	// negative: none.
	StaleUploadSweep time.Duration
	// StaleUploadNow is the clock uploads are aged by; default time.Now
	// (tests).
	StaleUploadNow func() time.Time
	// OnRequest, if set, is told of each request when it ends, with what
	// the access log line says of it less who made it and what it named
	// (internal/metrics counts them). It runs on the request's goroutine
	// and must be quick.
	OnRequest func(RequestInfo)
}

// RequestInfo is one finished request, for OnRequest.
type RequestInfo struct {
	Op     string // the S3 operation ("PutObject"), "Auth" for one refused before it was known, "Unsupported" for one the gateway lacks
	Method string
	// Status is the HTTP status sent (0 if the connection was cut before
	// any), but for a copy that sent its 200 early to keep its client
	// waiting and then failed: its error's status (the body's error
	// document says so; S3's clients read it).
	Status int
	// Error is the S3 error code answered (its error document's Code,
	// "SignatureDoesNotMatch"), "" for a request that succeeded.
	Error    string
	BytesIn  int64 // body bytes read and verified
	BytesOut int64 // body bytes written
	Duration time.Duration
}

// Gateway serves the S3 API; it is an http.Handler.
type Gateway struct {
	opts Options
	cl   *client.Client
	log  *slog.Logger
	// failures rate-limits the log's line per failed request (fail): a
	// cluster that refuses the gateway fails every request alike.
	failures guard.RateLog
	bodies   *bodyBudget // Options.MaxBodyMemory
	// capped is the listener Serve caps (Options.MaxConnections), for
	// tests; nil without a cap.
	capped atomic.Pointer[connCap]
	// draining: Serve's context is done (Ready).
	draining atomic.Bool
	// refused is the cluster's last refusal of the gateway itself (its
	// key rotated or removed, its caps cut), until a request the cluster
	// served, or Ready's check, shows it over; nil while none stands.
	refused atomic.Pointer[refusal]
	// checking: one Ready is checking a refusal (the others answer with
	// it meanwhile).
	checking atomic.Bool
	// okBucket is the first bucket a request used with the cluster's
	// consent: what Ready asks again after a refusal, so that a gateway
	// whose own caps name buckets is not taken out by one request for
	// another.
	okBucket atomic.Pointer[string]
	cors     []corsOrigin // Options.CORSOrigins; nil: no CORS
	inFlight atomic.Int64 // requests being served (InFlight)
}

// InFlight is how many requests the gateway is serving now: the ones a
// cluster that cannot take their ops (a PG not active, the gateway's own
// access refused) holds, as they wait, where the access log and the
// request counters see each one only once it ends.
func (g *Gateway) InFlight() int64 { return g.inFlight.Load() }

// refusal is a refusal of the gateway by the cluster.
type refusal struct {
	at     time.Time
	bucket string // of the refused request
	err    error
}

// Ready says why the gateway should get no new requests now, nil when it
// should (a readiness probe: /readyz of --metrics-addr): it drains for a
// stop (Options.ShutdownDelay), the cluster refuses the gateway (every
// request would be answered 503), or its cluster map has no OSD up. While
// a refusal stands, Ready asks the cluster again (at most one at a time),
// so that a renewed key or restored caps make the gateway ready without
// traffic a load balancer would no longer send it: a stat of the first
// bucket the cluster ever let it use (okBucket; before any, the refused
// request's), so that a refusal of one bucket its caps leave out is not
// taken for a refusal of the gateway.
func (g *Gateway) Ready() error {
	if g.draining.Load() {
		return errors.New("the S3 gateway is stopping")
	}
	if r := g.refused.Load(); r != nil {
		if !g.checking.CompareAndSwap(false, true) {
			return r.ready()
		}
		defer g.checking.Store(false)
		bucket := cmp.Or(r.bucket, readyProbeBucket)
		if ok := g.okBucket.Load(); ok != nil {
			bucket = *ok
		}
		ctx, cancel := context.WithTimeout(context.Background(), readyCheckTimeout)
		_, err := g.cl.StatBucket(ctx, bucket)
		cancel()
		switch {
		case clusterRefusal(err):
			g.refused.CompareAndSwap(r, &refusal{at: r.at, bucket: r.bucket, err: err})
			return r.ready()
		case err == nil || errors.Is(err, client.ErrNoSuchBucket):
			g.refused.CompareAndSwap(r, nil)
		}
	}
	mp := g.cl.Map()
	for info := range mp.OSDs() {
		if info.Up {
			return nil
		}
	}
	return fmt.Errorf("no OSD is up in the cluster map (epoch %d)", mp.Epoch())
}

// readyCheckTimeout bounds Ready's check of a refusal, under the probe
// timeouts of load balancers and Kubernetes (1 s by default).
const readyCheckTimeout = 800 * time.Millisecond

// readyProbeBucket is what Ready stats when the refused request named no
// bucket (ListBuckets): NoSuchBucket says the cluster serves the gateway.
const readyProbeBucket = "osprey-s3-ready-probe"

func (r *refusal) ready() error {
	return fmt.Errorf("the cluster has refused the S3 gateway's own access since %s (its key rotated or removed, or its caps cut; requests are answered 503 until its keyring is renewed): %v",
		r.at.UTC().Format(time.RFC3339), r.err)
}

// noteRefused records a refusal of the gateway by the cluster (Ready);
// the first of a run keeps its time.
func (g *Gateway) noteRefused(bucket string, err error) {
	at := time.Now()
	if r := g.refused.Load(); r != nil {
		at = r.at
	}
	g.refused.Store(&refusal{at: at, bucket: bucket, err: err})
}

// New makes a gateway.
func New(opts Options) (*Gateway, error) {
	if opts.Client == nil {
		return nil, errors.New("s3gw: Options.Client is required")
	}
	if opts.Credentials == nil {
		return nil, errors.New("s3gw: Options.Credentials is required (anonymous access is not served)")
	}
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.PartSize == 0 {
		opts.PartSize = 16 << 20
	}
	if opts.PartSize < 5<<20 || opts.PartSize > maxSinglePut {
		return nil, fmt.Errorf("s3gw: PartSize %d: must be 5 MiB to 64 MiB", opts.PartSize)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.ClientTimeout <= 0 {
		opts.ClientTimeout = time.Minute
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = DefaultMaxConnections()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StaleUploadAge == 0 {
		opts.StaleUploadAge = client.DefaultStaleUploadAge
	}
	if opts.StaleUploadSweep == 0 {
		opts.StaleUploadSweep = time.Hour
	}
	for i, d := range opts.Domains {
		opts.Domains[i] = strings.ToLower(strings.Trim(d, "."))
	}
	if opts.MaxBodyMemory == 0 {
		opts.MaxBodyMemory = DefaultMaxBodyMemory
	}
	if opts.BodyMemoryWait <= 0 {
		opts.BodyMemoryWait = defaultBodyMemoryWait
	}
	perRequest := max(int64(ops.MaxPutSize), opts.PartSize*int64(opts.Concurrency))
	cors, err := parseCORSOrigins(opts.CORSOrigins)
	if err != nil {
		return nil, err
	}
	return &Gateway{opts: opts, cl: opts.Client, log: opts.Logger, cors: cors,
		bodies: newBodyBudget(opts.MaxBodyMemory, perRequest, opts.MaxBodyMemoryPerUser, opts.BodyMemoryWait, opts.OnBodyMemory)}, nil
}

// Serve serves HTTP on ln until ctx is done, then stops accepting and
// lets the requests in progress finish (within ShutdownTimeout). It
// returns nil after such a stop.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler: g,
		// From a connection's start, or from a kept-alive one's next
		// request's first byte: a whole deadline, so a header sent a
		// byte at a time is cut too.
		ReadHeaderTimeout: g.opts.ClientTimeout,
		IdleTimeout:       g.opts.IdleTimeout,
		// net/http reads at most this (and 4 KiB of bufio slack) of a
		// request line and headers, then answers 431 itself and closes
		// the connection: a header block in progress holds no more. In
		// that slack the gateway answers RequestHeaderSectionTooLarge.
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if g.opts.MaxConnections > 0 {
		capped := capConnections(ln, g.opts.MaxConnections, cmp.Or(g.opts.MaxNewPerHost, defaultMaxNewPerHost), g.log)
		srv.ConnState = capped.track
		ln = capped
		g.capped.Store(capped)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	var sweep sync.WaitGroup
	defer sweep.Wait()
	defer stopSweep()
	if g.opts.StaleUploadAge > 0 && g.opts.StaleUploadSweep > 0 {
		sweep.Go(func() { g.sweepStaleUploads(sweepCtx) })
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.draining.Store(true)
	if d := g.opts.ShutdownDelay; d > 0 {
		g.log.Info("s3: draining: still serving while load balancers notice", "for", d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), g.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// request is one request in progress.
type request struct {
	id     string
	op     string // for the access log
	w      *loggedWriter
	r      *http.Request
	bucket string
	key    string
	access string   // the verified access key; for a refused signature, the key it claimed
	who    Identity // its owner
	code   string   // the S3 error code answered, "" for none
	q      url.Values
	qDone  bool
	// lateErr: the error a long copy answered inside the 200 it had
	// sent to keep its client waiting (answerLong), for the access log
	// and metrics, which would see a 200 only.
	lateErr *Error
}

// query is the request's query, parsed once; nil (which has nothing) for
// the usual request without one.
func (req *request) query() url.Values {
	if !req.qDone {
		if req.r.URL.RawQuery != "" {
			req.q = req.r.URL.Query()
		}
		req.qDone = true
	}
	return req.q
}

// movingDeadline is a connection's read or write deadline that each
// read or write moves on, so that it bounds a stall rather than a
// transfer. It is moved only when less than 7/8 of the timeout is left,
// not at every call.
type movingDeadline struct {
	rc      *http.ResponseController
	read    bool // the read deadline, else the write one
	timeout time.Duration
	until   time.Time
}

func (d *movingDeadline) touch() {
	now := time.Now()
	if d.until.Sub(now) > d.timeout*7/8 {
		return
	}
	d.until = now.Add(d.timeout)
	d.set(d.until)
}

func (d *movingDeadline) clear() {
	d.until = time.Time{}
	d.set(time.Time{})
}

// set sets the deadline; ErrNotSupported where there is no connection
// (a recorder in tests): no deadline.
func (d *movingDeadline) set(t time.Time) {
	if d.read {
		d.rc.SetReadDeadline(t)
	} else {
		d.rc.SetWriteDeadline(t)
	}
}

// refuse answers err to a request refused before its body was read, and
// closes the connection after the answer: net/http would otherwise read up
// to 256 KiB of the body, to keep the connection, before it answers, and a
// body that stalls (anyone may send one, unsigned) held the answer until
// the read deadline and then lost it with the connection.
func (g *Gateway) refuse(req *request, err error) {
	if req.r.ContentLength != 0 {
		req.w.Header().Set("Connection", "close")
	}
	g.fail(req, err)
}

// exchange is what a request needs of the heap, in one allocation: its
// state, its response writer, the connection's deadlines, its body's
// checks and the request ID's header value.
type exchange struct {
	req    request
	w      loggedWriter
	rc     http.ResponseController
	rd, wd movingDeadline
	body   verifiedBody
	ids    [1]string
	one    [1]byte // an empty body's read
}

// loggedWriter counts what goes out, for the access log, and gives the
// client ClientTimeout to take each slice of a write.
type loggedWriter struct {
	http.ResponseWriter
	status   int
	bytes    int64
	deadline *movingDeadline // the connection's write deadline
	// capped is the connection cap, if any: a response that starts while
	// a new connection waits for a slot closes its own after it.
	capped *connCap
}

// starts is the response's start: at the cap, with a connection
// waiting, it says Connection: close (connCap.giveWay).
func (w *loggedWriter) starts(status int) {
	w.status = status
	if w.capped != nil && status >= 200 && w.capped.giveWay() {
		w.Header().Set("Connection", "close")
	}
}

func (w *loggedWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.starts(status)
	}
	// The deadline is a stall's, not the request's: an answer after a
	// long body that kept coming must still go out.
	w.deadline.touch()
	w.ResponseWriter.WriteHeader(status)
}

// writeSlice is the most one write to the connection takes: a get hands
// over up to 8 MiB at once, and a client reading at 40 KiB/s takes minutes
// over that, so the deadline moves between slices. A client must take
// writeSlice within 7/8 of ClientTimeout (about 5 KiB/s at the default;
// the deadline moves once an eighth of it is spent) to be a steady reader
// and not a stalled one.
const writeSlice = 256 << 10

func (w *loggedWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.starts(http.StatusOK)
	}
	done := 0
	for {
		w.deadline.touch()
		n, err := w.ResponseWriter.Write(p[done : done+min(len(p)-done, writeSlice)])
		done += n
		w.bytes += int64(n)
		if err != nil || done == len(p) {
			return done, err
		}
	}
}

func (w *loggedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// newRequestID is 64 random bits in hex: unique, not secret, so from
// math/rand/v2's per-thread ChaCha8 (seeded by the OS), with no getrandom
// per request as crypto/rand would make.
func newRequestID() string {
	const digits = "0123456789ABCDEF"
	v := rand.Uint64()
	var out [16]byte
	for i := range out {
		out[i] = digits[v>>60]
		v <<= 4
	}
	return string(out[:])
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	// Deadlines that move on with each read and write (stalls are bounded,
	// not transfers); the write one is set now as well, for the response
	// net/http writes after the handler.
	x := &exchange{rc: *http.NewResponseController(w)}
	x.wd = movingDeadline{rc: &x.rc, timeout: g.opts.ClientTimeout}
	x.rd = movingDeadline{rc: &x.rc, read: true, timeout: g.opts.ClientTimeout}
	x.wd.touch()
	// The read one too, from the start: a request refused before its body
	// is read (no or a bad signature, a bad name) leaves net/http to
	// discard up to 256 KiB of that body before it answers, and a body
	// that stalls there held the answer, and the connection, for good.
	x.rd.touch()
	x.w = loggedWriter{ResponseWriter: w, deadline: &x.wd, capped: g.capped.Load()}
	x.req = request{id: newRequestID(), w: &x.w, r: r}
	req := &x.req
	if r.ContentLength == 0 && r.ProtoAtLeast(1, 1) && expectsContinue(r) {
		// net/http sends 100 Continue at a body's first read, and so
		// never for an empty one, which the RFC allows. botocore before
		// 1.43.77 (aws-cli and boto3 on Debian 12 among them) sends the
		// expectation on empty PUTs too, and when the final answer comes
		// without the 100 it misparses the connection's next response:
		// that request stalls its 60 s read timeout and is sent again
		// (boto/botocore#3755). Sent first, before any header is set (a
		// 1xx carries the headers set so far), the 100 puts such a
		// client on the path it takes for every PUT with a body.
		w.WriteHeader(http.StatusContinue)
	}
	h := w.Header()
	// Canonical keys set directly: Set would canonicalize them on every
	// request.
	x.ids[0] = req.id
	h["X-Amz-Request-Id"], h["X-Amz-Id-2"], h["Server"] = x.ids[:], x.ids[:], serverHeader
	if g.cors != nil {
		g.corsHeaders(h, r)
	}
	var body *verifiedBody
	// The access log's arguments are built only when it is on (a gateway
	// run at warn level pays nothing for it).
	logOn := !g.opts.NoAccessLog && g.log.Enabled(r.Context(), slog.LevelInfo)
	if logOn || g.opts.OnRequest != nil {
		defer func() {
			in := int64(0)
			if body != nil {
				in = body.n
			}
			dur := time.Since(start)
			status, code := req.w.status, req.code
			if e := req.lateErr; e != nil {
				status, code = e.Status, e.Code
			}
			if logOn {
				args := []any{"id", req.id, "remote", r.RemoteAddr, "access_key", req.access, "entity", req.who.Entity, "op", req.op,
					"method", r.Method, "bucket", req.bucket, "key", req.key, "status", req.w.status,
					"bytes_in", in, "bytes_out", req.w.bytes, "dur", dur}
				if code != "" {
					args = append(args, "error", code)
				}
				if status != req.w.status {
					args = append(args, "error_status", status)
				}
				g.log.Info("s3", args...)
			}
			if g.opts.OnRequest != nil {
				g.opts.OnRequest(RequestInfo{Op: req.op, Method: r.Method, Status: status, Error: code, BytesIn: in, BytesOut: req.w.bytes, Duration: dur})
			}
		}()
	}

	req.bucket, req.key = g.route(r)
	if headerBytes(r) > maxHeaderBytes {
		req.op = "Auth"
		g.refuse(req, errf(ErrRequestHeaderSectionTooLarge, "your request header section exceeds the maximum allowed size of %d bytes", maxHeaderBytes))
		return
	}
	if strings.IndexByte(r.URL.RawQuery, ';') >= 0 {
		// SigV4 splits a query on '&' alone, net/url drops every pair
		// holding a ';': what ran would not be what was signed (a
		// DELETE ?versionId=v;x would remove the current object). S3
		// clients send ';' percent-encoded.
		req.op = "Auth"
		g.refuse(req, errf(ErrInvalidArgument, "the query holds a literal ';': percent-encode it (%%3B)"))
		return
	}
	if g.cors != nil && isPreflight(req) {
		req.op = "Preflight"
		if err := g.preflight(req); err != nil {
			g.refuse(req, err)
		}
		return
	}
	if err := unsignedKinds(req); err != nil {
		// Requests that are never signed the SigV4 way: an answer that
		// names the feature, not "anonymous access", which sends a
		// developer looking for a credentials problem.
		req.op = "Unsupported"
		g.refuse(req, err)
		return
	}
	auth, err := verify(r, g.opts.Credentials, g.opts.Now())
	if err != nil {
		// Which key was refused, for the access log: a wrong secret, a
		// revoked key and a skewed clock read alike otherwise.
		req.op, req.access = "Auth", claimedAccessKey(r)
		g.refuse(req, err)
		return
	}
	req.access, req.who = auth.AccessKey, auth.Identity
	if err := g.newVerifiedBody(&x.body, r, auth); err != nil {
		g.refuse(req, err)
		return
	}
	body = &x.body
	body.deadline = &x.rd
	if r.ContentLength == 0 {
		// An empty body is read to its end here, as no handler would: its
		// checks run there (a checksum or payload hash of other bytes, an
		// aws-chunked body's chunk signatures, its trailer and its
		// checksum, chunks past x-amz-decoded-content-length), and
		// unread, an empty PUT that failed them was stored and its
		// checksum echoed as if checked.
		if err := readEmpty(body, x.one[:]); err != nil {
			req.op = opName(req)
			req.w.Header().Set("Connection", "close")
			g.fail(req, err)
			body.Close()
			return
		}
		// Nothing more to read, so nothing can stall: a read deadline
		// left set would end net/http's background read of the idle
		// connection and, with it, the request's context, cutting a copy
		// that runs longer than ClientTimeout.
		x.rd.clear()
	}
	defer body.Close()
	// net/http learns from r.Body, once the handler is done, whether the
	// body was read to its end: put back, it sees one closed early and
	// does not take the rest of that body for the connection's next
	// request.
	orig := r.Body
	defer func() { r.Body = orig }()
	r.Body = body
	if err := g.dispatch(req); err != nil {
		g.fail(req, g.uploadOrBucket(req, err))
	} else {
		if g.refused.Load() != nil {
			// The cluster served the gateway again.
			g.refused.Store(nil)
		}
		if req.bucket != "" && g.okBucket.Load() == nil {
			b := req.bucket
			g.okBucket.CompareAndSwap(nil, &b)
		}
	}
	// net/http writes what is buffered of the response once the handler
	// returns: that write has a stall's time too.
	x.wd.touch()
}

// readEmpty reads a body of length 0 to its end (io.EOF), through buf.
func readEmpty(body io.Reader, buf []byte) error {
	for {
		switch n, err := body.Read(buf); {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		case n > 0: // the readers under it end at the length they were given
			return errf(ErrInvalidRequest, "the body holds more than its length, 0")
		}
	}
}

var serverHeader = []string{"Osprey"}

// maxHeaderBytes bounds a request's headers (and its URI), far above what
// S3 clients send (S3 allows 8 KiB of headers on a PUT).
const maxHeaderBytes = 64 << 10

// headerBytes is about the size of r's request line and headers.
func headerBytes(r *http.Request) int {
	n := len(r.RequestURI) + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// unsignedKinds refuses the two kinds of request S3 clients send without
// an Authorization header or a presigned query, for features the gateway
// does not have: a CORS preflight (OPTIONS), answered as S3 answers one
// for a bucket without a CORS configuration, and a browser's form upload
// (POST Object, signed by a POST policy in the form). The method first:
// the GETs and PUTs that are nearly every request pay nothing more.
func unsignedKinds(req *request) error {
	r := req.r
	formUpload := r.Method == http.MethodPost && req.key == "" && r.URL.RawQuery == "" &&
		strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/form-data")
	if formUpload && (r.Header.Get("Authorization") != "" || req.query().Has("X-Amz-Algorithm")) {
		return nil
	}
	if !formUpload && !isPreflight(req) {
		return nil
	}
	if formUpload {
		return errf(ErrNotImplemented, "POST Object (a browser's form upload with a POST policy) is not implemented: upload with a presigned PUT URL")
	}
	return errf(ErrAccessForbidden, "CORSResponse: CORS is not enabled for this bucket (the gateway does not implement CORS)")
}

// route finds the bucket and key a request addresses: virtual-hosted
// style when its host is BUCKET.DOMAIN of a configured domain, path style
// (/BUCKET/KEY) otherwise.
func (g *Gateway) route(r *http.Request) (bucket, key string) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	for _, d := range g.opts.Domains {
		if b, ok := strings.CutSuffix(host, "."+d); ok && b != "" {
			return b, strings.TrimPrefix(r.URL.Path, "/")
		}
	}
	bucket, key, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return bucket, key
}

// fail answers err as S3's XML error document, or, when the response has
// begun already, cuts the connection so that the client sees a short body
// rather than a complete-looking one.
func (g *Gateway) fail(req *request, err error) {
	if clusterRefusal(err) {
		g.noteRefused(req.bucket, err)
	}
	e := toS3Error(err)
	if req.w.status != 0 {
		level := slog.LevelWarn
		if clientGone(req, err) {
			// A client that read what it wanted and hung up (a range
			// read's tool that stops early): no trouble of ours.
			level = slog.LevelDebug
		}
		g.log.Log(req.r.Context(), level, "s3: request failed after its response began", "id", req.id, "err", err)
		panic(http.ErrAbortHandler)
	}
	if clientGone(req, err) {
		// The client went away (hung up, or reset the connection while
		// it sent a body): nobody reads an answer, and it is no server
		// error. Logged and counted as nginx's 499.
		req.w.WriteHeader(statusClientClosedRequest)
		return
	}
	g.noteFailure(req, e, err)
	req.code = e.Code
	if req.r.Method == http.MethodHead {
		req.w.WriteHeader(e.Status)
		return
	}
	writeXML(req.w, e.Status, errorDoc(req, e))
}

// clientGone reports whether err is req's client having hung up.
func clientGone(req *request, err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.Canceled) && req.r.Context().Err() != nil
}

// noteFailure logs a server error: one line per operation and code per
// 10 s, with the count it stands for (the access log has every request).
func (g *Gateway) noteFailure(req *request, e *Error, err error) {
	if e.Status >= 500 {
		g.failures.Log(g.log, slog.LevelWarn, req.op+" "+e.Code, "s3: request failed", "id", req.id, "op", req.op, "err", err)
	}
}

// errorDoc is S3's XML error document for e answering req.
func errorDoc(req *request, e *Error) errorBody {
	resource := req.r.URL.Path
	if e.Code == "InvalidRange" || e.Code == "NoSuchKey" || e.Code == "NoSuchBucket" || e.Status < 500 {
		resource = "/" + req.bucket
		if req.key != "" {
			resource += "/" + req.key
		}
	}
	body := errorBody{Code: e.Code, Message: errorText(e.Message), Resource: errorText(resource), RequestID: req.id, HostID: req.id}
	switch e.Code {
	case "NoSuchKey":
		body.Key = errorText(cmp.Or(e.Key, req.key))
	case "NoSuchBucket":
		body.BucketName = errorText(cmp.Or(e.Bucket, req.bucket))
	}
	return body
}

const s3XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"

// statusClientClosedRequest is nginx's status for a request whose client
// closed the connection before the answer, in the access log and metrics.
const statusClientClosedRequest = 499

func writeXML(w http.ResponseWriter, status int, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte("<Error><Code>InternalError</Code></Error>")
	}
	b = unmarkXMLText(b)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", fmt.Sprint(len(xml.Header)+len(b)))
	w.WriteHeader(status)
	io.WriteString(w, xml.Header)
	w.Write(b)
}

// Query parameters that select an operation the gateway does not
// implement (yet); any other unknown parameter is ignored, as S3 does.
var unsupportedSubresources = []string{
	"tagging", "policy", "policyStatus",
	"lifecycle", "cors", "website", "logging", "notification", "replication", "encryption", "object-lock",
	"retention", "legal-hold", "accelerate", "requestPayment", "ownershipControls", "publicAccessBlock",
	"analytics", "inventory", "metrics", "intelligent-tiering", "select", "restore", "torrent", "attributes",
}

// notImplementedHeaders name S3 features the gateway does not implement,
// refused on the writes that carry them rather than ignored: each asks for
// something a client relies on (its data encrypted, under its own key or
// the service's, kept from deletion, tagged, shared, redirected) that the
// object written without it would silently lack.
var notImplementedHeaders = []string{
	"X-Amz-Server-Side-Encryption",
	"X-Amz-Server-Side-Encryption-Customer-Algorithm",
	"X-Amz-Server-Side-Encryption-Customer-Key",
	"X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id",
	"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Algorithm",
	"X-Amz-Object-Lock-Mode",
	"X-Amz-Object-Lock-Retain-Until-Date",
	"X-Amz-Object-Lock-Legal-Hold",
	"X-Amz-Tagging",
	"X-Amz-Website-Redirect-Location",
	"X-Amz-Write-Offset-Bytes", // appends (S3 Express): done as a PUT, it would replace the object
	"X-Amz-Grant-Read",
	"X-Amz-Grant-Write",
	"X-Amz-Grant-Read-Acp",
	"X-Amz-Grant-Write-Acp",
	"X-Amz-Grant-Full-Control",
}

// unsupportedWriteHeaders refuses a write (PUT or POST) that asks for a
// feature the gateway does not implement: NotImplemented for the headers
// above, a canned ACL other than private and the bucket-owner ones, or
// object lock on a new bucket;
// InvalidStorageClass for a storage class other than STANDARD, the one
// there is.
func unsupportedWriteHeaders(h http.Header) error {
	for _, name := range notImplementedHeaders {
		if _, ok := h[name]; ok {
			return errf(ErrNotImplemented, "%s is not implemented: the request is refused rather than done without it", name)
		}
	}
	// The bucket-owner ACLs change nothing with one owner, and clients
	// set up for AWS's default object ownership send them.
	switch acl := h.Get("X-Amz-Acl"); acl {
	case "", "private", "bucket-owner-full-control", "bucket-owner-read":
	default:
		return errf(ErrNotImplemented, "ACLs are not implemented: x-amz-acl %.40q (only private, the default, and the bucket-owner ones)", acl)
	}
	if strings.EqualFold(h.Get("X-Amz-Bucket-Object-Lock-Enabled"), "true") {
		return errf(ErrNotImplemented, "object lock is not implemented")
	}
	if sc := h.Get("X-Amz-Storage-Class"); sc != "" && sc != "STANDARD" {
		return errf(ErrInvalidStorageClass, "the storage class you specified is not valid: %.40q (there is one, STANDARD)", sc)
	}
	return nil
}

// expectedOwners refuses a request whose x-amz-expected-bucket-owner (or
// x-amz-source-expected-bucket-owner, a copy's) names another owner than
// the one the gateway reports for every bucket, the caller (ownerOf): the
// header is a guard against writing to or reading from a bucket of
// someone else's, which ignored would pass whatever it named; AWS answers
// a mismatch 403 AccessDenied.
func expectedOwners(req *request) error {
	for _, name := range []string{"X-Amz-Expected-Bucket-Owner", "X-Amz-Source-Expected-Bucket-Owner"} {
		v, ok := req.r.Header[name]
		if !ok {
			continue
		}
		if id := ownerOf(req).ID; len(v) != 1 || v[0] != id {
			return errf(ErrAccessDenied, "%s %.64q is not the bucket's owner: this gateway reports the caller, %s, as the owner of every bucket it may use",
				strings.ToLower(name), strings.Join(v, ","), id)
		}
	}
	return nil
}

// scope is what a request addresses.
type scope int

const (
	serviceScope scope = iota
	bucketScope
	objectScope
)

// route is one operation: the method and the query parameter (NAME, or
// NAME=VALUE; "" for none) that select it at a scope, and the permission
// on the bucket it needs (access.go).
type route struct {
	scope  scope
	method string
	param  string
	op     string
	perm   auth.Perm
	run    func(*Gateway, *request) error
}

const (
	read  = auth.PermRead
	write = auth.PermWrite
)

// routes are tried in order; the first that matches runs.
var routes = []route{
	// ListBuckets needs nothing: it lists the buckets the caller may read.
	{serviceScope, http.MethodGet, "", "ListBuckets", 0, (*Gateway).listBuckets},
	{bucketScope, http.MethodPut, "", "CreateBucket", write, (*Gateway).createBucket},
	{bucketScope, http.MethodDelete, "", "DeleteBucket", write, (*Gateway).deleteBucket},
	{bucketScope, http.MethodHead, "", "HeadBucket", read, (*Gateway).headBucket},
	{bucketScope, http.MethodGet, "uploads", "ListMultipartUploads", read, (*Gateway).listMultipartUploads},
	{bucketScope, http.MethodGet, "location", "GetBucketLocation", read, (*Gateway).bucketLocation},
	{bucketScope, http.MethodGet, "acl", "GetBucketAcl", read, (*Gateway).getACL},
	{bucketScope, http.MethodPut, "acl", "PutBucketAcl", write, (*Gateway).putACL},
	{objectScope, http.MethodGet, "acl", "GetObjectAcl", read, (*Gateway).getACL},
	{objectScope, http.MethodPut, "acl", "PutObjectAcl", write, (*Gateway).putACL},
	{bucketScope, http.MethodGet, "versioning", "GetBucketVersioning", read, (*Gateway).bucketVersioning},
	{bucketScope, http.MethodPut, "versioning", "PutBucketVersioning", write, (*Gateway).putBucketVersioning},
	{bucketScope, http.MethodGet, "versions", "ListObjectVersions", read, (*Gateway).listObjectVersions},
	{bucketScope, http.MethodGet, "list-type=2", "ListObjectsV2", read, (*Gateway).listObjectsV2},
	{bucketScope, http.MethodGet, "", "ListObjects", read, (*Gateway).listObjectsV1},
	// DeleteObjects checks write itself: a reader of the bucket is refused
	// key by key, as S3 answers (deleteObjects).
	{bucketScope, http.MethodPost, "delete", "DeleteObjects", 0, (*Gateway).deleteObjects},
	{objectScope, http.MethodPost, "uploads", "CreateMultipartUpload", write, (*Gateway).createMultipartUpload},
	{objectScope, http.MethodPut, "uploadId", "UploadPart", write, (*Gateway).uploadPart},
	{objectScope, http.MethodPost, "uploadId", "CompleteMultipartUpload", write, (*Gateway).completeMultipartUpload},
	{objectScope, http.MethodDelete, "uploadId", "AbortMultipartUpload", write, (*Gateway).abortMultipartUpload},
	{objectScope, http.MethodGet, "uploadId", "ListParts", read, (*Gateway).listParts},
	{objectScope, http.MethodPut, "", "PutObject", write, (*Gateway).putObject},
	{objectScope, http.MethodGet, "", "GetObject", read, (*Gateway).getObjectBody},
	{objectScope, http.MethodHead, "", "HeadObject", read, (*Gateway).headObject},
	{objectScope, http.MethodDelete, "", "DeleteObject", write, (*Gateway).deleteObject},
}

// subresources are, per scope, the bare query parameters that select an
// operation (?uploads, ?location, ?delete, ?uploadId). A route without one
// runs only when none is there: a DELETE /bucket?location is not a
// DeleteBucket, nor a PUT /bucket/key?uploads a PutObject.
var subresources = func() map[scope][]string {
	m := map[scope][]string{}
	for _, rt := range routes {
		if rt.param != "" && !strings.Contains(rt.param, "=") && !slices.Contains(m[rt.scope], rt.param) {
			m[rt.scope] = append(m[rt.scope], rt.param)
		}
	}
	return m
}()

func (rt route) matches(sc scope, method string, q url.Values) bool {
	if rt.scope != sc || rt.method != method {
		return false
	}
	name, val, withVal := strings.Cut(rt.param, "=")
	switch {
	case rt.param == "":
		return !slices.ContainsFunc(subresources[sc], q.Has)
	case withVal:
		return q.Get(name) == val
	}
	return q.Has(name)
}

// nullVersion is the version id of the one version of an object there
// is, as S3 names the versions of a bucket that never had versioning.
const nullVersion = "null"

// oneVersion refuses a version id other than "null", the one version of
// an object there is ("" names none): versioning is not implemented.
func oneVersion(id string) error {
	if id == "" || id == nullVersion {
		return nil
	}
	return errf(ErrNotImplemented, "versioning is not implemented: no version %.80q (only versionId=null, the one version there is)", id)
}

// dispatch runs the operation a verified request names.
func (g *Gateway) dispatch(req *request) error {
	r := req.r
	q := req.query()
	if req.bucket == "" && req.key != "" {
		// "//name/key": an empty bucket, not the service (a GET of it
		// was answered ListBuckets, which a path-normalising proxy in
		// front would not expect).
		return errf(ErrInvalidBucketName, "the bucket name is empty (the path begins with //)")
	}
	for _, s := range unsupportedSubresources {
		if q.Has(s) {
			req.op = "Unsupported"
			if s == "cors" {
				return errf(ErrNotImplemented, "per-bucket CORS rules are not implemented: the gateway's --cors-origin allows origins for every bucket")
			}
			return errf(ErrNotImplemented, "the ?%s operation is not implemented", s)
		}
	}
	if q.Has("versioning") && req.key != "" {
		// A bucket's subresource (GetBucketVersioning), which an object
		// has not: never a PutObject or DeleteObject of the key.
		req.op = "Unsupported"
		return errf(ErrNotImplemented, "the ?versioning operation is not implemented on an object")
	}
	if v := q["versionId"]; len(v) > 0 {
		// Done on the current object instead, a GET would read and a
		// DELETE remove what the caller did not name.
		err := oneVersion(v[0])
		switch {
		case len(v) > 1:
			err = errf(ErrInvalidArgument, "versionId is given %d times", len(v))
		case v[0] == "":
			err = errf(ErrInvalidArgument, "version id cannot be the empty string")
		}
		if err != nil {
			req.op = "Unsupported"
			return err
		}
	}
	if err := expectedOwners(req); err != nil {
		req.op = "Auth"
		return err
	}
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		if err := unsupportedWriteHeaders(r.Header); err != nil {
			req.op = "Unsupported"
			return err
		}
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("X-Amz-Server-Side-Encryption-Customer-Algorithm") != "" {
		// No object was stored with a customer's key (such a PUT is
		// refused): S3 refuses the key for an object stored without.
		req.op = "Unsupported"
		return errf(ErrInvalidRequest, "the encryption parameters are not applicable to this object: no object here is stored with SSE-C")
	}
	if r.Header.Get("X-Amz-Copy-Source") != "" {
		// The source's read is checked where it is opened.
		switch {
		case r.Method != http.MethodPut || req.key == "" || q.Has("acl"):
			// Whatever else it names: a ListParts (GET ?uploadId) that
			// carries one is no UploadPartCopy, a PutObjectAcl no copy.
			return errf(ErrInvalidRequest, "x-amz-copy-source belongs on a PUT of an object")
		case q.Has("uploadId"):
			req.op = "UploadPartCopy"
			if err := req.authorize(write, req.bucket); err != nil {
				return err
			}
			return g.uploadPartCopy(req)
		}
		req.op = "CopyObject"
		if err := req.authorize(write, req.bucket); err != nil {
			return err
		}
		return g.copyObject(req)
	}
	if rt, ok := req.route(); ok {
		req.op = rt.op
		if err := req.authorize(rt.perm, req.bucket); err != nil {
			return err
		}
		if rt.perm == 0 && req.bucket != "" && req.authorize(read, req.bucket) != nil {
			// One that checks its right itself (DeleteObjects) still
			// needs one on the bucket before its body takes memory.
			if err := req.authorize(write, req.bucket); err != nil {
				return err
			}
		}
		// The bodies held in memory take their share of
		// MaxBodyMemory: a PUT's or part's up to 64 MiB, an XML
		// body read whole up to maxXMLBody.
		n := r.ContentLength
		switch rt.op {
		case "DeleteObjects", "CompleteMultipartUpload":
			if n < 0 || n > maxXMLBody {
				n = maxXMLBody
			}
			fallthrough
		case "PutObject", "UploadPart":
			release, err := g.bodies.acquire(r.Context(), req.user(), n)
			if err != nil {
				return err
			}
			defer release()
		}
		return rt.run(g, req)
	}
	return errf(ErrMethodNotAllowed, "%s is not allowed on this resource", r.Method)
}

// route is the first of routes req matches, by what it addresses (the
// service, a bucket or an object), its method and its query.
func (req *request) route() (route, bool) {
	sc := objectScope
	switch {
	case req.bucket == "":
		sc = serviceScope
	case req.key == "":
		sc = bucketScope
	}
	q := req.query()
	for _, rt := range routes {
		if rt.matches(sc, req.r.Method, q) {
			return rt, true
		}
	}
	return route{}, false
}

// opName is the operation req names, as dispatch will find it, for the
// access log and metrics of a request refused before dispatch runs (its
// empty body's check); "" for none.
func opName(req *request) string {
	r, q := req.r, req.query()
	if r.Header.Get("X-Amz-Copy-Source") != "" && r.Method == http.MethodPut && req.key != "" {
		if q.Has("uploadId") {
			return "UploadPartCopy"
		}
		return "CopyObject"
	}
	rt, _ := req.route()
	return rt.op
}

// s3Time is S3's time format in XML.
func s3Time(t time.Time) string {
	// Whole seconds, as S3 gives them (.000Z) and as Last-Modified says
	// them: a sync tool that compares a listing's time with a HEAD's
	// must find them equal.
	return t.UTC().Truncate(time.Second).Format("2006-01-02T15:04:05.000Z")
}
