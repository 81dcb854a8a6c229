package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// report builds a mon.Report: OSDs by id with up/in, and PGs by state.
func report(health string, checks []string, osds []mon.OSDReport, pgs map[string]int) *mon.Report {
	total := 0
	for _, n := range pgs {
		total += n
	}
	st := &mon.Status{FSID: "f", Epoch: 7, Health: mon.Health{Status: health, Checks: checks}, PGs: pgs, PGTotal: total}
	for _, o := range osds {
		st.OSDs.Total++
		if o.Up {
			st.OSDs.Up++
		}
		if o.In {
			st.OSDs.In++
		}
		st.OpsPerSec += o.OpsPerSec
	}
	return &mon.Report{Status: st, OSDs: osds}
}

func osdr(id uint32, up, in bool) mon.OSDReport {
	var o mon.OSDReport
	o.ID, o.Up, o.In, o.PublicAddr = id, up, in, "tcp://127.0.0.1:1"
	return o
}

func kinds(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind+": "+e.Text)
	}
	return out
}

// TestChanges: each difference between two reports that an operator
// cares about becomes one event, and no difference none.
func TestChanges(t *testing.T) {
	clean := map[string]int{"active+clean": 8}
	healthy := report(mon.HealthOK, nil, []mon.OSDReport{osdr(0, true, true), osdr(1, true, true)}, clean)
	cases := []struct {
		name       string
		prev, cur  *mon.Report
		want       []string
		wantLevels []string
	}{
		{"first sample says the health", nil, healthy, []string{"health: HEALTH_OK"}, []string{"info"}},
		{"nothing changed", healthy, healthy, nil, nil},
		{"osd down",
			healthy,
			report(mon.HealthWarn, []string{"1 osds down"}, []mon.OSDReport{osdr(0, true, true), osdr(1, false, true)}, map[string]int{"active+undersized+degraded": 8}),
			[]string{"health: HEALTH_WARN: 1 osds down", "osd_down: osd.1 down"}, []string{"warn", "warn"}},
		{"osd out and back up",
			report(mon.HealthOK, nil, []mon.OSDReport{osdr(0, true, true), osdr(1, false, true)}, clean),
			report(mon.HealthOK, nil, []mon.OSDReport{osdr(0, true, true), osdr(1, true, false)}, clean),
			[]string{"osd_up: osd.1 up at tcp://127.0.0.1:1", "osd_out: osd.1 out"}, nil},
		{"osd created and removed",
			healthy,
			report(mon.HealthOK, nil, []mon.OSDReport{osdr(0, true, true), osdr(2, false, false)}, clean),
			[]string{"osd_new: osd.2 created", "osd_removed: osd.1 removed"}, nil},
		{"peering and recovery start",
			healthy,
			report(mon.HealthOK, nil, healthy.OSDs, map[string]int{"peering": 2, "active+recovering+degraded": 3, "active+clean": 3}),
			[]string{"peering: 2 pgs peering", "recovering: recovery started: 3 pgs recovering or backfilling"}, nil},
		{"recovery done",
			report(mon.HealthOK, nil, healthy.OSDs, map[string]int{"active+backfilling+degraded": 1, "active+clean": 7}),
			healthy,
			[]string{"recovery_done: recovery done: all 8 pgs active+clean"}, nil},
		{"recovery done, an out OSD kept acting for want of a replacement",
			report(mon.HealthOK, nil, healthy.OSDs, map[string]int{"active+backfilling+degraded": 1, "active+clean+remapped": 7}),
			report(mon.HealthOK, nil, healthy.OSDs, map[string]int{"active+clean+remapped": 8}),
			[]string{"recovery_done: recovery done: all 8 pgs active+clean"}, nil},
		{"the reasons change, the level does not",
			report(mon.HealthWarn, []string{"3 pgs unknown"}, healthy.OSDs, map[string]int{"unknown": 3, "active+clean": 5}),
			report(mon.HealthWarn, []string{"1 pgs unknown"}, healthy.OSDs, map[string]int{"unknown": 1, "active+clean": 7}),
			nil, nil},
		{"a start is no recovery",
			report(mon.HealthWarn, []string{"8 pgs unknown"}, healthy.OSDs, map[string]int{"unknown": 8}),
			healthy,
			[]string{"health: HEALTH_OK"}, nil},
		{"health error",
			healthy,
			report(mon.HealthErr, []string{"8 pgs down"}, healthy.OSDs, map[string]int{"down": 8}),
			[]string{"health: HEALTH_ERR: 8 pgs down"}, []string{"err"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := changes(c.prev, c.cur, false)
			if g := kinds(got); strings.Join(g, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(c.want, "\n"))
			}
			for i, l := range c.wantLevels {
				if got[i].Level != l {
					t.Errorf("event %d level %q, want %q", i, got[i].Level, l)
				}
			}
		})
	}
}

