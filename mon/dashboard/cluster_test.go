package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/dashboard"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fast samples and polls often, so a test sees a change within a second.
func fast(src dashboard.Source) dashboard.Options {
	return dashboard.Options{Source: src, Interval: 200 * time.Millisecond, Poll: 200 * time.Millisecond, Logger: quiet()}
}

// startCluster runs a 3-OSD cluster (3 replicas) with a mon in this
// process, and a dashboard on it that samples every 200ms. How full the
// host's disk is plays no part (osdtest.IgnoreHostDisk).
func startCluster(t *testing.T, o local.Options) (*local.Cluster, *dashboard.Server) {
	t.Helper()
	o.OSDs, o.PGs, o.WithMon, o.NoAuth, o.Dir, o.Logger = 3, 16, true, true, t.TempDir(), quiet()
	o.NearfullRatio, o.BackfillfullRatio, o.FullRatio, o.FailsafeFullRatio = osdtest.IgnoreHostDisk, osdtest.IgnoreHostDisk, osdtest.IgnoreHostDisk, osdtest.IgnoreHostDisk
	c := osdtest.StartLocal(t, o)
	return c, serve(t, c.Mon)
}

// serve runs a fast dashboard on src until the test ends.
func serve(t *testing.T, src dashboard.Source) *dashboard.Server {
	t.Helper()
	s, err := dashboard.Serve(context.Background(), "127.0.0.1:0", fast(src))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func localOptions() local.Options { return local.Options{} }

// getJSON GETs base+path into v and returns the status code.
func getJSON(t *testing.T, base, path string, v any) int {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(base, "/") + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	return resp.StatusCode
}

// waitView polls /api/status until cond holds.
func waitView(t *testing.T, base string, within time.Duration, what string, cond func(*dashboard.View) bool) *dashboard.View {
	t.Helper()
	var v dashboard.View
	msgrtest.EventuallyDescribed(t, within, func() string {
		b, _ := json.Marshal(v)
		return fmt.Sprintf("for %s; last status: %s%s", what, b, osdtest.HostDiskNote(os.TempDir()))
	}, func() bool {
		v = dashboard.View{}
		return getJSON(t, base, "/api/status", &v) == http.StatusOK && cond(&v)
	})
	return &v
}

func osdUp(v *dashboard.View, id uint32) (up, found bool) {
	for _, o := range v.OSDs {
		if o.ID == id {
			return o.Up, true
		}
	}
	return false, false
}

func hasEvent(v *dashboard.View, kind, text string) bool {
	for _, e := range v.Events {
		if e.Kind == kind && strings.Contains(e.Text, text) {
			return true
		}
	}
	return false
}

// TestAPIOnLiveCluster drives the JSON API on a real cluster: healthy at
// first, client throughput from real puts and gets in the history, an
// OSD stopped shows down with the health degraded and an event, and it
// recovers when the OSD comes back.
func TestAPIOnLiveCluster(t *testing.T) {
	c, s := startCluster(t, local.Options{DashboardAddr: "127.0.0.1:0"})
	ctx := context.Background()
	base := s.URL()
	v := waitView(t, base, 20*time.Second, "HEALTH_OK", func(v *dashboard.View) bool { return v.Health.Status == mon.HealthOK })
	if v.Counts != (mon.OSDCounts{Total: 3, Up: 3, In: 3}) || len(v.OSDs) != 3 || v.PGTotal != 16 || len(v.PGs) != 1 || v.PGs[0].State != "active+clean" {
		t.Fatalf("healthy cluster: %+v", v)
	}
	for _, o := range v.OSDs {
		if !o.Up || o.PublicAddr == "" || o.UsedBytes+o.AvailBytes == 0 {
			t.Fatalf("osd.%d: %+v, want up with an address and capacity", o.ID, o)
		}
	}
	// local.Options.DashboardAddr serves one too.
	var lv dashboard.View
	if code := getJSON(t, c.Dashboard.URL(), "/api/status", &lv); code != http.StatusOK || lv.FSID != v.FSID {
		t.Fatalf("the local cluster's own dashboard: %d %+v", code, lv)
	}

	cl, err := client.New(ctx, client.Options{Mon: []string{c.Mon.Addr()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "dash"); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("osprey"), 200_000) // 1.2 MB
	// Rates are measured between beacons a second or more apart: keep
	// writing and reading until the history shows both.
	var h dashboard.History
	msgrtest.Eventually(t, 20*time.Second, "client write and read throughput in the history", func() bool {
		if _, err := cl.PutObject(ctx, "dash", "k", bytes.NewReader(body), int64(len(body)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		obj, err := cl.GetObject(ctx, "dash", "k", client.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, obj)
		obj.Close()
		h = dashboard.History{}
		getJSON(t, base, "/api/history", &h)
		var read, write, ops bool
		for _, p := range h.Points {
			read, write, ops = read || p.ReadBytes > 0, write || p.WriteBytes > 0, ops || p.Ops > 0
		}
		return read && write && ops
	})
	if h.OSD != -1 || h.IntervalMS != 200 {
		t.Fatalf("history: %+v", h)
	}

	if err := c.StopOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	id := c.OSDs[2].ID()
	v = waitView(t, base, 15*time.Second, fmt.Sprintf("osd.%d down and HEALTH_WARN", id), func(v *dashboard.View) bool {
		up, ok := osdUp(v, id)
		return ok && !up && v.Health.Status == mon.HealthWarn && hasEvent(v, dashboard.KindOSDDown, fmt.Sprintf("osd.%d down", id))
	})
	if !strings.Contains(strings.Join(v.Health.Checks, "\n"), "1 osds down") {
		t.Fatalf("checks %q, want the OSD down among the reasons", v.Health.Checks)
	}
	if code := getJSON(t, base, fmt.Sprintf("/api/history?osd=%d", id), &h); code != http.StatusOK || len(h.Points) == 0 {
		t.Fatalf("a down OSD's history: %d, %d points", code, len(h.Points))
	}

	if err := c.RestartOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	waitView(t, base, 20*time.Second, "HEALTH_OK again with the OSD up", func(v *dashboard.View) bool {
		up, _ := osdUp(v, id)
		return up && v.Health.Status == mon.HealthOK && hasEvent(v, dashboard.KindOSDUp, fmt.Sprintf("osd.%d up", id)) &&
			hasEvent(v, dashboard.KindRecoveryDone, "all 16 pgs active+clean")
	})
}

// bigCluster makes a real mon hold n OSDs through its API, as if n
// daemons had booted on n/4 hosts with IPv6 addresses (the longest the
// tree shows), each beaconing once with its capacity. No OSD process
// runs: the grace is long, so nobody marks them down during a test.
func bigCluster(t *testing.T, n int) *mon.Mon {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := mon.StartEtcd(ctx, t.TempDir(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	m, err := mon.Start(ctx, mon.Config{NoAuth: true, Etcd: e.Endpoints(), HeartbeatGrace: 5 * time.Minute, DownOutInterval: time.Hour,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, PgCount: 256}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{m.Addr()}, Name: "client.admin", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	for i := range n {
		addr := fmt.Sprintf("tcp://[fd00:5e7f:a11c:%x::%x]:6800", i/4, i%4+1)
		rep, err := mc.Boot(ctx, &osdpb.MonBoot{Fsid: m.FSID(), Uuid: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			PublicAddr: addr, ClusterAddr: strings.Replace(addr, "6800", "6801", 1), Host: fmt.Sprintf("storage-node-%03d.rack-%d.example.net", i/4, i/20), Weight: 1})
		if err != nil {
			t.Fatalf("booting osd %d: %v", i, err)
		}
		used := uint64(i+1) * 40 << 30
		if err := mc.Beacon(ctx, &osdpb.MonBeacon{Fsid: m.FSID(), Id: rep.Id, Uuid: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			Epoch: rep.Map.Epoch, UsedBytes: used, AvailBytes: 4<<40 - used}); err != nil {
			t.Fatalf("beacon of osd.%d: %v", rep.Id, err)
		}
	}
	return m
}

// TestAPIHundredOSDs: the status carries every OSD of a 100-OSD map,
// each with its host, address and capacity, and each has a history.
func TestAPIHundredOSDs(t *testing.T) {
	m := bigCluster(t, 100)
	s := serve(t, m)
	v := waitView(t, s.URL(), 10*time.Second, "100 OSDs", func(v *dashboard.View) bool { return len(v.OSDs) == 100 })
	for i, o := range v.OSDs {
		if o.ID != uint32(i) || !o.Up || !strings.HasPrefix(o.Host, "storage-node-") || o.AvailBytes == 0 {
			t.Fatalf("osd %d: %+v", i, o)
		}
	}
	var h dashboard.History
	if code := getJSON(t, s.URL(), "/api/history?osd=99", &h); code != http.StatusOK || h.OSD != 99 {
		t.Fatalf("osd.99's history: %d %+v", code, h)
	}
	// What a sample and a poll cost at this size (docs/dashboard.md).
	start := time.Now()
	const n = 10
	for range n {
		if _, err := m.Report(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(s.URL() + "api/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("100 OSDs, 256 PGs: a Report takes %v; /api/status is %d bytes", time.Since(start)/n, len(b))
}
