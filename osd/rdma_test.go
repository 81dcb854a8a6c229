//go:build rdma

package osd_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
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
