package osd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// bucketsAway is a cluster of four OSDs where one, away, is stopped and
// taken out while buckets change, then comes back with the map it had.
type bucketsAway struct {
	c         *osdtest.Cluster
	ctx       context.Context
	cl        *client.Client
	pool      *osdpb.Pool
	away      uint32
	out, back *placement.Map
}

// newBucketsAway starts the cluster and picks away: the meta PG's primary
// (with every OSD in: it leads the meta PG again when it returns) or
// another OSD.
func newBucketsAway(t *testing.T, metaPrimary bool) *bucketsAway {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16})
	b := &bucketsAway{c: c, ctx: ctxT(t, 2*time.Minute), cl: c.Client(t, nil)}
	b.pool, _ = c.Map.PoolByName(placement.DefaultPoolName)
	p, _ := c.Map.Primary(b.pool.Id, placement.MetaPG)
	b.away = (p + 1) % uint32(len(c.OSDs))
	if metaPrimary {
		b.away = p
	}
	var err error
	if b.out, err = c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[b.away].Up, pb.Osds[b.away].In = false, false }); err != nil {
		t.Fatal(err)
	}
	if b.back, err = b.out.With(func(pb *osdpb.ClusterMap) { pb.Osds[b.away].Up, pb.Osds[b.away].In = true, true }); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.back.Primary(b.pool.Id, placement.MetaPG); (got == b.away) != metaPrimary {
		t.Fatalf("the meta PG's primary is osd.%d when osd.%d is back", got, b.away)
	}
	return b
}

// leave stops away and has the others adopt the map without it.
func (b *bucketsAway) leave(t *testing.T) {
	t.Helper()
	b.c.StopOSD(b.away)
	b.adopt(t, b.out)
}

// adopt has every running OSD adopt m.
func (b *bucketsAway) adopt(t *testing.T, m *placement.Map) {
	t.Helper()
	for id, o := range b.c.OSDs {
		if o != nil {
			if err := o.AdoptMap(m); err != nil {
				t.Fatalf("osd.%d: %v", id, err)
			}
		}
	}
}

