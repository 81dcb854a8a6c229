package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

//go:embed assets
var assets embed.FS

// Handler serves the page (/, /assets/...) and its JSON API:
//
//	GET /api/status                  the last sample (View)
//	GET /api/history[?osd=N][&since=MS]  throughput points, the cluster's or osd.N's
//	GET /api/events[?since=SEQ]      events after SEQ, oldest first
//
// Anything else is 404; a method other than GET or HEAD is 405; a bad
// query is 400 with {"error": "..."}.
func (d *Dashboard) Handler() http.Handler {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/index.html"
		serveAsset(files, w, r2)
	})
	mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = r.URL.Path[len("/assets"):]
		// A name that is not valid UTF-8 is no file of ours; the file
		// server's fs.ErrInvalid for it would be a 500.
		if r2.URL.Path == "/" || r2.URL.Path == "/index.html" || !utf8.ValidString(r2.URL.Path) {
			http.NotFound(w, r)
			return
		}
		serveAsset(files, w, r2)
	})
	mux.HandleFunc("GET /api/status", d.serveStatus)
	mux.HandleFunc("GET /api/history", d.serveHistory)
	mux.HandleFunc("GET /api/events", d.serveEvents)
	return guard(d, mux)
}

// serveAsset serves an embedded file; index.html is served at / only
// (FileServer would redirect /index.html to ./).
func serveAsset(files http.Handler, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/index.html" {
		b, err := assets.ReadFile("assets/index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b)
		return
	}
	files.ServeHTTP(w, r)
}

// guard sets the headers every answer gets and turns a panic into a 500
// (net/http would recover too, but close the connection and print a
// stack on stderr): a bug in one request must not look like a crash.
func guard(d *Dashboard, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				d.opts.Logger.Error("dashboard: request panicked", "path", r.URL.Path, "panic", p)
				writeError(w, http.StatusInternalServerError, fmt.Errorf("internal error"))
			}
		}()
		hd := w.Header()
		// Nothing from elsewhere: no CDN, no inline script, no framing.
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			hd.Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s: the dashboard only reads (GET)", r.Method))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (d *Dashboard) serveStatus(w http.ResponseWriter, r *http.Request) {
	v, err := d.view()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// History is what /api/history returns.
type History struct {
	// OSD is the OSD's id, or -1 for the cluster's sum.
	OSD        int64   `json:"osd"`
	IntervalMS int64   `json:"interval_ms"`
	Points     []Point `json:"points"`
}

func (d *Dashboard) serveHistory(w http.ResponseWriter, r *http.Request) {
	q, err := parseHistoryQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	pts, ok := d.history(q.osd, q.since)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("osd.%d is not in the map", q.osd))
		return
	}
	writeJSON(w, http.StatusOK, History{OSD: q.osd, IntervalMS: d.opts.Interval.Milliseconds(), Points: pts})
}

func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	q, err := parseEventsQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": d.eventsAfter(q)})
}

// ErrBadQuery is what a query the API cannot use wraps.
var ErrBadQuery = errors.New("dashboard: bad query")

// historyQuery is /api/history's query: osd -1 means the cluster.
type historyQuery struct {
	osd   int64
	since int64
}

// parseHistoryQuery reads "osd=N&since=MS"; both optional, nothing else
// allowed, each at most once.
func parseHistoryQuery(raw string) (historyQuery, error) {
	q := historyQuery{osd: -1}
	vals, err := parseQuery(raw, "osd", "since")
	if err != nil {
		return q, err
	}
	if s, ok := vals["osd"]; ok {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return q, fmt.Errorf("%w: osd=%q: want an OSD id (0..%d)", ErrBadQuery, s, uint32(1<<32-1))
		}
		q.osd = int64(n)
	}
	if s, ok := vals["since"]; ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return q, fmt.Errorf("%w: since=%q: want Unix milliseconds", ErrBadQuery, s)
		}
		q.since = n
	}
	return q, nil
}

// parseEventsQuery reads "since=SEQ" (optional).
func parseEventsQuery(raw string) (uint64, error) {
	vals, err := parseQuery(raw, "since")
	if err != nil {
		return 0, err
	}
	s, ok := vals["since"]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: since=%q: want an event number", ErrBadQuery, s)
	}
	return n, nil
}

// parseQuery parses raw and allows only the given keys, each once.
func parseQuery(raw string, allowed ...string) (map[string]string, error) {
	vs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadQuery, err)
	}
	out := map[string]string{}
	for k, v := range vs {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return nil, fmt.Errorf("%w: unknown parameter %q (want %v)", ErrBadQuery, k, allowed)
		}
		if len(v) != 1 {
			return nil, fmt.Errorf("%w: %s given %d times", ErrBadQuery, k, len(v))
		}
		out[k] = v[0]
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// Server is a Dashboard serving HTTP on its own listener, sampling until
// Close.
type Server struct {
	*Dashboard
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// Serve listens on addr (HOST:PORT; port 0 picks a free one), then
// samples and serves until Close. The first sample is taken before it
// returns, so the page has data from the moment its URL is printed
// (unless that sample failed: then /api/status says why). ctx bounds the
// start only.
func Serve(ctx context.Context, addr string, opts Options) (*Server, error) {
	d, err := New(opts)
	if err != nil {
		return nil, err
	}
	d.sample(ctx)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	h := d.Handler()
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && ap.Addr().IsLoopback() {
		h = loopbackHostsOnly(h)
	}
	s := &Server{Dashboard: d, ln: ln, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          nil,
	}}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { d.Run(rctx) })
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.opts.Logger.Error("dashboard: serving", "addr", ln.Addr(), "err", err)
		}
	})
	d.opts.Logger.Info("dashboard serving", "url", s.URL())
	return s, nil
}

// loopbackHostsOnly refuses a request whose Host is not a loopback address
// or localhost (421): a dashboard on loopback is for this host's browsers,
// and a web page whose name an attacker points at 127.0.0.1 (DNS
// rebinding) would otherwise read the cluster's status through them. A
// dashboard given a public address takes any Host (a reverse proxy's, a
// DNS name's).
func loopbackHostsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if a, err := netip.ParseAddr(host); (err != nil || !a.IsLoopback()) && !strings.EqualFold(host, "localhost") {
			http.Error(w, "dashboard: this dashboard listens on loopback and answers only Host 127.0.0.1, [::1] or localhost, not "+strconv.Quote(r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Addr is the address it listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the page's address.
func (s *Server) URL() string { return "http://" + s.Addr() + "/" }

// Close stops serving (requests in progress get until ctx ends) and
// sampling. It is safe to call on a nil Server and more than once.
func (s *Server) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.once.Do(func() {
		s.err = s.srv.Shutdown(ctx)
		s.cancel()
		s.wg.Wait()
	})
	return s.err
}
