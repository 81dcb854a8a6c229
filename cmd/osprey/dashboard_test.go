package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// serveCmd runs the CLI with args in this process until the test ends,
// its output in a buffer the test can read while it runs.
func serveCmd(t *testing.T, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	cmd := newRootCmd()
	cmd.SetOut(out)
	cmd.SetErr(&syncBuffer{})
	cmd.SetArgs(args)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v: %v", args, err)
		}
	})
	return out
}

// dashboardStatus GETs url's /api/status.
func dashboardStatus(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url + "api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %sapi/status: %d %v", url, resp.StatusCode, err)
	}
	return v
}

var dashboardLine = regexp.MustCompile(`dashboard:? +(http://\S+/)`)

// dashboardURL waits for the command to print its dashboard's URL.
func dashboardURL(t *testing.T, out *syncBuffer, within time.Duration) string {
	t.Helper()
	var url string
	msgrtest.Eventually(t, within, "the dashboard's URL", func() bool {
		if m := dashboardLine.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	return url
}

// TestDashboardAddrFlags: `osprey mon --dashboard-addr` and `osprey up`
// (on a free loopback port by default) serve the status page and print
// where.
func TestDashboardAddrFlags(t *testing.T) {
	t.Run("mon", func(t *testing.T) {
		out := serveCmd(t, "mon", "--embed-etcd", t.TempDir(), "--listen", "tcp://127.0.0.1:0", "--auth", "none",
			"--dashboard-addr", "127.0.0.1:0", "--log-level", "warn")
		url := dashboardURL(t, out, 30*time.Second)
		if v := dashboardStatus(t, url); v["fsid"] == "" || v["osd_counts"].(map[string]any)["total"] != float64(0) {
			t.Fatalf("status of a mon with no OSDs: %v", v)
		}
	})
	t.Run("up", func(t *testing.T) {
		out := serveCmd(t, "up", "--temp", "--osds", "1", "--pgs", "8", "--s3", "", "--log-level", "warn")
		url := dashboardURL(t, out, 60*time.Second)
		if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+/$`).MatchString(url) {
			t.Fatalf("osprey up's dashboard at %q, want a loopback port", url)
		}
		// It samples every 2s, the first time before the OSD booted.
		msgrtest.Eventually(t, 10*time.Second, "the OSD on the page", func() bool {
			return dashboardStatus(t, url)["osd_counts"].(map[string]any)["up"] == float64(1)
		})
	})
}

// TestDaemonPprofFlag: `osprey mon --pprof` serves Go's profiles on its
// --metrics-addr, as the gateway's does; without --metrics-addr, --pprof
// is a usage error on the mon, the OSD and the gateway alike.
func TestDaemonPprofFlag(t *testing.T) {
	out := serveCmd(t, "mon", "--embed-etcd", t.TempDir(), "--listen", "tcp://127.0.0.1:0", "--auth", "none",
		"--metrics-addr", "127.0.0.1:0", "--pprof", "--log-level", "warn")
	metricsLine := regexp.MustCompile(`mon\.a: metrics on (http://\S+)/metrics`)
	var base string
	msgrtest.Eventually(t, 30*time.Second, "the mon's metrics address", func() bool {
		if m := metricsLine.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	resp, err := http.Get(base + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "goroutine profile") {
		t.Fatalf("GET /debug/pprof/goroutine of osprey mon --pprof: %s\n%.300s", resp.Status, b)
	}
	for _, args := range [][]string{
		{"mon", "--embed-etcd", t.TempDir(), "--pprof"},
		{"osd", "--data", t.TempDir(), "--map", "none.json", "--pprof"},
		{"s3", "--keyring", "none", "--access-key", "AK", "--secret-key", "SK", "--seeds", "127.0.0.1:1", "--pprof"},
	} {
		if _, _, err := run(t, args...); exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "--metrics-addr") {
			t.Errorf("osprey %v: %v (exit %d), want a usage error naming --metrics-addr", args, err, exitCode(err))
		}
	}
}
