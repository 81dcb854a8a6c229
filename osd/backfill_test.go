package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestWritesGoOnDuringBackfill: an OSD comes in as a replica of a PG full
// of objects, and its backfill is throttled to take seconds. Writes to the
// PG (new objects before and after every existing key, an overwrite, a
// delete) must be acknowledged while the backfill still runs; holding them
// until it ended stalled a PG's writes for its whole backfill. When it
// ends, the newcomer's copy equals the primary's, object for object.
func TestWritesGoOnDuringBackfill(t *testing.T) {
	const rate = 1 << 20
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.RecoveryBytesPerSec, cfg.RecoveryMaxActive = rate, 1
		cfg.Store.LogKeep = 4 // the log cannot catch the newcomer up: it backfills
	}})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const newcomer = 3
	_, with := newcomerMaps(t, c, newcomer)
	// One PG the newcomer joins as a replica (the only one with data, so
	// the throttle is all its).
	seed, sid := replicaPG(t, pool, with, newcomer)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "bfill"); err != nil {
		t.Fatal(err)
	}
	keysOf := func(prefix string, n int) []string {
		var keys []string
		for i := 0; len(keys) < n; i++ {
			if k := fmt.Sprintf("%s%04d", prefix, i); placement.PGOf(pool, "bfill", k) == seed {
				keys = append(keys, k)
			}
		}
		return keys
	}
	want := map[string][]byte{}
	put := func(key string, n int, gen uint64) {
		t.Helper()
		want[key] = osdtest.Payload(n, gen)
		if _, err := osdtest.Put(ctx, cl, "bfill", key, want[key], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// 4 MiB to walk at 1 MiB/s.
	middle := keysOf("m", 16)
	for i, k := range middle {
		put(k, 256<<10, uint64(i))
	}
	primary, _ := with.Primary(pool.Id, seed)
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	st := c.OSDs[newcomer].Store()
	backfilling := func() bool {
		b, err := st.PGBackfilling(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	osdtest.Eventually(t, 30*time.Second, "the newcomer's backfill of the PG begins", backfilling)
	// The walk goes in key order: once it holds middle[1], it has passed
	// middle[0] and every "a" key.
	osdtest.Eventually(t, 30*time.Second, "the walk passes the first objects", func() bool {
		_, err := st.Head(ctx, "bfill", middle[1])
		return err == nil
	})

	// Writes behind the walk (applied at once) and ahead of it (copied
	// later): new objects, overwrites, a delete.
	for i, k := range keysOf("a", 3) {
		put(k, 1000+i, 100+uint64(i))
	}
	put(middle[0], 4000, 400)
	for i, k := range keysOf("z", 3) {
		put(k, 2000+i, 200+uint64(i))
	}
	put(middle[len(middle)-1], 3000, 300)
	if err := cl.RemoveObject(ctx, "bfill", middle[len(middle)-2]); err != nil {
		t.Fatal(err)
	}
	delete(want, middle[len(middle)-2])
	if !backfilling() {
		t.Fatal("the writes were acknowledged only after the backfill ended: they waited for it")
	}
	t.Log("9 writes acknowledged while the newcomer was backfilling")

	osdtest.Eventually(t, time.Minute, "the backfill ends", func() bool { return !backfilling() })
	// The newcomer's copy is the primary's: every object, and nothing
	// else. A write acked during the walk may still be on its way to the
	// replica's log as a later RepOp; poll until the copies agree.
	ps := c.OSDs[primary].Store()
	list := func(s *store.Store) []string {
		var keys []string
		for e, err := range s.PGObjects(ctx, sid, "", "") {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, e.Key)
		}
		return keys
	}
	osdtest.Eventually(t, 30*time.Second, "the newcomer's copy equals the primary's", func() bool {
		mine, theirs := list(st), list(ps)
		if !slices.Equal(mine, theirs) || len(mine) != len(want) {
			return false
		}
		for key, data := range want {
			_, got, err := st.ReadRange(ctx, "bfill", key, 0, -1, nil)
			if err != nil || !bytes.Equal(got, data) {
				return false
			}
		}
		return true
	})
}

// TestBackfillRecopiesOvertakenObjects: the two races of a write with the
// walk. (1) The walk fetched an object and a write to it is acked before
// the walk installs the older copy; (2) an object is created between the
// walk's position and the next object it fetched (so the walk skips it).
// Both writes are acked unapplied, as ahead of the walk; the walk must copy
// both objects again before it moves past them, or the replica ends with a
// stale object and a missing one while claiming the PG's version.
func TestBackfillRecopiesOvertakenObjects(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.Store.LogKeep = 4 // the newcomer backfills
	}})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const newcomer = 3
	_, with := newcomerMaps(t, c, newcomer)
	seed, sid := replicaPG(t, pool, with, newcomer)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "race"); err != nil {
		t.Fatal(err)
	}
	inPG := func(k string) bool { return placement.PGOf(pool, "race", k) == seed }
	var keys []string
	for i := 0; len(keys) < 6; i += 10 {
		if k := fmt.Sprintf("k%04d", i); inPG(k) {
			keys = append(keys, k)
		}
	}
	// A key of the PG between keys[2] and keys[3], not there yet.
	between := ""
	for i := 0; between == ""; i++ {
		if k := fmt.Sprintf("%s-%d", keys[2], i); inPG(k) && k < keys[3] {
			between = k
		}
	}
	want := map[string][]byte{}
	put := func(key string, gen uint64) {
		want[key] = osdtest.Payload(3000+int(gen), gen)
		if _, err := osdtest.Put(ctx, cl, "race", key, want[key], client.PutOptions{}); err != nil {
			t.Error(err) // in the hook: no FailNow off the test goroutine
		}
	}
	for i, k := range keys {
		put(k, uint64(i))
	}
	var fired atomic.Int32
	osd.BackfillFetched.Set(func(bucket, key string) {
		if bucket != "race" {
			return
		}
		switch key {
		case keys[2]: // (1): overtake the copy in flight
			put(keys[2], 100)
			fired.Add(1)
		case keys[3]: // (2): create an object the walk has just skipped
			put(between, 200)
			fired.Add(1)
		}
	})
	t.Cleanup(func() { osd.BackfillFetched.Set(nil) })
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	st := c.OSDs[newcomer].Store()
	osdtest.Eventually(t, time.Minute, "the newcomer's backfill ends with the primary's objects", func() bool {
		if b, err := st.PGBackfilling(ctx, sid); err != nil || b || fired.Load() < 2 {
			return false
		}
		for key, data := range want {
			if _, got, err := st.ReadRange(ctx, "race", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
				return false
			}
		}
		return true
	})
	if t.Failed() {
		return
	}
	for key, data := range want {
		if _, got, err := st.ReadRange(ctx, "race", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
			t.Errorf("newcomer's %s: %v (%d bytes, want %d)", key, err, len(got), len(data))
		}
	}
}

