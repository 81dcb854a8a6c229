package mon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/dirlock"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

func newTestStore(t *testing.T, e *Etcd, prefix string) *mapStore {
	t.Helper()
	cli, err := newEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &mapStore{cli: cli, k: keys{prefix}}
}

// TestConcurrentUpdatesNeverShareAnEpoch: writers on two etcd clients,
// two goroutines each, each adding its own OSDs. Every map change must be
// its own epoch: the history is contiguous, each entry holds the map of
// its epoch, and no writer's change is lost (the last map has every OSD).
func TestConcurrentUpdatesNeverShareAnEpoch(t *testing.T) {
	e := startTestEtcd(t)
	const pfx = "/epochs/"
	stores := []*mapStore{newTestStore(t, e, pfx), newTestStore(t, e, pfx)}
	ctx := ctxFor(t, 60*time.Second)
	if _, _, err := stores[0].create(ctx, &osdpb.ClusterMap{Epoch: 1, Fsid: "fsid-epochs", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 1, PgCount: 4}}}); err != nil {
		t.Fatal(err)
	}
	// The second create finds the cluster and changes nothing.
	if mp, _, err := stores[1].create(ctx, &osdpb.ClusterMap{Epoch: 1, Fsid: "another-fsid", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 1, PgCount: 4}}}); err != nil || mp.FSID() != "fsid-epochs" {
		t.Fatalf("second create: %v, %v", mp, err)
	}
	const writers, each = 4, 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		s := stores[w%2]
		wg.Go(func() {
			for i := range each {
				id := uint32(w*each + i)
				_, err := s.update(ctx, nil, func(pb *osdpb.ClusterMap) (txnExtra, error) {
					pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: id, PublicAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 1000+id),
						ClusterAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 1000+id), Weight: 1, Up: true, In: true})
					return txnExtra{}, nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last, _, err := stores[0].current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1 + writers*each); last.Epoch() != want {
		t.Fatalf("last epoch %d, want %d (a change was lost or two shared an epoch)", last.Epoch(), want)
	}
	if n := len(last.Proto().Osds); n != writers*each {
		t.Fatalf("last map has %d OSDs, want %d", n, writers*each)
	}
	resp, err := stores[0].cli.Get(ctx, stores[0].k.historyPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != int(last.Epoch()) {
		t.Fatalf("history holds %d maps, want %d", len(resp.Kvs), last.Epoch())
	}
	for i, kv := range resp.Kvs {
		mp, err := unmarshalMap(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(i + 1); mp.Epoch() != want || string(kv.Key) != stores[0].k.history(want) {
			t.Fatalf("history entry %s holds epoch %d, want %d", kv.Key, mp.Epoch(), want)
		}
		// Each map is its predecessor plus one OSD.
		if n := len(mp.Proto().Osds); n != i {
			t.Fatalf("epoch %d has %d OSDs, want %d", mp.Epoch(), n, i)
		}
	}
}

func TestHistoryTrimAndGet(t *testing.T) {
	e := startTestEtcd(t)
	s := newTestStore(t, e, "/trim/")
	s.keep = 5
	ctx := ctxFor(t, 30*time.Second)
	if _, _, err := s.create(ctx, &osdpb.ClusterMap{Epoch: 1, Fsid: "fsid-trim", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 1, PgCount: 4}}}); err != nil {
		t.Fatal(err)
	}
	for range 11 {
		if _, err := s.update(ctx, nil, func(pb *osdpb.ClusterMap) (txnExtra, error) { return txnExtra{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for epoch := uint64(1); epoch <= 12; epoch++ {
		mp, err := s.get(ctx, epoch)
		if epoch <= 7 {
			if e, ok := err.(*ops.Error); !ok || e.Status != osdpb.Status_NO_SUCH_KEY {
				t.Fatalf("epoch %d: %v, want NO_SUCH_KEY (trimmed)", epoch, err)
			}
			continue
		}
		if err != nil || mp.Epoch() != epoch {
			t.Fatalf("epoch %d: %v %v", epoch, mp, err)
		}
	}
	if _, err := s.get(ctx, 99); err == nil {
		t.Fatal("a future epoch was found")
	}
	mp, err := s.get(ctx, 0)
	if err != nil || mp.Epoch() != 12 {
		t.Fatalf("newest: %v %v", mp, err)
	}
	_, err = s.get(ctx, 3)
	t.Log(err)

	// A map written past the next epoch (catchUp, after a restore) keeps
	// the history before the jump: the trim counts from the epoch it
	// would have had.
	mp, err = s.update(ctx, nil, func(pb *osdpb.ClusterMap) (txnExtra, error) { return txnExtra{epochAtLeast: 1000}, nil })
	if err != nil || mp.Epoch() != 1000 {
		t.Fatalf("a map written at epoch 1000: %v, %v", mp, err)
	}
	for _, epoch := range []uint64{9, 12, 1000} {
		if mp, err := s.get(ctx, epoch); err != nil || mp.Epoch() != epoch {
			t.Fatalf("epoch %d after the jump: %v %v", epoch, mp, err)
		}
	}
}

// TestFenceStopsAnOldLeader: a write fenced by an election key that is no
// longer ours fails with NOT_LEADER and writes nothing.
func TestFenceStopsAnOldLeader(t *testing.T) {
	e := startTestEtcd(t)
	s := newTestStore(t, e, "/fence/")
	ctx := ctxFor(t, 30*time.Second)
	if _, _, err := s.create(ctx, &osdpb.ClusterMap{Epoch: 1, Fsid: "fsid-fence", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 1, PgCount: 4}}}); err != nil {
		t.Fatal(err)
	}
	put, err := s.cli.Put(ctx, "/fence/election/x", "addr")
	if err != nil {
		t.Fatal(err)
	}
	fence := clientv3.Compare(clientv3.CreateRevision("/fence/election/x"), "=", put.Header.Revision)
	if _, err := s.update(ctx, &fence, func(*osdpb.ClusterMap) (txnExtra, error) { return txnExtra{}, nil }); err != nil {
		t.Fatalf("fenced write while leading: %v", err)
	}
	if _, err := s.cli.Delete(ctx, "/fence/election/x"); err != nil {
		t.Fatal(err)
	}
	_, err = s.update(ctx, &fence, func(*osdpb.ClusterMap) (txnExtra, error) { return txnExtra{}, nil })
	if statusOf(err) != osdpb.Status_NOT_LEADER {
		t.Fatalf("fenced write after losing the key: %v", err)
	}
	if mp, _, _ := s.current(ctx); mp.Epoch() != 2 {
		t.Fatalf("epoch %d after a refused write", mp.Epoch())
	}
}

// TestGetMapCommand: "get map" through a mon, any epoch still kept.
func TestGetMapCommand(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, m.Addr())
	mustBoot(t, c, bootOf(0))
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "get map", Epoch: 1})
	if rep.Map.GetEpoch() != 1 || len(rep.Map.Osds) != 0 {
		t.Fatalf("get map 1: %v", rep.Map)
	}
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "get map"})
	if rep.Map.GetEpoch() != 2 || !proto.Equal(rep.Map, m.Map().Proto()) {
		t.Fatalf("get map (newest): %v", rep.Map)
	}
	if _, err := c.Command(context.Background(), &osdpb.MonCommand{Prefix: "get map", Epoch: 50}); statusOf(err) != osdpb.Status_NO_SUCH_KEY {
		t.Fatalf("get map 50: %v", err)
	}
}

