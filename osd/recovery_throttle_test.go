package osd_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestRecoveryThrottle: an OSD that comes in backfills the PGs it joins as
// a replica no faster than RecoveryBytesPerSec. The objects are on the
// other OSDs; the newcomer, throttled to 2 MiB/s, must take at least the
// time its cap allows for them (minus one burst), and end with every one.
func TestRecoveryThrottle(t *testing.T) {
	const rate = 2 << 20
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16, Tweak: func(cfg *osd.Config) {
		cfg.RecoveryBytesPerSec, cfg.RecoveryMaxActive = rate, 1
	}})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const newcomer = 3
	_, with := newcomerMaps(t, c, newcomer)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	// Objects of the PGs the newcomer joins as a replica: a new primary
	// catching up is not throttled (its PG's client I/O waits on it).
	want := map[string][]byte{}
	total := 0
	for i := 0; total < 7<<20; i++ {
		key := fmt.Sprintf("obj%d", i)
		pg := placement.PGOf(pool, "slow", key)
		if role, ok := with.RoleOf(pool.Id, pg, newcomer); !ok || role.IsPrimary() {
			continue
		}
		want[key] = osdtest.Payload(256<<10, uint64(i))
		total += len(want[key])
		if _, err := osdtest.Put(ctx, cl, "slow", key, want[key], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	st := c.OSDs[newcomer].Store()
	for key, data := range want {
		osdtest.Eventually(t, time.Minute, "the newcomer holds "+key, func() bool {
			_, got, err := st.ReadRange(ctx, "slow", key, 0, -1, nil)
			return err == nil && bytes.Equal(got, data)
		})
	}
	took := time.Since(start)
	floor := time.Duration(float64(total-(1<<20)) / rate * float64(time.Second))
	t.Logf("%d objects, %.1f MiB backfilled in %v at a cap of 2 MiB/s (floor %v)", len(want), float64(total)/(1<<20), took.Round(time.Millisecond), floor)
	if took < floor {
		t.Fatalf("backfill took %v, faster than its cap allows (%v)", took, floor)
	}
}

// TestReplicaRecoveryRetriedAfterFailure: a newcomer whose backfill of a
// PG fails with a retriable error (its source could not serve it yet: its
// bucket records were peering) gets that PG after its backoff without any
// further write to it: the primary, told ServiceUnavailable in answer to
// its sync, syncs again. It used to stay behind until the next write.
func TestReplicaRecoveryRetriedAfterFailure(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16})
	ctx := ctxT(t, time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const newcomer = 3
	_, with := newcomerMaps(t, c, newcomer)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "retry"); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := 0; len(want) < 4; i++ {
		key := fmt.Sprintf("obj%d", i)
		pg := placement.PGOf(pool, "retry", key)
		if role, ok := with.RoleOf(pool.Id, pg, newcomer); !ok || role.IsPrimary() {
			continue
		}
		want[key] = osdtest.Payload(4<<10, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "retry", key, want[key], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	failed := map[uint32]bool{}
	starts := map[uint32]int{} // the newcomer's recoveries started, per store PG
	osd.RecoveryStarting.Set(func(id, sid uint32) error {
		mu.Lock()
		defer mu.Unlock()
		if id != newcomer {
			return nil
		}
		if starts[sid]++; failed[sid] {
			return nil
		}
		failed[sid] = true
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg meta is peering (test)")
	})
	t.Cleanup(func() { osd.RecoveryStarting.Set(nil) })
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	st := c.OSDs[newcomer].Store()
	for key, data := range want {
		osdtest.Eventually(t, 30*time.Second, "the newcomer holds "+key, func() bool {
			_, got, err := st.ReadRange(ctx, "retry", key, 0, -1, nil)
			return err == nil && bytes.Equal(got, data)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) == 0 {
		t.Fatal("no recovery of the newcomer failed: the test tested nothing")
	}
	// The data came by a second recovery of its PG: the first failed.
	retried := 0
	for sid := range failed {
		if starts[sid] > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Fatal("the newcomer has its data but recovered no PG twice: the failures failed nothing")
	}
}
