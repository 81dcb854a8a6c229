package mon

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEmbeddedEtcdKeepsFewRaftEntries: the embedded etcd, a lone member,
// keeps few applied raft entries in memory (embeddedCatchUpEntries, not
// etcd's 5000 for the slow followers it has none of): once 600 writes of
// 50 KB (ten stats records a transaction) are in, 600 more leave the heap
// about as it was, where etcd's default kept 33 MB more of them.
func TestEmbeddedEtcdKeepsFewRaftEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("1,200 synced etcd writes")
	}
	e := startTestEtcd(t)
	if got := e.e.Server.Cfg.SnapshotCatchUpEntries; got != embeddedCatchUpEntries {
		t.Fatalf("the embedded etcd keeps %d entries for followers, want %d", got, embeddedCatchUpEntries)
	}
	cli, err := newEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	value := strings.Repeat("x", 5<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	write := func(n int) {
		for i := range n {
			ops := make([]clientv3.Op, 10)
			for j := range ops {
				ops[j] = clientv3.OpPut(fmt.Sprintf("/stats/%d", j), value)
			}
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
	}
	// What etcd keeps of the first 600 writes is its steady state; the
	// next 600 must add nothing much to it.
	write(600)
	before := heap()
	write(600)
	if grew := int64(heap()) - int64(before); grew > 10<<20 {
		t.Fatalf("the heap grew %d MB over 600 more writes of 50 KB: etcd keeps them", grew>>20)
	}
}