// TestStartSaysItWaitsForEtcd: a mon whose etcd does not answer says so,
// naming the endpoints, while it waits, and gives up with its context.
func TestStartSaysItWaitsForEtcd(t *testing.T) {
	defer func(d time.Duration) { etcdWaitNotice = d }(etcdWaitNotice)
	etcdWaitNotice = 50 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close() // nothing answers there now
	var logs lockedBuffer
	cfg := Config{NoAuth: true, Name: "a", Listen: "tcp://127.0.0.1:0", Etcd: []string{endpoint},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := Start(ctx, cfg)
	if err == nil {
		m.Close(context.Background())
		t.Fatal("a mon started with no etcd")
	}
	if !strings.Contains(logs.String(), "waiting for etcd") || !strings.Contains(logs.String(), endpoint) {
		t.Fatalf("the mon waited without saying so (err %v); its log:\n%s", err, logs.String())
	}
}

// TestStartEtcdRefusesDirInUse: a second embedded etcd on a directory one
// is running in fails at once, naming it (etcd's own database lock waited
// for ever, and `osprey mon --embed-etcd` hung), and the directory is free
// again once the first is closed, with its data.
func TestStartEtcdRefusesDirInUse(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := StartEtcd(ctx, dir, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	cli, err := newEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	cli.Close()

	// A context that would end a hang: the refusal must come before it.
	hang, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = StartEtcd(hang, dir, testLogger())
	var inUse *dirlock.InUseError
	if !errors.As(err, &inUse) || inUse.Dir != dir || inUse.PID != os.Getpid() {
		t.Fatalf("second StartEtcd on %s: %v, want a *dirlock.InUseError naming it and this process", dir, err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the directory", err)
	}

	e.Close()
	e, err = StartEtcd(ctx, dir, testLogger())
	if err != nil {
		t.Fatalf("StartEtcd after the first closed: %v", err)
	}
	cli, err = newEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(ctx, "k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("after the restart k = %v (err %v), want the first server's v", r, err)
	}
}
