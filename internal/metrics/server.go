// Package metrics exposes each daemon's counters (mon, OSD, S3 gateway) to
// Prometheus on an admin HTTP listener, at /metrics.
//
// Every daemon gets a registry of its own, never the global one, so that
// several daemons in one process (tests, `osprey up`) do not collide. The
// collectors read the daemons' own counters when scraped (msgr.Messenger's
// TransportStats, the OSD's Stats and its store's ReadCacheStats, the RDMA
// transport's Stats and Config): nothing here runs on a message's path,
// which must stay allocation-free, and the only per-request work is the
// gateway's, once a request has ended.
//
// Names follow Prometheus's conventions (docs/operations.md lists them):
// the osprey_ prefix, base units, _total on counters, histograms for
// latencies, and labels of bounded cardinality only: never an object key,
// a bucket or a client's address.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newRegistry makes the registries; this package's tests make pedantic
// ones, which fail a scrape that collects a metric no Describe declared.
var newRegistry = prometheus.NewRegistry

// NewRegistry is a daemon's registry, with the Go runtime's and the
// process's collectors already in it, and osprey_build_info.
func NewRegistry() *prometheus.Registry {
	reg := newRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	return reg
}

// buildInfo is osprey_build_info, 1 with the build as its label (the
// Prometheus convention for a version): a dashboard counts the daemons of
// each build with count by (version) (osprey_build_info).
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "osprey_build_info",
		Help:        "Always 1; the version label names the daemon's build, as `osprey version` prints it.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version(), "goversion": runtime.Version()}})
	g.Set(1)
	return g
}

// ServerOptions configure a Server.
type ServerOptions struct {
	// Addr is the HOST:PORT to listen on; port 0 takes a free one.
	Addr string
	// Listener, when set, is used instead of listening on Addr: a daemon
	// binds its admin address before it opens its store, so that an
	// address in use fails the start before anything is read or written.
	Listener net.Listener
	// Registry is what /metrics exposes; required.
	Registry *prometheus.Registry
	// Logger gets the HTTP server's errors; default slog.Default().
	Logger *slog.Logger
	// Pprof also serves Go's profiles at /debug/pprof/ (net/http/pprof),
	// to profile a daemon under load where it runs. Opt-in: a profile
	// costs the daemon CPU and shows its internals to whoever can reach
	// the admin listener.
	Pprof bool
	// Ready says why the daemon cannot serve now (nil: it can), for
	// /readyz; nil counts as always ready.
	Ready func() error
}

// Server is a daemon's admin HTTP listener: /metrics, in Prometheus's text
// format (or OpenMetrics, when the scraper asks for it), and the probes of
// Kubernetes and load balancers: /healthz (200 while the process serves
// HTTP: a liveness probe) and /readyz (200 while ServerOptions.Ready says
// so, else 503 and why: a readiness probe, which takes the daemon out of
// a Service, or an S3 gateway out of its load balancer, meanwhile).
type Server struct {
	srv       *http.Server
	addr      string
	done      chan error
	closeOnce sync.Once
	closeErr  error
}

// Listen binds a daemon's admin address (ServerOptions.Listener).
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// Serve listens on opts.Addr (or takes opts.Listener) and serves /metrics
// until Close; ctx bounds the listen only.
func Serve(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.Registry == nil {
		return nil, errors.New("metrics: ServerOptions.Registry is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = Listen(ctx, opts.Addr); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		EnableOpenMetrics: true,
		// A scrape that takes longer than this is already useless to
		// Prometheus (whose default timeout is 10s).
		Timeout: 10 * time.Second,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if opts.Ready != nil {
			if err := opts.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		io.WriteString(w, "ready\n")
	})
	if opts.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s := &Server{
		srv: &http.Server{
			Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the bound HOST:PORT.
func (s *Server) Addr() string { return s.addr }

// URL is the metrics endpoint, http://HOST:PORT/metrics.
func (s *Server) URL() string { return "http://" + s.addr + "/metrics" }

// Close stops listening and waits for scrapes in progress, until ctx
// ends; then it closes their connections. Nil does nothing.
func (s *Server) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.closeOnce.Do(func() {
		err := s.srv.Shutdown(ctx)
		if err != nil {
			s.srv.Close()
		}
		if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		s.closeErr = err
	})
	return s.closeErr
}