// settled reports whether recovery is over: on every PG of the pool and
// on the meta PG, each member's log ends where its primary's does, and
// the meta PG's primary serves.
func (b *bucketsAway) settled(t *testing.T) bool {
	t.Helper()
	mp := b.c.OSDs[0].Map()
	at := func(id, sid uint32) *osdpb.Version {
		last, _, err := b.c.OSDs[id].Store().PGInfo(b.ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	same := func(sid uint32, set []uint32) bool {
		for _, id := range set[1:] {
			if !proto.Equal(at(id, sid), at(set[0], sid)) {
				return false
			}
		}
		return true
	}
	if !same(placement.MetaPG, mp.ActingSet(b.pool.Id, placement.MetaPG)) {
		return false
	}
	for seed := range b.pool.PgCount {
		if !same(b.pool.Id<<16|seed, mp.ActingSet(b.pool.Id, seed)) {
			return false
		}
	}
	_, err := b.cl.ListBuckets(b.ctx)
	return err == nil
}

// ledPG is a PG of pool that OSD id, who in words, leads under m; the
// test is skipped when it leads none.
func ledPG(t *testing.T, m *placement.Map, pool *osdpb.Pool, id uint32, who string) uint32 {
	t.Helper()
	for p, role := range m.PGsOf(pool.Id, id) {
		if role.IsPrimary() {
			return p
		}
	}
	t.Skipf("%s leads no PG in this placement", who)
	return 0
}

// keyInPG is a key of bucket in pool's PG seed, other than not.
func keyInPG(t *testing.T, pool *osdpb.Pool, bucket string, seed uint32, not string) string {
	t.Helper()
	for i := range 100000 {
		if k := fmt.Sprintf("obj%d", i); k != not && placement.PGOf(pool, bucket, k) == seed {
			return k
		}
	}
	t.Fatalf("no key of %s in pg %x", bucket, seed)
	return ""
}

// metaCatchUpHold holds OSD id's catch-up of the meta PG
// (RecoveryStarting) from its start until release: it keeps open the
// window in which that OSD's copy of the bucket records is behind.
type metaCatchUpHold struct {
	held, let chan struct{}
	letOnce   sync.Once
}

func holdMetaCatchUp(t *testing.T, id uint32) *metaCatchUpHold {
	h := &metaCatchUpHold{held: make(chan struct{}), let: make(chan struct{})}
	var heldOnce sync.Once
	osd.RecoveryStarting.Set(func(osdID, sid uint32) error {
		if osdID == id && sid == placement.MetaPG {
			heldOnce.Do(func() { close(h.held) })
			<-h.let
		}
		return nil
	})
	t.Cleanup(func() {
		osd.RecoveryStarting.Set(nil)
		h.release()
	})
	return h
}

// started waits until the catch-up of who (the OSD, in words) started.
func (h *metaCatchUpHold) started(ctx context.Context, t *testing.T, who string) {
	t.Helper()
	select {
	case <-h.held:
	case <-ctx.Done():
		t.Fatalf("%s did not start catching up on the meta PG", who)
	}
}

func (h *metaCatchUpHold) release() { h.letOnce.Do(func() { close(h.let) }) }

// TestDeletedBucketStaysDeleted: a bucket deleted (or deleted and made
// again) while an OSD holding its record was out stays deleted when the
// OSD comes back with its stale copy: peering and recovery roll the
// delete forward on it, and no member (nor the client) sees the bucket
// again, whether the returning OSD leads the meta PG again or not.
func TestDeletedBucketStaysDeleted(t *testing.T) { forMetaRoles(t, testDeletedBucketStaysDeleted) }

// forMetaRoles runs f with an OSD that is the meta PG's primary coming
// back (metaPrimary), then with one that is not.
func forMetaRoles(t *testing.T, f func(t *testing.T, metaPrimary bool)) {
	for _, metaPrimary := range []bool{true, false} {
		name := "meta replica"
		if metaPrimary {
			name = "meta primary"
		}
		t.Run(name, func(t *testing.T) { f(t, metaPrimary) })
	}
}

func testDeletedBucketStaysDeleted(t *testing.T, metaPrimary bool) {
	b := newBucketsAway(t, metaPrimary)
	ctx, cl := b.ctx, b.cl
	for _, name := range []string{"doomed", "reborn", "kept"} {
		if err := cl.MakeBucket(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := osdtest.Put(ctx, cl, "reborn", "old", []byte("before"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := b.c.OSDs[b.away].Store().HeadBucket(ctx, "reborn")
	if err != nil {
		t.Fatal(err)
	}

	b.leave(t)
	if err := cl.RemoveBucket(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveObject(ctx, "reborn", "old"); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveBucket(ctx, "reborn"); err != nil {
		t.Fatal(err)
	}
	if err := cl.MakeBucket(ctx, "reborn"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "reborn", "new", []byte("after"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	// Back, with the map it had when it stopped: it learns the newer ones
	// from its peers.
	b.adopt(t, b.back)
	b.c.StartOSD(b.away)
	osdtest.Eventually(t, 30*time.Second, "recovery to end", func() bool { return b.settled(t) })

	for id, o := range b.c.OSDs {
		if _, err := o.Store().HeadBucket(ctx, "doomed"); err == nil {
			t.Errorf("osd.%d holds the deleted bucket's record", id)
		}
		info, err := o.Store().HeadBucket(ctx, "reborn")
		if err != nil || info.CreatedUnixNano == before.CreatedUnixNano {
			t.Errorf("osd.%d: the bucket made again is %v, %v (the old one was created at %d)", id, info, err, before.CreatedUnixNano)
		}
		if _, err := o.Store().Head(ctx, "reborn", "old"); err == nil {
			t.Errorf("osd.%d holds an object of the deleted bucket's first life", id)
		}
	}
	buckets, err := cl.ListBuckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, bi := range buckets {
		names = append(names, bi.Name)
	}
	if !slices.Equal(names, []string{"kept", "reborn"}) {
		t.Errorf("buckets %v, want [kept reborn]", names)
	}
	if _, err := cl.StatBucket(ctx, "doomed"); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Errorf("head of the deleted bucket: %v, want NoSuchBucket", err)
	}

	// Every OSD vouches for its buckets itself again: a write asks the
	// meta PG's primary nothing (its sync after the map change made every
	// member's copy current).
	metaAt, _ := b.back.Primary(b.pool.Id, placement.MetaPG)
	headBuckets := func() uint64 {
		for _, op := range b.c.OSDs[metaAt].Stats().Ops {
			if op.Op == "head_bucket" {
				return op.Count
			}
		}
		return 0
	}
	for id := range b.c.OSDs {
		key := ""
		for i := 0; key == "" && i < 100000; i++ {
			k := fmt.Sprintf("obj%d", i)
			if p, _ := b.back.Primary(b.pool.Id, placement.PGOf(b.pool, "kept", k)); p == uint32(id) {
				key = k
			}
		}
		osdtest.Eventually(t, 10*time.Second, fmt.Sprintf("a put at osd.%d that asks nobody about its bucket", id), func() bool {
			asked := headBuckets()
			if _, err := osdtest.Put(ctx, cl, "kept", key, []byte("vouched"), client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			return headBuckets() == asked
		})
	}
	var keys []string
	for o, err := range cl.ListObjects(ctx, "reborn", client.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	if !slices.Equal(keys, []string{"new"}) {
		t.Errorf("the bucket made again holds %v, want [new]", keys)
	}
}

// TestPutToDeletedBucketAtReturningOSD: an OSD back from being out leads a
// PG before its copy of the bucket records has caught up, and that copy
// still has a bucket deleted meanwhile. A put to that bucket through it
// must not be acknowledged (it would store an object in a bucket that is
// gone). And no OSD may take the bucket's record back from it: before it
// left, it applied a put to the bucket that no replica received, which
// its PG's replicas now copy from it (its log is the newest); they have
// no such bucket, and must not copy the record along with the object.
// The test holds the returning OSD's catch-up of the meta PG
// (RecoveryStarting) to keep the window open.
func TestPutToDeletedBucketAtReturningOSD(t *testing.T) {
	forMetaRoles(t, testPutToDeletedBucketAtReturningOSD)
}

func testPutToDeletedBucketAtReturningOSD(t *testing.T, metaPrimary bool) {
	b := newBucketsAway(t, metaPrimary)
	ctx, cl := b.ctx, b.cl
	for _, name := range []string{"doomed", "kept"} {
		if err := cl.MakeBucket(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// A PG the returning OSD leads, and a key of each bucket in it.
	seed := ledPG(t, b.back, b.pool, b.away, "the returning OSD")
	keyIn := func(bucket, not string) string { return keyInPG(t, b.pool, bucket, seed, not) }
	doomedKey, keptKey := keyIn("doomed", ""), keyIn("kept", "")
	ghostKey := keyIn("doomed", doomedKey)
	if _, err := osdtest.Put(ctx, cl, "kept", keptKey, []byte("known"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	// The returning OSD stops just after it applied, as the PG's primary,
	// a put to the bucket that no replica received (an entry the PG's
	// copies then roll forward from it when it returns, its copy being the
	// newest).
	b.c.StopOSD(b.away)
	sid, err := placement.PGID{Pool: b.pool.Id, Seed: seed}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	applyAlone(ctx, t, b.c, b.away, sid, "doomed", ghostKey, []byte("applied by the primary alone"))
	// The bucket is empty as far as the OSDs that are up know.
	b.adopt(t, b.out)
	if err := cl.RemoveBucket(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}

	catchUp := holdMetaCatchUp(t, b.away)
	b.adopt(t, b.back)
	back := b.c.StartOSD(b.away)
	catchUp.started(ctx, t, "the returning OSD")
	if _, err := back.Store().HeadBucket(ctx, "doomed"); err != nil {
		t.Fatalf("the returning OSD lost the record before its catch-up: the test reproduces nothing (%v)", err)
	}
	// A read goes through once it serves the PG (a write may wait for the
	// catch-up: see below).
	osdtest.Eventually(t, 30*time.Second, "the returning OSD to serve its pg", func() bool {
		_, _, err := osdtest.Get(ctx, cl, "kept", keptKey, client.GetOptions{})
		return err == nil
	})
	if got := cl.Map().Epoch(); got != b.back.Epoch() {
		t.Fatalf("client at epoch %d, want %d", got, b.back.Epoch())
	}
	quick := b.c.Client(t, func(o *client.Options) { o.RetryFor = 500 * time.Millisecond })
	// A write to a bucket that exists goes through when the meta PG's
	// primary can vouch for the bucket; when the returning OSD is that
	// primary, nobody can until it has caught up.
	if metaPrimary {
		_, err = osdtest.Put(ctx, quick, "kept", keptKey, []byte("vouched"), client.PutOptions{})
	} else {
		_, err = osdtest.Put(ctx, cl, "kept", keptKey, []byte("vouched"), client.PutOptions{})
	}
	if metaPrimary && !errors.Is(err, client.ErrServiceUnavailable) || !metaPrimary && err != nil {
		t.Errorf("put to a bucket that exists while the returning OSD catches up: %v", err)
	}
	if _, err := osdtest.Put(ctx, quick, "doomed", doomedKey, []byte("ghost"), client.PutOptions{}); err == nil {
		t.Error("a put to the deleted bucket was acknowledged by the returning OSD")
	} else if !errors.Is(err, client.ErrNoSuchBucket) && !errors.Is(err, client.ErrServiceUnavailable) {
		t.Errorf("put to the deleted bucket: %v, want NoSuchBucket or ServiceUnavailable", err)
	}

	catchUp.release()
	// A write to the PG brings a replica whose catch-up failed (it could
	// not learn about the bucket then) to try again.
	osdtest.Eventually(t, 30*time.Second, "a put to the returning OSD's pg", func() bool {
		_, err := osdtest.Put(ctx, cl, "kept", keptKey, []byte("after"), client.PutOptions{})
		return err == nil
	})
	osdtest.Eventually(t, 30*time.Second, "recovery to end", func() bool { return b.settled(t) })
	// The returning OSD's copy of its PG and the replicas' agree.
	osdtest.Eventually(t, 30*time.Second, "the put to the deleted bucket to be NoSuchBucket", func() bool {
		_, err := osdtest.Put(ctx, quick, "doomed", doomedKey, []byte("ghost"), client.PutOptions{})
		return errors.Is(err, client.ErrNoSuchBucket)
	})
	for id, o := range b.c.OSDs {
		if _, err := o.Store().HeadBucket(ctx, "doomed"); err == nil {
			t.Errorf("osd.%d holds the deleted bucket's record", id)
		}
		for _, key := range []string{doomedKey, ghostKey} {
			if _, err := o.Store().Head(ctx, "doomed", key); err == nil {
				t.Errorf("osd.%d holds %s, an object of the deleted bucket", id, key)
			}
		}
	}
	if _, err := cl.StatBucket(ctx, "doomed"); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Errorf("head of the deleted bucket: %v, want NoSuchBucket", err)
	}
}

// TestEmptiedBucketDeletesDuringBackfill: a bucket's last object is
// deleted while a newcomer's backfill walk holds a copy it fetched before
// the delete. The newcomer acks the delete unapplied (the walk copies the
// object again before it moves past it), so its store shows the deleted
// object until then; a bucket delete acknowledged-empty by every other OSD
// must not be refused for it (BucketNotEmpty), nor leave the object
// anywhere. The primary holds the walk's next fetch until the bucket is
// gone, keeping the stale copy in place.
func TestEmptiedBucketDeletesDuringBackfill(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16, Tweak: func(cfg *osd.Config) {
		cfg.Store.LogKeep = 4 // the newcomer backfills
	}})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	_, with := newcomerMaps(t, c, newcomer)
	// A PG the newcomer joins as a replica, led by an OSD other than the
	// meta PG's primary: holding the primary's dispatch of the newcomer's
	// messages must not hold the bucket delete's replication.
	metaAt, _ := with.Primary(pool.Id, placement.MetaPG)
	seed, primary := uint32(0), uint32(0)
	for ; ; seed++ {
		if seed == pool.PgCount {
			t.Skip("the newcomer joins no PG as a replica of another OSD than the meta PG's primary in this placement")
		}
		role, ok := with.RoleOf(pool.Id, seed, newcomer)
		primary, _ = with.Primary(pool.Id, seed)
		if ok && !role.IsPrimary() && primary != metaAt {
			break
		}
	}
	cl := c.Client(t, nil)
	const bucket = "emptied"
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < 6; i++ { // more writes than the log keeps
		k := fmt.Sprintf("k%04d", i)
		if placement.PGOf(pool, bucket, k) != seed {
			continue
		}
		keys = append(keys, k)
		if _, err := osdtest.Put(ctx, cl, bucket, k, []byte("doomed "+k), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	last := slices.Max(keys) // the walk's last object: only this bucket has objects in the PG

	var holding atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	osd.ClusterReceived.Set(func(id, from uint32, mt osdpb.MsgType) bool {
		if id == primary && from == newcomer && mt == osdpb.MsgType_MSG_PG_BACKFILL && holding.Load() {
			heldOnce.Do(func() { close(held) })
			<-release // the primary's dispatch of the newcomer's messages waits here
		}
		return false
	})
	var fired atomic.Bool
	osd.BackfillFetched.Set(func(b, key string) {
		if b != bucket || key != last || !fired.CompareAndSwap(false, true) {
			return
		}
		// The walk fetched the last object; empty the bucket before it
		// installs that copy.
		for _, k := range keys {
			if err := cl.RemoveObject(ctx, bucket, k); err != nil {
				t.Error(err) // in the hook: no FailNow off the test goroutine
			}
		}
		holding.Store(true)
	})
	t.Cleanup(func() {
		unhold()
		osd.ClusterReceived.Set(nil)
		osd.BackfillFetched.Set(nil)
	})
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatalf("the newcomer's walk never fetched %s/%s again after its delete", bucket, last)
	}
	if t.Failed() {
		return
	}
	st := c.OSDs[newcomer].Store()
	osdtest.Eventually(t, 30*time.Second, "the newcomer to install its stale copy", func() bool {
		_, err := st.Head(ctx, bucket, last)
		return err == nil
	})

	if err := cl.RemoveBucket(ctx, bucket); err != nil {
		t.Fatalf("deleting the emptied bucket while the newcomer's walk holds a stale copy of its last object: %v", err)
	}
	unhold()
	osdtest.Eventually(t, time.Minute, "the newcomer's backfill to end", func() bool {
		b, err := st.PGBackfilling(ctx, storePGOf(t, pool, seed))
		return err == nil && !b
	})
	for id, o := range c.OSDs {
		if _, err := o.Store().HeadBucket(ctx, bucket); err == nil {
			t.Errorf("osd.%d holds the deleted bucket's record", id)
		}
		if _, err := o.Store().Head(ctx, bucket, last); err == nil {
			t.Errorf("osd.%d holds %s/%s, deleted with its bucket", id, bucket, last)
		}
	}
}

// storePGOf is pool's PG seed as the store numbers it.
func storePGOf(t *testing.T, pool *osdpb.Pool, seed uint32) uint32 {
	t.Helper()
	sid, err := placement.PGID{Pool: pool.Id, Seed: seed}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	return sid
}

// TestBucketNotEmptyWhereverItsObjectIs: one object keeps its bucket from
// being deleted whether its PG is led by the meta PG's primary (which
// checks its own PGs) or by another OSD (which it asks), and the bucket
// goes once the object does.
func TestBucketNotEmptyWhereverItsObjectIs(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	metaAt, _ := c.Map.Primary(pool.Id, placement.MetaPG)
	cl := c.Client(t, nil)
	const bucket = "holder"
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for _, atMeta := range []bool{true, false} {
		key := ""
		for i := 0; key == ""; i++ {
			k := fmt.Sprintf("obj%d", i)
			if p, _ := c.Map.Primary(pool.Id, placement.PGOf(pool, bucket, k)); (p == metaAt) == atMeta {
				key = k
			}
		}
		if _, err := osdtest.Put(ctx, cl, bucket, key, []byte("kept"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cl.RemoveBucket(ctx, bucket); !errors.Is(err, client.ErrBucketNotEmpty) {
			t.Errorf("deleting a bucket holding %s (its pg led by the meta pg's primary: %v): %v, want BucketNotEmpty", key, atMeta, err)
		}
		if err := cl.RemoveObject(ctx, bucket, key); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.RemoveBucket(ctx, bucket); err != nil {
		t.Fatalf("deleting the emptied bucket: %v", err)
	}
}
