package main

import (
	"fmt"
	"io"

	"github.com/ospreystore/osprey/internal/metrics"
)

const metricsAddrUsage = "HOST:PORT of an admin HTTP listener serving Prometheus metrics at /metrics (docs/operations.md); '' for none"

// printMetrics tells the user where a daemon serves its metrics; nil
// prints nothing.
func printMetrics(w io.Writer, who string, s *metrics.Server) {
	if s != nil {
		fmt.Fprintf(w, "%s: metrics on %s\n", who, s.URL())
	}
}

// pprofUsage is the --pprof flag's help, the same on every daemon.
const pprofUsage = "also serve Go's profiles at /debug/pprof/ on --metrics-addr (go tool pprof http://ADDR/debug/pprof/profile)"

// pprofNeedsMetrics refuses --pprof without --metrics-addr.
const pprofNeedsMetrics = "--pprof serves on the admin listener: give --metrics-addr too"
