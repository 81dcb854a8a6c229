package metrics_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/metrics"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

const (
	testAccess = "OSPREYTESTKEY"
	testSecret = "osprey/test+secret"
)

// scrape GETs a /metrics endpoint and returns its body and families.
func scrape(t *testing.T, url string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("scrape %s: parse: %v", url, err)
	}
	return body, fams
}

// value sums family name's samples whose labels include want (NAME=VALUE
// pairs): a counter's or gauge's value, a histogram's count.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			ok = ok && have[k] == v
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// promtool finds Debian's promtool (package prometheus). CI sets
// OSPREY_REQUIRE_PROMTOOL=1 (the deps target installs it), so there the
// lint must run, not skip.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OSPREY_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("OSPREY_REQUIRE_PROMTOOL is set but promtool is not on PATH: %v (apt-get install prometheus)", err)
		}
		t.Skipf("promtool is not on PATH (apt-get install prometheus, or set OSPREY_REQUIRE_PROMTOOL=1 to make this a failure)")
	}
	return path
}

// lint runs `promtool check metrics` on an exposition: Prometheus's own
// rules for names, units, suffixes and help.
func lint(t *testing.T, tool, what string, body []byte) {
	t.Helper()
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on %s: %v\n%s", what, err, out)
	}
}

// gateway is an S3 gateway over cl with its metrics, as `osprey s3
// --metrics-addr` runs it.
type gateway struct {
	url, metricsURL string
}

func startGateway(t *testing.T, cl *client.Client, logger *slog.Logger) gateway {
	t.Helper()
	reg, gm := metrics.GatewayRegistry(cl)
	gw, err := s3gw.New(s3gw.Options{Client: cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
		Logger: logger, OnRequest: gm.Observe})
	if err != nil {
		t.Fatal(err)
	}
	gm.InFlight(reg, gw.InFlight)
	ms, err := metrics.Serve(t.Context(), metrics.ServerOptions{Addr: "127.0.0.1:0", Registry: reg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
		if err := ms.Close(context.Background()); err != nil {
			t.Errorf("gateway metrics: %v", err)
		}
	})
	return gateway{url: "http://" + ln.Addr().String(), metricsURL: ms.URL()}
}

// signedPut PUTs body to url with a SigV4 signature.
func signedPut(t *testing.T, url string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(body)
	sum := hex.EncodeToString(h[:])
	req.Header.Set("X-Amz-Content-Sha256", sum)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: testSecret},
		req, sum, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestDaemonMetrics runs a real local cluster (a mon and three OSDs) with
