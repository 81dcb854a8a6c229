//go:build rdma

package metrics_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// startRDMA starts a local cluster of osds OSDs, each object on all of
// them, whose networks are rdma+tcp, with metrics, and a client of it;
// both are closed at cleanup.
func startRDMA(t *testing.T, osds int) (*local.Cluster, *client.Client) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc := osdtest.StartLocal(t, local.Options{OSDs: osds, Replicas: osds, PGs: 4, Public: "rdma+tcp", Cluster: "rdma+tcp",
		Dir: t.TempDir(), Logger: logger, Metrics: true})
	cl, err := client.New(t.Context(), client.Options{Seeds: lc.Seeds(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return lc, cl
}

// TestRDMAMetrics: on the RDMA transport (libfabric's tcp provider), the
// OSDs expose its registered memory and CQ polls, and a put large enough
// for the rendezvous moves its transfer counters and the messenger's
// bytes under transport rdma+tcp.
func TestRDMAMetrics(t *testing.T) {
	tool := promtool(t)
	ctx := t.Context()
	lc, cl := startRDMA(t, 2)
	sum := func(name string, labels ...string) float64 {
		total := 0.0
		for _, m := range lc.Metrics {
			_, fams := scrape(t, m.URL())
			total += value(fams, name, labels...)
		}
		return total
	}
	rdv := func() float64 {
		return sum("osprey_rdma_rendezvous_reads_total", "transport=rdma+tcp") + sum("osprey_rdma_rendezvous_writes_total", "transport=rdma+tcp")
	}
	before, polls := rdv(), sum("osprey_rdma_cq_polls_total", "transport=rdma+tcp")
	if err := cl.MakeBucket(ctx, "rdma"); err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	if _, err := osdtest.Put(ctx, cl, "rdma", "big", osdtest.Payload(size, 2), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var now, nowPolls, bytesIn float64
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("rendezvous transfers %v -> %v, CQ polls %v -> %v, public bytes in %v", before, now, polls, nowPolls, bytesIn)
	}, func() bool {
		now, nowPolls = rdv(), sum("osprey_rdma_cq_polls_total", "transport=rdma+tcp")
		bytesIn = sum("osprey_msgr_received_bytes_total", "network=public", "transport=rdma+tcp")
		return now > before && nowPolls > polls && bytesIn >= size &&
			sum("osprey_rdma_registered_bytes", "transport=rdma+tcp") > 0
	})

	// Two gets of the object: the second is served from the primary's
	// read cache, which lives in memory lent by the public transport.
	for range 2 {
		if got, _, err := osdtest.Get(ctx, cl, "rdma", "big", client.GetOptions{}); err != nil || len(got) != size {
			t.Fatalf("get: %d bytes, %v", len(got), err)
		}
	}
	var hits, lent, regions, failures float64
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("read cache hits %v, lent %v bytes in %v regions, %v allocation failures", hits, lent, regions, failures)
	}, func() bool {
		hits, failures = sum("osprey_osd_read_cache_hits_total"), sum("osprey_osd_read_cache_alloc_failures_total")
		lent, regions = sum("osprey_rdma_lent_bytes", "transport=rdma+tcp"), sum("osprey_rdma_lent_regions", "transport=rdma+tcp")
		return hits >= 1 && lent >= size && regions >= 1
	})
	if failures != 0 {
		t.Errorf("%v read cache allocation failures under the default budget", failures)
	}
	exposed := map[string]bool{}
	for _, m := range lc.Metrics {
		b, fams := scrape(t, m.URL())
		lint(t, tool, m.Daemon, b)
		for name := range fams {
			exposed[name] = true
		}
		// The daemons of a local cluster share one transport, whose
		// budget is the default 1 GiB for each OSD.
		if got := value(fams, "osprey_rdma_registered_budget_bytes", "transport=rdma+tcp"); got != 2<<30 {
			t.Errorf("%s: registered budget %v, want 2 GiB, the default for each of 2 OSDs", m.Daemon, got)
		}
	}
	// TestDaemonMetrics's cluster runs on tcp: the osprey_rdma_ families
	// are checked against the docs here.
	checkDocumented(t, exposed)
}

// TestRDMAMemBudgetMetrics: an OSD started with OSPREY_RDMA_MEM_BUDGET
// (what --rdma-mem-budget sets) reports that budget, and lends its read
// cache no more than half of it: 20 objects of 2 MiB, each read once,
// are all cached, 16 of them (32 MiB) in registered memory and the rest
// in ordinary memory, each counted as an allocation failure.
func TestRDMAMemBudgetMetrics(t *testing.T) {
	ctx := t.Context()
	const budget = 64 << 20
	t.Setenv("OSPREY_RDMA_MEM_BUDGET", "64MiB")
	lc, cl := startRDMA(t, 1)
	if err := cl.MakeBucket(ctx, "budget"); err != nil {
		t.Fatal(err)
	}
	const size, n = 2 << 20, 20
	for i := range n {
		if _, err := osdtest.Put(ctx, cl, "budget", fmt.Sprint(i), osdtest.Payload(size, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if got, _, err := osdtest.Get(ctx, cl, "budget", fmt.Sprint(i), client.GetOptions{}); err != nil || len(got) != size {
			t.Fatalf("get %d: %d bytes, %v", i, len(got), err)
		}
	}
	url := lc.Metrics[0].URL()
	var objects, lent, failures, got float64
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("budget %v, %v objects cached, %v bytes lent, %v allocation failures", got, objects, lent, failures)
	}, func() bool {
		_, fams := scrape(t, url)
		got = value(fams, "osprey_rdma_registered_budget_bytes", "transport=rdma+tcp")
		objects, failures = value(fams, "osprey_osd_read_cache_objects"), value(fams, "osprey_osd_read_cache_alloc_failures_total")
		lent = value(fams, "osprey_rdma_lent_bytes", "transport=rdma+tcp")
		return objects == n && failures >= n-budget/2/size
	})
	if got != budget || lent <= 0 || lent > budget/2 {
		t.Fatalf("budget %v (want %d), %v bytes lent (want some, at most half the budget)", got, budget, lent)
	}
}
