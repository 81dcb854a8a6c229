package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestConcurrentPutsToOneKeyKeepTheirOrder: a PG's puts are applied one
// behind the other while earlier ones are still syncing (osd/write.go,
// whenDurable). Puts racing to one key must still land in one order, the
// PG log's, on every member: each member's log lists the key's puts in
// the same order, and every member, and a get, hold the body of the last.
func TestConcurrentPutsToOneKeyKeepTheirOrder(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3})
	cl := c.Client(t, nil)
	ctx := ctxT(t, 60*time.Second)
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	const puts = 32
	var wg sync.WaitGroup
	errs := make(chan error, puts)
	for i := range puts {
		wg.Go(func() {
			_, err := osdtest.Put(ctx, cl, "bkt", "k", osdtest.Payload(4<<10, uint64(i)), client.PutOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "bkt", "k")
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	// The order of the key's puts in each member's log, by body CRC32C.
	var order []uint32
	for _, id := range c.Map.ActingSet(pool.Id, pg) {
		entries, _, err := c.OSDs[id].Store().LogAfter(context.Background(), sid, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint32
		for _, e := range entries {
			if e.Kind == osdpb.OpKind_OP_PUT && e.Key == "k" {
				got = append(got, e.Meta.GetCrc32C())
			}
		}
		if len(got) != puts {
			t.Fatalf("osd.%d: %d puts of k in the log, want %d", id, len(got), puts)
		}
		if order == nil {
			order = got
		}
		for i := range got {
			if got[i] != order[i] {
				t.Fatalf("osd.%d applied k's puts in another order than the primary: put %d has CRC %08x, not %08x", id, i, got[i], order[i])
			}
		}
	}
	body, _, err := osdtest.Get(ctx, cl, "bkt", "k", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, last := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)), order[len(order)-1]; got != last {
		t.Fatalf("get returns the put with CRC %08x, not the last one in the log (%08x)", got, last)
	}
	replicasHave(t, c, "bkt", "k", body)
}

// TestAckedPutsSurvivePowerLoss: with puts pipelined behind their WAL syncs
// (whenDurable), a put the client has its reply for is synced on every
// member. Each OSD's store runs on Pebble's crashable in-memory filesystem;
// while 16 puts stay in flight, the test cuts the power of every member at
// once, keeping nothing that was not synced, and each member must hold
// every put acknowledged before the cut, whole.
func TestAckedPutsSurvivePowerLoss(t *testing.T) {
	fss := make([]*vfs.MemFS, 3)
	for i := range fss {
		fss[i] = vfs.NewCrashableMem()
	}
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Tweak: func(cfg *osd.Config) {
		cfg.Store = store.WithFSForTest(cfg.Store, slowSyncFS{fss[cfg.ID]})
	}})
	cl := c.Client(t, nil)
	ctx := ctxT(t, 60*time.Second)
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked []int // put numbers whose reply came
		next  atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	errs := make(chan error, 16)
	ackc := make(chan struct{}, 1) // a put was acknowledged
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				n := int(next.Add(1))
				if _, err := osdtest.Put(ctx, cl, "bkt", fmt.Sprintf("k%d", n), osdtest.Payload(4<<10, uint64(n)), client.PutOptions{}); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked = append(acked, n)
				mu.Unlock()
				select {
				case ackc <- struct{}{}:
				default:
				}
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for round := range 8 {
		// Cut right after an ack, when more came (progress, not time).
		for target := 20 * (round + 1); ; {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= target {
				break
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-ackc:
			}
		}
		// The puts acknowledged last before the cut: those whose syncs
		// were the latest (earlier ones a previous round checked).
		mu.Lock()
		before := append([]int(nil), acked[max(0, len(acked)-32):]...)
		mu.Unlock()
		clones := make([]*vfs.MemFS, len(fss))
		for i, fs := range fss {
			clones[i] = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		}
		for id, clone := range clones {
			cfg := c.Config(uint32(id))
			opts := store.WithFSForTest(cfg.Store, clone)
			opts.Dir = filepath.Join(cfg.DataDir, "store")
			s, err := store.Open(context.Background(), opts)
			if err != nil {
				t.Fatalf("round %d: osd.%d after the power cut: %v", round, id, err)
			}
			for _, n := range before {
				_, body, err := s.ReadRange(context.Background(), "bkt", fmt.Sprintf("k%d", n), 0, -1, nil)
				if err != nil || !bytes.Equal(body, osdtest.Payload(4<<10, uint64(n))) {
					s.Close()
					t.Fatalf("round %d: osd.%d lost acknowledged put k%d to the power cut: %d bytes, %v", round, id, n, len(body), err)
				}
			}
			s.Close()
		}
	}
}

// slowSyncFS makes each sync wait a while before it starts, as a disk
// would take its time: a put acknowledged before its sync ended would
// reach the client, and the test's power cut, before the sync.
type slowSyncFS struct{ vfs.FS }

func (fs slowSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{f}, nil
}

func (fs slowSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{f}, nil
}

type slowSyncFile struct{ vfs.File }

const diskSync = time.Millisecond // the disk's time for a sync (not a wait for state)

func (f slowSyncFile) Sync() error {
	time.Sleep(diskSync)
	return f.File.Sync()
}

func (f slowSyncFile) SyncData() error {
	time.Sleep(diskSync)
	return f.File.SyncData()
}

func (f slowSyncFile) SyncTo(n int64) (bool, error) {
	time.Sleep(diskSync)
	return f.File.SyncTo(n)
}