// TestRecoveryDoneAcrossSamples: recovery is done when the cluster is
// all clean again after PGs missed copies, even when they passed through
// states in between (unknown, peering) that say nothing of copies.
func TestRecoveryDoneAcrossSamples(t *testing.T) {
	osds := []mon.OSDReport{osdr(0, true, true)}
	steps := []*mon.Report{
		report(mon.HealthWarn, nil, osds, map[string]int{"unknown": 8}),
		report(mon.HealthOK, nil, osds, map[string]int{"active+clean": 8}), // a start: no recovery
		report(mon.HealthWarn, nil, osds, map[string]int{"active+undersized+degraded": 8}),
		report(mon.HealthWarn, nil, osds, map[string]int{"unknown": 8}),
		report(mon.HealthWarn, nil, osds, map[string]int{"peering": 8}),
		report(mon.HealthOK, nil, osds, map[string]int{"active+clean": 8}),
		report(mon.HealthOK, nil, osds, map[string]int{"active+clean": 8}),
	}
	var prev *mon.Report
	recovering, done := false, []int{}
	for i, r := range steps {
		var evs []Event
		evs, recovering = changes(prev, r, recovering)
		for _, e := range evs {
			if e.Kind == KindRecoveryDone {
				done = append(done, i)
			}
		}
		prev = r
	}
	if len(done) != 1 || done[0] != 5 {
		t.Fatalf("recovery done at steps %v, want [5]", done)
	}
}

