package osd_test

import (
	"bytes"
	"fmt"
	"os"
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

// TestRecoveryThrottleLogCatchUp: a replica that missed writes while it
// was down (its old data directory back) catches up from its primaries'
// logs no faster than RecoveryBytesPerSec: the limiter grants every byte
// it copies, which takes at least the time the cap allows (minus one
// burst). The PG's writes go on meanwhile: with the catch-up held after
// its first object, a put to the same PG is acknowledged. (A plain log
// catch-up holds the PG's writes: paced, it would stall them as long.)
func TestRecoveryThrottleLogCatchUp(t *testing.T) {
	const rate = 2 << 20
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) {
		cfg.RecoveryBytesPerSec = rate
	}})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const victim = 1
	replicaOf := func(key string) (pg uint32, ok bool) {
		pg = placement.PGOf(pool, "slow", key)
		role, in := c.Map.RoleOf(pool.Id, pg, victim)
		return pg, in && !role.IsPrimary() // a new primary's catch-up is exempt
	}
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	// A write to every PG first: a copy with nothing would backfill.
	for pg := range pool.PgCount {
		if _, err := osdtest.Put(ctx, cl, "slow", keysInPG(pool, "slow", pg, "seed", 1)[0], []byte("seed"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.StopOSD(victim)
	dir := c.Config(victim).DataDir
	if err := os.CopyFS(dir+".old", os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	c.StartOSD(victim)
	want := map[string][]byte{}
	total := 0
	for i := 0; total < 6<<20; i++ {
		key := fmt.Sprintf("obj%d", i)
		if _, ok := replicaOf(key); !ok {
			continue
		}
		want[key] = osdtest.Payload(256<<10, uint64(i))
		total += len(want[key])
		if _, err := osdtest.Put(ctx, cl, "slow", key, want[key], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Back to the old copy: the victim misses those writes, and the
	// primaries' logs still reach back to it.
	c.StopOSD(victim)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".old", dir); err != nil {
		t.Fatal(err)
	}

	held := make(chan string, 1)
	let := make(chan struct{})
	var letOnce sync.Once
	release := func() { letOnce.Do(func() { close(let) }) }
	var first sync.Once
	osd.BackfillFetched.Set(func(bucket, key string) {
		first.Do(func() {
			held <- key
			<-let
		})
	})
	t.Cleanup(func() {
		osd.BackfillFetched.Set(nil)
		release()
	})
	start := time.Now()
	back := c.StartOSD(victim)
	st := back.Store()
	holdsAll := func() bool {
		for key, data := range want {
			if _, got, err := st.ReadRange(ctx, "slow", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
				return false
			}
		}
		return true
	}
	var heldKey string
	osdtest.Eventually(t, time.Minute, "the catch-up to walk or end", func() bool {
		select {
		case heldKey = <-held:
			return true
		default:
			return holdsAll()
		}
	})
	if heldKey != "" {
		// Held on its first object, the catch-up lets its PG's writes go on.
		pg, _ := replicaOf(heldKey)
		during := keysInPG(pool, "slow", pg, "during", 1)[0]
		want[during] = osdtest.Payload(4<<10, 999)
		_, err := osdtest.Put(ctx, cl, "slow", during, want[during], client.PutOptions{})
		release()
		if err != nil {
			t.Fatalf("a put to pg %d while its catch-up waited: %v", pg, err)
		}
	}
	release()
	for key, data := range want {
		osdtest.Eventually(t, time.Minute, "the victim holds "+key, func() bool {
			_, got, err := st.ReadRange(ctx, "slow", key, 0, -1, nil)
			return err == nil && bytes.Equal(got, data)
		})
	}
	took := time.Since(start)
	// The walk ends as a backfill does: the copy whole (not marked
	// backfilling), its log where its primary's is.
	osdtest.Eventually(t, 30*time.Second, "the victim's copies complete and at their primaries' versions", func() bool {
		for pg := range pool.PgCount {
			if role, in := c.Map.RoleOf(pool.Id, pg, victim); !in || role.IsPrimary() {
				continue
			}
			sid, _ := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
			b, err := st.PGBackfilling(ctx, sid)
			mine, _, err2 := st.PGInfo(ctx, sid)
			primary, _ := c.Map.Primary(pool.Id, pg)
			theirs, _, err3 := c.OSDs[primary].Store().PGInfo(ctx, sid)
			if err != nil || err2 != nil || err3 != nil || b || mine.GetSeq() != theirs.GetSeq() {
				return false
			}
		}
		return true
	})
	paced := back.RecoveryPacedForTest()
	floor := time.Duration(float64(total-(1<<20)) / rate * float64(time.Second))
	t.Logf("%d objects, %.1f MiB caught up in %v at a cap of 2 MiB/s (floor %v); the limiter granted %.1f MiB",
		len(want), float64(total)/(1<<20), took.Round(time.Millisecond), floor, float64(paced)/(1<<20))
	if paced < uint64(total) {
		t.Fatalf("the recovery throttle granted %d bytes, fewer than the %d the catch-up copied", paced, total)
	}
	if took < floor {
		t.Fatalf("catch-up took %v, faster than its cap allows (%v)", took, floor)
	}
	if heldKey == "" {
		t.Fatal("the catch-up copied no object as a walk: a paced catch-up held its PG's writes")
	}
}