// its daemons' metrics listeners, and a gateway with its own, and checks
// that the counters move with the work that should move them and that
// every exposition passes promtool's lint.
func TestDaemonMetrics(t *testing.T) {
	tool := promtool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()
	lc := osdtest.StartLocal(t, local.Options{OSDs: 3, Replicas: 3, PGs: 8, Dir: t.TempDir(), Logger: logger,
		WithMon: true, NoAuth: true, HeartbeatGrace: 2 * time.Second, Metrics: true})
	if len(lc.Metrics) != 4 || lc.Metrics[0].Daemon != "mon.a" || lc.Metrics[1].Daemon != "osd.0" {
		t.Fatalf("metrics listeners %v, want mon.a and osd.0..2", lc.Metrics)
	}
	monURL := lc.Metrics[0].URL()
	osdURLs := []string{lc.Metrics[1].URL(), lc.Metrics[2].URL(), lc.Metrics[3].URL()}
	cl, err := client.New(ctx, client.Options{Mon: []string{lc.Mon.Addr()}, Logger: logger, MD5: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// osdSum sums a series over the OSDs.
	osdSum := func(name string, labels ...string) float64 {
		sum := 0.0
		for _, u := range osdURLs {
			_, fams := scrape(t, u)
			sum += value(fams, name, labels...)
		}
		return sum
	}

	if err := cl.MakeBucket(ctx, "metrics"); err != nil {
		t.Fatal(err)
	}

	// exposed collects the families every exposition had, for the docs.
	exposed := map[string]bool{}
	expose := func(fams map[string]*dto.MetricFamily) {
		for name := range fams {
			exposed[name] = true
		}
	}

	t.Run("put", func(t *testing.T) {
		const size = 1 << 20
		puts := osdSum("osprey_osd_op_duration_seconds", "op=put_object")
		pubIn := osdSum("osprey_msgr_received_bytes_total", "network=public", "transport=tcp")
		cluOut := osdSum("osprey_msgr_sent_bytes_total", "network=cluster", "transport=tcp")
		written := osdSum("osprey_osd_store_written_bytes_total")
		if _, err := osdtest.Put(ctx, cl, "metrics", "obj", osdtest.Payload(size, 1), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		var now [4]float64
		msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
			return fmt.Sprintf("put ops %v -> %v, public bytes in %v -> %v, cluster bytes out %v -> %v, store bytes written %v -> %v",
				puts, now[0], pubIn, now[1], cluOut, now[2], written, now[3])
		}, func() bool {
			now = [4]float64{osdSum("osprey_osd_op_duration_seconds", "op=put_object"),
				osdSum("osprey_msgr_received_bytes_total", "network=public", "transport=tcp"),
				osdSum("osprey_msgr_sent_bytes_total", "network=cluster", "transport=tcp"),
				osdSum("osprey_osd_store_written_bytes_total")}
			// The primary's put, its body in on the public network and
			// out to two replicas on the cluster one, and three copies
			// written.
			return now[0] >= puts+1 && now[1] >= pubIn+size && now[2] >= cluOut+2*size && now[3] >= written+3*size
		})
	})

	t.Run("read cache", func(t *testing.T) {
		// "obj" (1 MiB, in a data file) has not been read: its first get
		// misses and loads it into the primary's cache, the second hits.
		const size = 1 << 20
		get := func() {
			t.Helper()
			got, _, err := osdtest.Get(ctx, cl, "metrics", "obj", client.GetOptions{})
			if err != nil || len(got) != size {
				t.Fatalf("get: %d bytes, %v", len(got), err)
			}
		}
		var hits, misses, objects, held float64
		read := func() {
			hits, misses = osdSum("osprey_osd_read_cache_hits_total"), osdSum("osprey_osd_read_cache_misses_total")
			objects, held = osdSum("osprey_osd_read_cache_objects"), osdSum("osprey_osd_read_cache_bytes")
		}
		read()
		hits0, misses0 := hits, misses
		if objects != 0 || held != 0 {
			t.Fatalf("the read caches hold %v objects in %v bytes before any get", objects, held)
		}
		describe := func() string {
			return fmt.Sprintf("read cache hits %v -> %v, misses %v -> %v, %v objects in %v bytes", hits0, hits, misses0, misses, objects, held)
		}
		get()
		msgrtest.EventuallyDescribed(t, 10*time.Second, describe, func() bool {
			read()
			return misses >= misses0+1 && objects == 1 && held >= size
		})
		get()
		msgrtest.EventuallyDescribed(t, 10*time.Second, describe, func() bool {
			read()
			return hits >= hits0+1
		})
		// Over TCP the cache is in the store's own memory: no allocator
		// to fail.
		if n := osdSum("osprey_osd_read_cache_alloc_failures_total"); n != 0 {
			t.Errorf("%v read cache allocation failures over TCP", n)
		}
	})

	t.Run("gateway", func(t *testing.T) {
		gw := startGateway(t, cl, logger)
		body := []byte("hello, prometheus")
		if resp := signedPut(t, gw.url+"/metrics/via-gateway", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT through the gateway: %s", resp.Status)
		}
		resp, err := http.Get(gw.url + "/metrics/unsigned")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		msgrtest.Eventually(t, 10*time.Second, "the gateway's counters", func() bool {
			_, f := scrape(t, gw.metricsURL)
			return value(f, "osprey_s3_requests_total", "op=PutObject", "status=200") == 1 &&
				value(f, "osprey_s3_requests_total", "op=Auth", "status=403") == 1 &&
				value(f, "osprey_s3_errors_total", "op=Auth", "code=AccessDenied") == 1 &&
				value(f, "osprey_s3_requests_in_flight") == 0 &&
				value(f, "osprey_s3_received_bytes_total", "op=PutObject") == float64(len(body)) &&
				value(f, "osprey_s3_request_duration_seconds", "op=PutObject") == 1 &&
				value(f, "osprey_msgr_sent_bytes_total", "network=public") >= float64(len(body))
		})
		b, fams := scrape(t, gw.metricsURL)
		lint(t, tool, "the gateway", b)
		expose(fams)
	})

	t.Run("lint", func(t *testing.T) {
		b, fams := scrape(t, monURL)
		lint(t, tool, "mon.a", b)
		expose(fams)
		if value(fams, "osprey_build_info", "version="+buildinfo.Version()) != 1 {
			t.Errorf("mon.a: no osprey_build_info naming this build (%s)", buildinfo.Version())
		}
		if value(fams, "osprey_mon_leader") != 1 || value(fams, "osprey_mon_map_epoch") < 1 {
			t.Errorf("mon.a: leader %v, epoch %v; want the leader, epoch >= 1",
				value(fams, "osprey_mon_leader"), value(fams, "osprey_mon_map_epoch"))
		}
		// The leader's health series: the cluster's PGs, all clean once
		// it settles, and HEALTH_OK.
		var pgs, clean, health, read float64
		msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
			return fmt.Sprintf("mon.a: %v of %v PGs active+clean, health %v, status read %v", clean, pgs, health, read)
		}, func() bool {
			_, fams := scrape(t, monURL)
			pgs, clean = value(fams, "osprey_pgs"), value(fams, "osprey_pgs", "state=active+clean")
			health, read = value(fams, "osprey_health_status"), value(fams, "osprey_mon_status_read")
			_, ok := fams["osprey_health_status"]
			return read == 1 && ok && health == 0 && pgs >= 8 && clean == pgs
		})
		for i, u := range osdURLs {
			b, fams := scrape(t, u)
			lint(t, tool, fmt.Sprintf("osd.%d", i), b)
			expose(fams)
			if value(fams, "osprey_osd_pgs") == 0 || value(fams, "osprey_pebble_wal_written_bytes_total") == 0 {
				t.Errorf("osd.%d: no PGs by state, or no WAL bytes:\n%s", i, b)
			}
			if value(fams, "osprey_osd_info", fmt.Sprintf("osd=osd.%d", i)) != 1 {
				t.Errorf("osd.%d: no osprey_osd_info naming it", i)
			}
			if _, ok := fams["osprey_osd_laggy_pgs"]; !ok || value(fams, "osprey_osd_laggy_pgs") != 0 {
				t.Errorf("osd.%d: laggy pgs %v (exported %v) in a healthy cluster", i, value(fams, "osprey_osd_laggy_pgs"), ok)
			}
			if _, ok := fams["osprey_osd_beacon_age_seconds"]; !ok || value(fams, "osprey_osd_beacon_age_seconds") > 10 {
				t.Errorf("osd.%d: beacon age %v (exported %v), want a beacon taken within seconds", i, value(fams, "osprey_osd_beacon_age_seconds"), ok)
			}
		}
	})

	t.Run("osd down", func(t *testing.T) {
		_, fams := scrape(t, monURL)
		if up := value(fams, "osprey_mon_osds_up"); up != 3 {
			t.Fatalf("osds up = %v before the kill, want 3", up)
		}
		epoch := value(fams, "osprey_mon_map_epoch")
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := lc.OSDs[2].Close(cctx); err != nil {
			t.Fatal(err)
		}
		var up, ep, age float64
		msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
			return fmt.Sprintf("osds up %v (want 2), epoch %v (was %v), map age %vs", up, ep, epoch, age)
		}, func() bool {
			_, fams := scrape(t, monURL)
			up, ep, age = value(fams, "osprey_mon_osds_up"), value(fams, "osprey_mon_map_epoch"), value(fams, "osprey_mon_map_age_seconds")
			return up == 2 && ep > epoch && age < 20
		})
		var down, health float64
		msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
			return fmt.Sprintf("OSD_DOWN %v (want 1), health %v (want 1, HEALTH_WARN)", down, health)
		}, func() bool {
			_, fams := scrape(t, monURL)
			down = value(fams, "osprey_health_detail", "name=OSD_DOWN", "severity=HEALTH_WARN")
			health = value(fams, "osprey_health_status")
			if down == 1 {
				expose(fams) // osprey_health_detail has series only while a check is in force
			}
			return down == 1 && health == 1
		})
	})
	// Last: the health series exist only while a check is in force.
	t.Run("docs", func(t *testing.T) { checkDocs(t, tool, exposed) })
}