// TestHistoryIsBounded: the rings keep History/Interval points however
// long the mon runs, the events Options.Events, and an OSD that leaves
// the map takes its ring with it.
func TestHistoryIsBounded(t *testing.T) {
	d, err := New(Options{Source: &fakeSource{}, Interval: time.Second, History: 5 * time.Second, Events: 4, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 50 {
		up := i%2 == 0 // osd.1 flaps: two events a sample
		o := osdr(1, up, true)
		o.OpsPerSec = float64(i)
		d.observe(report(mon.HealthOK, nil, []mon.OSDReport{osdr(0, true, true), o}, nil), t0.Add(time.Duration(i)*time.Second))
	}
	pts, ok := d.history(1, 0)
	if !ok || len(pts) != 5 {
		t.Fatalf("osd.1 history: %d points (ok %v), want 5", len(pts), ok)
	}
	for i, p := range pts {
		if want := float64(45 + i); p.Ops != want || p.At != t0.Add(time.Duration(45+i)*time.Second).UnixMilli() {
			t.Fatalf("point %d: %+v, want ops %v in order", i, p, want)
		}
	}
	if cl, _ := d.history(-1, 0); len(cl) != 5 {
		t.Fatalf("cluster history: %d points, want 5", len(cl))
	}
	if after, _ := d.history(-1, pts[2].At); len(after) != 2 {
		t.Fatalf("history since the third point: %d points, want 2", len(after))
	}
	if evs := d.eventsAfter(0); len(evs) != 4 || evs[3].Seq != d.seq {
		t.Fatalf("kept %d events ending at seq %d, want the last 4 of %d", len(evs), evs[len(evs)-1].Seq, d.seq)
	}
	d.observe(report(mon.HealthOK, nil, []mon.OSDReport{osdr(0, true, true)}, nil), t0.Add(time.Minute))
	if _, ok := d.history(1, 0); ok || len(d.osds) != 1 {
		t.Fatalf("osd.1 left the map but its ring stays (%d rings)", len(d.osds))
	}
}

// fakeSource answers Report with what the test set.
type fakeSource struct {
	mu  sync.Mutex
	r   *mon.Report
	err error
	n   int
}

func (f *fakeSource) Report(ctx context.Context) (*mon.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return f.r, f.err
}

func (f *fakeSource) set(r *mon.Report, err error) {
	f.mu.Lock()
	f.r, f.err = r, err
	f.mu.Unlock()
}

func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

// TestAPI drives the JSON endpoints and the page's files through the
// handler: what each answers, and a clear 4xx with a JSON error for what
// it cannot serve.
func TestAPI(t *testing.T) {
	src := &fakeSource{}
	d, err := New(Options{Source: src, Interval: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handler()
	src.set(nil, errors.New("etcd is away"))
	d.sample(context.Background())
	if w := get(t, h, "GET", "/api/status"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "etcd is away") {
		t.Fatalf("before a sample: %d %s, want 503 saying why", w.Code, w.Body)
	}

	o := osdr(3, true, true)
	o.Host, o.OpsPerSec, o.UsedBytes, o.AvailBytes = "h1", 12, 100, 900
	src.set(report(mon.HealthWarn, []string{"1 osds down"}, []mon.OSDReport{o, osdr(4, false, true)}, map[string]int{"active+clean": 5, "peering": 7}), nil)
	d.sample(context.Background())
	w := get(t, h, "GET", "/api/status")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/api/status: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	var v View
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Health.Status != mon.HealthWarn || len(v.OSDs) != 2 || v.OSDs[0].Host != "h1" || v.Now.Ops != 12 ||
		len(v.PGs) != 2 || v.PGs[0] != (PGCount{"peering", 7}) || v.Error != "" || len(v.Events) != 1 || v.PollMS != 1000 {
		t.Fatalf("/api/status: %+v", v)
	}

	var hist History
	w = get(t, h, "GET", "/api/history?osd=3")
	if err := json.Unmarshal(w.Body.Bytes(), &hist); err != nil || w.Code != 200 || hist.OSD != 3 || len(hist.Points) != 1 || hist.Points[0].Ops != 12 {
		t.Fatalf("/api/history?osd=3: %d %s", w.Code, w.Body)
	}
	w = get(t, h, "GET", "/api/history")
	if err := json.Unmarshal(w.Body.Bytes(), &hist); err != nil || hist.OSD != -1 || len(hist.Points) != 1 {
		t.Fatalf("/api/history: %d %s", w.Code, w.Body)
	}
	w = get(t, h, "GET", "/api/events?since=0")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"kind":"health"`) {
		t.Fatalf("/api/events: %d %s", w.Code, w.Body)
	}
	if w := get(t, h, "GET", "/api/events?since=1"); w.Body.String() != "{\"events\":[]}\n" {
		t.Fatalf("/api/events after the last: %s", w.Body)
	}

	// A failed sample keeps the last one and says it is stale.
	src.set(nil, errors.New("etcd is away again"))
	d.sample(context.Background())
	w = get(t, h, "GET", "/api/status")
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || w.Code != 200 || v.Error != "etcd is away again" || v.Health.Status != mon.HealthWarn {
		t.Fatalf("after a failed sample: %d %s", w.Code, w.Body)
	}

	for _, c := range []struct {
		method, target string
		code           int
	}{
		{"GET", "/api/history?osd=99", 404},
		{"GET", "/api/history?osd=-1", 400},
		{"GET", "/api/history?osd=4294967296", 400},
		{"GET", "/api/history?osd=1&osd=2", 400},
		{"GET", "/api/history?since=x", 400},
		{"GET", "/api/history?nope=1", 400},
		{"GET", "/api/history?%zz", 400},
		{"GET", "/api/events?since=-1", 400},
		{"GET", "/api/nope", 404},
		{"POST", "/api/status", 405},
		{"DELETE", "/", 405},
	} {
		w := get(t, h, c.method, c.target)
		if w.Code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.target, w.Code, w.Body, c.code)
		}
		if strings.HasPrefix(c.target, "/api/") && c.code != 404 && !strings.HasPrefix(w.Body.String(), `{"error":`) {
			t.Errorf("%s %s: %s, want a JSON error", c.method, c.target, w.Body)
		}
	}

	for path, want := range map[string]string{"/": "text/html", "/assets/app.js": "javascript", "/assets/style.css": "text/css"} {
		w := get(t, h, "GET", path)
		if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), want) || !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: %d %q, CSP %q", path, w.Code, w.Header().Get("Content-Type"), w.Header().Get("Content-Security-Policy"))
		}
	}
	if w := get(t, h, "GET", "/assets/../../dashboard.go"); w.Code == 200 {
		t.Errorf("a path out of the assets: %d", w.Code)
	}
}

// TestNoExternalReferences: the page names nothing outside the binary
// (no CDN), which the CSP would block anyway.
func TestNoExternalReferences(t *testing.T) {
	for _, f := range []string{"assets/index.html", "assets/app.js", "assets/style.css"} {
		b, err := assets.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"http://", "https://", "//cdn", "@import"} {
			if s == "http://" && strings.Contains(string(b), "http://www.w3.org/2000/svg") {
				continue // an XML namespace name, never fetched
			}
			if strings.Contains(string(b), s) {
				t.Errorf("%s mentions %q", f, s)
			}
		}
	}
}

// TestServeStopsCleanly: Serve samples at once and until Close, and
// Close leaves no goroutine behind.
func TestServeStopsCleanly(t *testing.T) {
	before := runtime.NumGoroutine()
	src := &fakeSource{}
	src.set(report(mon.HealthOK, nil, nil, nil), nil)
	s, err := Serve(context.Background(), "127.0.0.1:0", Options{Source: src, Interval: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL() + "api/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	msgrtest.Eventually(t, 5*time.Second, "three samples", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.n >= 3
	})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	msgrtest.Eventually(t, 5*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if _, err := Serve(context.Background(), "127.0.0.1:0", Options{}); err == nil {
		t.Fatal("Serve without a Source: no error")
	}
}

// FuzzHandler: whatever the method, path and query, the handler answers
// without a 500, and every /api/ answer is JSON.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{"/api/status", "/api/history?osd=1&since=0", "/api/events?since=18446744073709551615",
		"/api/history?osd=%", "/assets/app.js", "/", "/api/history?since=-9223372036854775808", "/api/../api/status"} {
		f.Add("GET", s)
	}
	f.Add("HEAD", "/api/status")
	f.Add("PUT", "/api/history")
	src := &fakeSource{}
	d, err := New(Options{Source: src, Logger: quiet()})
	if err != nil {
		f.Fatal(err)
	}
	o := osdr(1, true, true)
	d.observe(report(mon.HealthOK, nil, []mon.OSDReport{o}, map[string]int{"active+clean": 1}), time.Now())
	h := d.Handler()
	f.Fuzz(func(t *testing.T, method, target string) {
		req, err := http.NewRequest(method, "http://x"+target, nil)
		if err != nil || req.URL.Path == "" || req.URL.Path[0] != '/' {
			return
		}
		req.RequestURI = target
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %q: %d %s", method, target, w.Code, w.Body)
		}
		// The mux's own answers (404, a redirect to the clean path) are
		// text; every answer of ours is JSON.
		ours := w.Code == 200 || w.Code == 400 || w.Code == 405 || w.Code == 503
		if strings.HasPrefix(req.URL.Path, "/api/") && ours && method != "HEAD" && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %q: %d, not JSON: %q", method, target, w.Code, w.Body)
		}
	})
}

// TestLoopbackDashboardRefusesOtherHosts: a dashboard on loopback answers
// requests for 127.0.0.1, [::1] and localhost only, so a web page whose
// name an attacker points at 127.0.0.1 (DNS rebinding) cannot read the
// cluster's status through a local browser.
func TestLoopbackDashboardRefusesOtherHosts(t *testing.T) {
	src := &fakeSource{}
	src.set(report(mon.HealthOK, nil, nil, nil), nil)
	s, err := Serve(context.Background(), "127.0.0.1:0", Options{Source: src, Interval: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	_, port, _ := net.SplitHostPort(s.Addr())
	for host, want := range map[string]int{
		s.Addr():                         http.StatusOK,
		"localhost:" + port:              http.StatusOK,
		"LOCALHOST":                      http.StatusOK,
		"[::1]:" + port:                  http.StatusOK,
		"evil.example:" + port:           http.StatusMisdirectedRequest,
		"evil.example":                   http.StatusMisdirectedRequest,
		"10.0.0.1:" + port:               http.StatusMisdirectedRequest,
		"localhost.evil.example:" + port: http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL()+"api/status", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}
