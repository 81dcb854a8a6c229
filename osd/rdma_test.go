//go:build rdma

package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd"
)

// TestClusterRDMA runs the cluster network (replication and recovery) over
// rdma+tcp and the public network over TCP, as a Ceph cluster with
// ms_cluster_type=async+rdma: objects across the inline/rendezvous
// boundary reach every replica intact, and a replica that was stopped
// catches up over RDMA.
func TestClusterRDMA(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Cluster: "rdma+tcp"})
	cl := c.Client(t, nil)
	ctx := ctxT(t, 2*time.Minute)
	if err := cl.MakeBucket(ctx, "rdma"); err != nil {
		t.Fatal(err)
	}
	sizes := []int{0, 100, 16 << 10, 64 << 10, 1 << 20, 4<<20 + 1}
	for i, n := range sizes {
		key := fmt.Sprintf("obj%d", i)
		data := osdtest.Payload(n, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "rdma", key, data, client.PutOptions{}); err != nil {
			t.Fatalf("put %d bytes: %v", n, err)
		}
		got, _, err := osdtest.Get(ctx, cl, "rdma", key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get %d bytes: %v", n, err)
		}
		replicasHave(t, c, "rdma", key, data)
	}
	// osd.1 misses nothing while down (writes stop), but a restart on the
	// same data goes through peering over RDMA; then more writes land.
	c.StopOSD(1)
	c.StartOSD(1)
	for i := range 8 {
		key := fmt.Sprintf("after%d", i)
		data := osdtest.Payload(200<<10, uint64(100+i))
		osdtest.Eventually(t, 30*time.Second, "write after restart", func() bool {
			_, err := osdtest.Put(ctx, cl, "rdma", key, data, client.PutOptions{})
			return err == nil
		})
		replicasHave(t, c, "rdma", key, data)
	}
}

// TestReadRepairRDMA is TestReadRepair with both networks on rdma+tcp:
// the damaged bytes come by rendezvous, and their source CRC mismatch is
// reported there too.
func TestReadRepairRDMA(t *testing.T) { readRepair(t, "rdma+tcp") }

// TestClusterProcessesSurviveKillsRDMA is TestClusterProcessesSurviveKills
// with the replication network on rdma+tcp.
func TestClusterProcessesSurviveKillsRDMA(t *testing.T) { survivesKills(t, "rdma+tcp") }

// TestSmallPutsForwardedRDMA puts small objects over RDMA on both
// networks, so that the primary receives each body inline, in a receive
// buffer the RDMA link lends for one frame, and forwards it to the
// replicas. The primary must not keep that buffer past the message's
// release: the release grants the client that receive again, so a buffer
// still held by a RepOp waiting for its ack would be a receive granted but
// not posted (on verbs, a receiver-not-ready error). The invariants build
// (`make test`) panics on such a release, and checks every grant against
// the receives of its link, its own or its share of the shared pool; any
// build checks that the bodies reach every replica.
func TestSmallPutsForwardedRDMA(t *testing.T) {
	t.Run("SharedPool", func(t *testing.T) { smallPutsForwarded(t, rdma.Config{}) })
	t.Run("PerEndpoint", func(t *testing.T) { smallPutsForwarded(t, rdma.Config{NoSharedRecv: true}) })
}

func smallPutsForwarded(t *testing.T, cfg rdma.Config) {
	tr := rdma.NewTransport("tcp", cfg)
	t.Cleanup(func() { tr.Close() }) // after the cluster's and client's
	ts := []wire.Transport{tcp.Transport{}, tr}
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Public: "rdma+tcp", Cluster: "rdma+tcp",
		Tweak: func(cfg *osd.Config) { cfg.Transports = ts }})
	cl := c.Client(t, func(o *client.Options) { o.Transports = ts })
	ctx := ctxT(t, 2*time.Minute)
	if err := cl.MakeBucket(ctx, "small"); err != nil {
		t.Fatal(err)
	}
	// Several puts at once, so that frames go to the client while earlier
	// bodies are still out to the replicas.
	putConcurrently(ctx, t, c, cl, "small", 8, 16, func(w, i int) []byte { return osdtest.Payload(1<<10+i, uint64(w*16+i)) }, nil)
	if st := tr.Stats(); (st.SharedRecvBufs > 0) == cfg.NoSharedRecv {
		t.Fatalf("links on the shared pool: %v, want %v (%+v)", st.SharedRecvBufs > 0, !cfg.NoSharedRecv, st)
	}
}

// putConcurrently puts writers × each objects into bucket, obj<w>.<i>
// with body(w, i), the writers at once, and checks that every replica
// has each; describe, if not nil, adds to the failure of a put.
func putConcurrently(ctx context.Context, t *testing.T, c *osdtest.Cluster, cl *client.Client, bucket string, writers, each int, body func(w, i int) []byte, describe func() string) {
	t.Helper()
	var g errgroup.Group
	for w := range writers {
		g.Go(func() error {
			for i := range each {
				key := fmt.Sprintf("obj%d.%d", w, i)
				if _, err := osdtest.Put(ctx, cl, bucket, key, body(w, i), client.PutOptions{}); err != nil {
					return fmt.Errorf("put %s: %w", key, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if describe != nil {
			t.Fatalf("%v (%s)", err, describe())
		}
		t.Fatal(err)
	}
	for w := range writers {
		for i := range each {
			replicasHave(t, c, bucket, fmt.Sprintf("obj%d.%d", w, i), body(w, i))
		}
	}
}
