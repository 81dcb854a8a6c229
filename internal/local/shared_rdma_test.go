//go:build rdma

package local

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestDaemonsShareOneRDMATransport: every messenger of a local cluster
// (each OSD's public and cluster networks) and a client given
// Cluster.Transports run on one RDMA transport, so the process has one
// domain and one completion poller per provider, whose registered-memory
// budget is that of each OSD together and whose completion queue that of
// each daemon and the client together; each OSD's client messages take
// an eighth of its own share; objects move over it, and Close ends it.
func TestDaemonsShareOneRDMATransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{OSDs: 2, PGs: 8, Public: "rdma+tcp", Cluster: "rdma+tcp", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close(context.Background())
		}
	}()
	shared := rdmaTCP(t, c.Transports)
	if got, want := shared.Config().MemBudget, int64(2)<<30; got != want {
		t.Errorf("shared MemBudget %d, want %d (2 OSDs, 1 GiB each)", got, want)
	}
	if got, want := shared.Config().CQEntries, 4*4096; got != want {
		t.Errorf("shared CQEntries %d, want %d (2 OSDs, a mon and a client, 4096 each)", got, want)
	}
	for _, o := range c.OSDs {
		pub, clu := o.Messengers()
		for _, m := range []*msgr.Messenger{pub, clu} {
			if got := rdmaTCP(t, m.Transports()); got != shared {
				t.Fatalf("osd.%d runs on its own rdma+tcp transport, not the cluster's", o.ID())
			}
		}
		// Each OSD's client messages take an eighth of its own 1 GiB in
		// the shared domain, not of the whole (osd.Config.ClientMessageBytes).
		if got, want := pub.Stats().Recv.Limit, int64(128)<<20; got != want {
			t.Errorf("osd.%d: client message budget %d, want %d", o.ID(), got, want)
		}
	}
	cl, err := client.New(ctx, client.Options{Seeds: c.Seeds(), Transports: c.Transports})
	if err != nil {
		t.Fatal(err)
	}
	putGet(ctx, t, cl, "shared", bytes.Repeat([]byte("shared"), 1000), 1)
	if s := shared.Stats(); s.HighWaterBytes == 0 || s.CQPolls == 0 {
		t.Fatalf("the shared transport carried nothing: %+v", s)
	}
	cl.Close()
	closed = true
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := shared.Stats(); s.RegisteredBytes != 0 || s.HighWaterBytes != 0 {
		t.Fatalf("after Close the shared transport still has a domain: %+v", s)
	}
}

// rdmaTCP is the rdma+tcp transport of ts.
func rdmaTCP(t *testing.T, ts []wire.Transport) *rdma.Transport {
	t.Helper()
	for _, tr := range ts {
		if rt, ok := tr.(*rdma.Transport); ok && rt.Scheme() == "rdma+tcp" {
			return rt
		}
	}
	t.Fatal("no rdma+tcp transport")
	return nil
}
