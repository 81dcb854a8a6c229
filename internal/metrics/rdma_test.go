//go:build rdma

package metrics_test

import (
	"context"
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

// TestRDMAMetrics: on the RDMA transport (libfabric's tcp provider), the
// OSDs expose its registered memory and CQ polls, and a put large enough
// for the rendezvous moves its transfer counters and the messenger's
// bytes under transport rdma+tcp.
func TestRDMAMetrics(t *testing.T) {
	tool := promtool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()
	lc, err := local.Start(ctx, local.Options{OSDs: 2, Replicas: 2, PGs: 4, Public: "rdma+tcp", Cluster: "rdma+tcp",
		Dir: t.TempDir(), Logger: logger, Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lc.Close(cctx)
	})
	cl, err := client.New(ctx, client.Options{Seeds: lc.Seeds(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
	for _, m := range lc.Metrics {
		b, _ := scrape(t, m.URL())
		lint(t, tool, m.Daemon, b)
	}
}