// TestServerStops: Close ends the listener and its goroutines, a second
// Close is harmless, and a bad address is a clear error.
func TestServerStops(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := metrics.Serve(t.Context(), metrics.ServerOptions{Addr: "127.0.0.1:0", Registry: metrics.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	b, fams := scrape(t, s.URL())
	if fams["go_goroutines"] == nil || fams["process_cpu_seconds_total"] == nil {
		t.Errorf("no Go or process series in a new registry:\n%s", b)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := http.Get(s.URL()); err == nil {
		t.Error("still serving after Close")
	}
	msgrtest.EventuallyDescribed(t, 5*time.Second, func() string {
		return fmt.Sprintf("goroutines %d, were %d before Serve (leak?)", runtime.NumGoroutine(), before)
	}, func() bool { return runtime.NumGoroutine() <= before })

	_, err = metrics.Serve(t.Context(), metrics.ServerOptions{Addr: "127.0.0.1:notaport", Registry: metrics.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:notaport") {
		t.Errorf("Serve on a bad address: %v, want an error naming it", err)
	}
	if _, err := metrics.Serve(t.Context(), metrics.ServerOptions{Addr: "127.0.0.1:0"}); err == nil {
		t.Error("Serve without a registry succeeded")
	}
	var nilServer *metrics.Server
	if err := nilServer.Close(context.Background()); err != nil {
		t.Errorf("nil Close: %v", err)
	}
}

var seriesName = regexp.MustCompile(`osprey_[a-z0-9_]+`)

// checkDocs: the dashboard is valid JSON whose queries name only series
// the daemons expose; docs/operations.md names every osprey_ family they
// expose, and its scrape configuration and alerting rules pass promtool.
func checkDocs(t *testing.T, tool string, exposed map[string]bool) {
	raw, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			queries++
			for _, name := range seriesName.FindAllString(q.Expr, -1) {
				family := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if f, ok := strings.CutSuffix(name, suffix); ok && exposed[f] {
						family = f
					}
				}
				if !exposed[family] {
					t.Errorf("dashboard panel %q queries %s, which no daemon exposes", p.Title, name)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
	doc := checkDocumented(t, exposed)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/operations.md has %d yaml blocks, want the scrape configuration and the alerting rules", len(blocks))
	}
	for i, check := range []string{"config", "rules"} {
		f := filepath.Join(t.TempDir(), check+".yml")
		if err := os.WriteFile(f, blocks[i][1], 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(tool, "check", check, f).CombinedOutput(); err != nil {
			t.Errorf("promtool check %s on docs/operations.md's block: %v\n%s", check, err, out)
		}
	}
}

// checkDocumented: docs/operations.md names every osprey_ family in
// exposed; it returns the page.
func checkDocumented(t *testing.T, exposed map[string]bool) []byte {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range exposed {
		if strings.HasPrefix(name, "osprey_") && !bytes.Contains(doc, []byte(name)) {
			t.Errorf("docs/operations.md does not describe %s", name)
		}
	}
	return doc
}

// TestRestartOSDMovesMetrics: after local.Cluster.RestartOSD, the OSD's
// metrics address (the one the cluster printed) serves the new OSD: its
// op counters start again and move with its ops.
func TestRestartOSDMovesMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := osdtest.StartLocal(t, local.Options{OSDs: 1, Replicas: 1, PGs: 4, Dir: t.TempDir(), Metrics: true})
	if len(c.Metrics) != 1 || c.Metrics[0].Daemon != "osd.0" {
		t.Fatalf("metrics listeners %v, want osd.0's", c.Metrics)
	}
	url := c.Metrics[0].URL()
	cl, err := client.New(ctx, client.Options{Seeds: c.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "met"); err != nil {
		t.Fatal(err)
	}
	// An op is timed before its reply goes, so a scrape after the reply
	// counts it.
	puts := func() float64 {
		_, fams := scrape(t, url)
		return value(fams, "osprey_osd_op_duration_seconds", "op=put_object")
	}
	for i := range 3 {
		if _, err := osdtest.Put(ctx, cl, "met", fmt.Sprint("k", i), osdtest.Payload(100, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := puts(); n != 3 {
		t.Fatalf("%v puts on the first OSD's metrics, want 3", n)
	}
	if err := c.RestartOSD(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := c.Metrics[0].URL(); got != url {
		t.Fatalf("after the restart osd.0's metrics are at %s, want %s as before", got, url)
	}
	if n := puts(); n != 0 {
		t.Fatalf("%v puts on the restarted OSD's metrics before any, want 0 (the old OSD's count?)", n)
	}
	if _, err := osdtest.Put(ctx, cl, "met", "k3", osdtest.Payload(100, 3), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := puts(); n != 1 {
		t.Fatalf("%v puts on the restarted OSD's metrics after one, want 1", n)
	}
}

// TestServerPprof: Go's profiles are served only when asked for, since
// they show a daemon's internals to whoever reaches the admin listener.
func TestServerPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, err := metrics.Serve(t.Context(), metrics.ServerOptions{Addr: "127.0.0.1:0", Registry: metrics.NewRegistry(), Pprof: on})
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + s.Addr()
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if resp.StatusCode != want {
				t.Errorf("Pprof %v: GET %s: %d, want %d (%.200s)", on, path, resp.StatusCode, want, b)
			}
			if on && path == "/debug/pprof/goroutine?debug=1" && !bytes.Contains(b, []byte("goroutine profile")) {
				t.Errorf("GET %s: not a goroutine profile: %.200s", path, b)
			}
		}
		if _, fams := scrape(t, s.URL()); fams["go_goroutines"] == nil {
			t.Errorf("Pprof %v: /metrics lost its series", on)
		}
		http.DefaultClient.CloseIdleConnections()
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGatewayObserve: each operation and status is a series of its own,
// however the gateway caches them, a request cut before its status or
// refused before its operation is counted as such, and errors are
// counted by their S3 code too (a 403's cause).
func TestGatewayObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := metrics.NewGateway(reg)
	for _, r := range []s3gw.RequestInfo{
		{Op: "GetObject", Status: 200, BytesOut: 10},
		{Op: "GetObject", Status: 200, BytesOut: 5},
		{Op: "GetObject", Status: 404, Error: "NoSuchKey"},
		{Op: "PutObject", Status: 200, BytesIn: 7},
		{Op: "", Status: 403, Error: "SignatureDoesNotMatch"},
		{Op: "Auth", Status: 403, Error: "SignatureDoesNotMatch"},
		{Op: "Auth", Status: 403, Error: "RequestTimeTooSkewed"},
		{Op: "GetObject", Status: 0},
	} {
		g.Observe(r)
	}
	fams := map[string]*dto.MetricFamily{}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"osprey_s3_requests_total", []string{"op=GetObject", "status=200"}, 2},
		{"osprey_s3_requests_total", []string{"op=GetObject", "status=404"}, 1},
		{"osprey_s3_requests_total", []string{"op=GetObject", "status=0"}, 1},
		{"osprey_s3_requests_total", []string{"op=PutObject", "status=200"}, 1},
		{"osprey_s3_requests_total", []string{"op=Unknown", "status=403"}, 1},
		{"osprey_s3_requests_total", []string{"op=Auth", "status=403"}, 2},
		{"osprey_s3_errors_total", []string{"op=GetObject", "code=NoSuchKey"}, 1},
		{"osprey_s3_errors_total", []string{"op=Auth", "code=SignatureDoesNotMatch"}, 1},
		{"osprey_s3_errors_total", []string{"op=Auth", "code=RequestTimeTooSkewed"}, 1},
		{"osprey_s3_errors_total", []string{"op=Unknown", "code=SignatureDoesNotMatch"}, 1},
		{"osprey_s3_sent_bytes_total", []string{"op=GetObject"}, 15},
		{"osprey_s3_received_bytes_total", []string{"op=PutObject"}, 7},
		{"osprey_s3_request_duration_seconds", []string{"op=GetObject"}, 4},
	} {
		if v := value(fams, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}

// TestProbes: /healthz answers 200 while the process serves; /readyz 200
// while ServerOptions.Ready says so, else 503 with its reason; and a local
// cluster's daemons are ready once they serve.
func TestProbes(t *testing.T) {
	var notReady atomic.Pointer[string]
	s, err := metrics.Serve(t.Context(), metrics.ServerOptions{Addr: "127.0.0.1:0", Registry: metrics.NewRegistry(), Ready: func() error {
		if why := notReady.Load(); why != nil {
			return errors.New(*why)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	probe := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	base := "http://" + s.Addr()
	if code, body := probe(base, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := probe(base, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz, ready: %d %q", code, body)
	}
	why := "draining"
	notReady.Store(&why)
	if code, body := probe(base, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Fatalf("/readyz, not ready: %d %q", code, body)
	}
	if code, _ := probe(base, "/healthz"); code != 200 {
		t.Fatalf("/healthz of a live daemon that is not ready: %d", code)
	}

	lc := osdtest.StartLocal(t, local.Options{OSDs: 2, Replicas: 2, PGs: 8, Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithMon: true, NoAuth: true, Metrics: true})
	for _, dm := range lc.Metrics {
		osdtest.Eventually(t, 30*time.Second, dm.Daemon+" ready", func() bool {
			code, _ := probe("http://"+dm.Addr(), "/readyz")
			return code == 200
		})
	}
}