// replicaPG is a PG that newcomer joins as a replica (not its primary) in
// map with, and its store id; the test is skipped when there is none.
func replicaPG(t *testing.T, pool *osdpb.Pool, with *placement.Map, newcomer uint32) (seed, sid uint32) {
	t.Helper()
	for ; seed < pool.PgCount; seed++ {
		if role, ok := with.RoleOf(pool.Id, seed, newcomer); ok && !role.IsPrimary() {
			sid, err := placement.PGID{Pool: pool.Id, Seed: seed}.StoreID()
			if err != nil {
				t.Fatal(err)
			}
			return seed, sid
		}
	}
	t.Skip("the newcomer joins no PG as a replica in this placement")
	return 0, 0
}

// TestBackfillTargetDoesNotCountTowardMinSize: a pool of size 2 and
// min_size 2 moves a PG's replica to an OSD that holds nothing of it. The
// newcomer takes the PG's writes during its backfill, but acks those to
// objects its walk has not reached unapplied, so until the walk ends the
// primary holds the PG's only whole copy: writes are refused, retriably,
// naming the member being backfilled (Ceph's min_size counts no backfill
// target), reads go on, and the PG reports backfilling+degraded+peered.
// Once the backfill ends, writes go on.
func TestBackfillTargetDoesNotCountTowardMinSize(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Size: 2, PGs: 8})
	ctx := ctxT(t, 2*time.Minute)
	const newcomer = 2
	minSize2 := func(pb *osdpb.ClusterMap) {
		for _, p := range pb.Pools {
			p.MinSize = 2
		}
	}
	without, err := c.Map.With(func(pb *osdpb.ClusterMap) { minSize2(pb); pb.Osds[newcomer].In = false })
	if err != nil {
		t.Fatal(err)
	}
	adoptAll(t, c, without)
	with, err := without.With(func(pb *osdpb.ClusterMap) { pb.Osds[newcomer].In = true })
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := with.PoolByName(placement.DefaultPoolName)
	seed, _ := replicaPG(t, pool, with, newcomer)
	primary, _ := with.Primary(pool.Id, seed)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "minsz"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < 4; i++ {
		if k := fmt.Sprintf("k%04d", i); placement.PGOf(pool, "minsz", k) == seed {
			keys = append(keys, k)
		}
	}
	for i, k := range keys[:3] {
		if _, err := osdtest.Put(ctx, cl, "minsz", k, osdtest.Payload(4000, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the walk at its first object until the checks are done.
	releaseOnce := holdWalk(ctx, t, "minsz", func() { adoptAll(t, c, with) })
	defer releaseOnce()

	impatient := c.Client(t, func(o *client.Options) { o.RetryFor = time.Second })
	_, err = osdtest.Put(ctx, impatient, "minsz", keys[3], []byte("one whole copy"), client.PutOptions{})
	var oe *ops.Error
	if !errors.As(err, &oe) || !oe.Retriable() || !strings.Contains(err.Error(), fmt.Sprintf("osd.%d being backfilled", newcomer)) {
		t.Fatalf("a put while the only other member backfills: %v, want a retriable error naming osd.%d being backfilled", err, newcomer)
	}
	t.Logf("put refused: %v", err)
	if got := c.OSDs[primary].PGStateForTest(pool.Id, seed); got != "backfilling+degraded+peered" {
		t.Errorf("the PG reports %q while its only other member backfills, want backfilling+degraded+peered", got)
	}
	// The beacon names it, for the mon's osd ok-to-stop.
	if st := c.OSDs[primary].PGStatForTest(pool.Id, seed); !slices.Equal(st.Filling, []uint32{newcomer}) {
		t.Errorf("the PG's report names %v being backfilled, want [%d]", st.Filling, newcomer)
	}
	if got, _, err := osdtest.Get(ctx, cl, "minsz", keys[0], client.GetOptions{}); err != nil || !bytes.Equal(got, osdtest.Payload(4000, 0)) {
		t.Errorf("a read while the PG is peered: %v", err)
	}

	releaseOnce()
	if _, err := osdtest.Put(ctx, cl, "minsz", keys[3], []byte("two whole copies"), client.PutOptions{}); err != nil {
		t.Fatalf("a put once the backfill can end: %v", err)
	}
	osdtest.Eventually(t, 30*time.Second, "the PG is active+clean, no member being backfilled", func() bool {
		st := c.OSDs[primary].PGStatForTest(pool.Id, seed)
		return st.State == "active+clean" && len(st.Filling) == 0
	})
}

// holdWalk holds the first backfill walk that fetches an object of bucket
// at that object, runs start (which should begin one), and returns once
// the walk is held; release (also called at cleanup, and after a minute
// regardless) lets it go on.
func holdWalk(ctx context.Context, t *testing.T, bucket string, start func()) (release func()) {
	t.Helper()
	held, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	osd.BackfillFetched.Set(func(b, key string) {
		if b != bucket {
			return
		}
		once.Do(func() {
			close(held)
			select {
			case <-released:
			case <-time.After(time.Minute):
			}
		})
	})
	release = sync.OnceFunc(func() { close(released) })
	t.Cleanup(func() { release(); osd.BackfillFetched.Set(nil) })
	start()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatalf("no backfill walk of bucket %s began", bucket)
	}
	return release
}
