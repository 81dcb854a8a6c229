package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// keysInPG returns n keys of bucket that map to PG pg of pool.
func keysInPG(pool *osdpb.Pool, bucket string, pg uint32, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if placement.PGOf(pool, bucket, k) == pg {
			keys = append(keys, k)
		}
	}
	return keys
}

// copyOf reads OSD id's copy of bucket/key as an entry to install, with
// its version.
func copyOf(t *testing.T, ctx context.Context, o *osd.OSD, bucket, key string) (*osdpb.LogEntry, []byte) {
	t.Helper()
	meta, v, err := o.Store().HeadVersion(ctx, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	_, body, err := o.Store().ReadRange(ctx, bucket, key, 0, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: bucket, Key: key, Meta: meta, Version: v}, body
}

// scrubbedPG is rotCluster with scrubs only by hand (none on a timer) and
// unthrottled, and the PG a test works in: the one "rot"/"seed" maps to,
// its store id, acting set and primary.
func scrubbedPG(t *testing.T) (c *osdtest.Cluster, cl *client.Client, ctx context.Context, pool *osdpb.Pool, pg, sid uint32, acting []uint32, primary *osd.OSD) {
	t.Helper()
	c, cl, ctx, pool = rotCluster(t, func(cfg *osd.Config) {
		cfg.DeepScrubInterval = -1
		cfg.ScrubBytesPerSec = -1
	})
	pg = placement.PGOf(pool, "rot", "seed")
	sid = storePGOf(t, pool, pg)
	acting = c.Map.ActingSet(pool.Id, pg)
	return c, cl, ctx, pool, pg, sid, acting, c.OSDs[acting[0]]
}

// TestScrubCompare: the primary's deep scrub compares its copy with its
// replicas' and finds what no copy's own CRCs can: a replica whose bytes
// changed under CRCs of their own at the same version, an object missing
// on a replica, a replica left at an older version. Each is recorded
// (listed with each copy's state and the authoritative copy), counted,
// and survives nothing but a repair, after which a scrub finds the PG
// clean and every copy equal to the primary's.
func TestScrubCompare(t *testing.T) {
	c, cl, ctx, pool, pg, sid, acting, primary := scrubbedPG(t)
	keys := keysInPG(pool, "rot", pg, "k", 6)
	changed, missing, older, lost, outvoted := keys[0], keys[1], keys[2], keys[4], keys[5] // keys[3] stays intact
	bodies := map[string][]byte{}
	for i, k := range keys {
		bodies[k] = osdtest.Payload(64<<10+i, uint64(10+i))
		if _, err := osdtest.Put(ctx, cl, "rot", k, bodies[k], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := primary.DeepScrub(ctx, pool.Id, pg)
	if err != nil || !res.Compared || res.Inconsistent != 0 {
		t.Fatalf("scrub of agreeing copies: %+v, %v; want compared, none inconsistent", res, err)
	}

	// The older copy: osd acting[2] keeps the first version of `older`.
	oldEntry, oldBody := copyOf(t, ctx, c.OSDs[acting[2]], "rot", older)
	bodies[older] = osdtest.Payload(64<<10+2, 99)
	if _, err := osdtest.Put(ctx, cl, "rot", older, bodies[older], client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.OSDs[acting[2]].Store().InstallObject(ctx, sid, oldEntry, oldBody); err != nil {
		t.Fatal(err)
	}
	// The changed copy: other bytes, with CRCs of their own, at the same
	// version, so that the replica's own scrub finds nothing. The same
	// on the primary of outvoted: the two replicas that agree win.
	change := func(osd uint32, key string) {
		t.Helper()
		e, body := copyOf(t, ctx, c.OSDs[osd], "rot", key)
		body = slices.Clone(body)
		body[1000] ^= 0xff
		e.Meta.Crc32C = crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))
		if err := c.OSDs[osd].Store().InstallObject(ctx, sid, e, body); err != nil {
			t.Fatal(err)
		}
		if res, err := c.OSDs[osd].DeepScrub(ctx, pool.Id, pg); err != nil || res.Damaged != 0 {
			t.Fatalf("the changed osd.%d's own scrub: %+v, %v; want nothing damaged", osd, res, err)
		}
	}
	change(acting[1], changed)
	change(acting[0], outvoted)
	// The missing copy, and one the primary lost: a replica's copy is
	// then the authoritative one.
	if err := c.OSDs[acting[2]].Store().RemoveObject(ctx, sid, "rot", missing); err != nil {
		t.Fatal(err)
	}
	if err := primary.Store().RemoveObject(ctx, sid, "rot", lost); err != nil {
		t.Fatal(err)
	}

	res, err = primary.DeepScrub(ctx, pool.Id, pg)
	if err != nil || !res.Compared || res.Inconsistent != 5 || res.Fixed != 0 {
		t.Fatalf("scrub: %+v, %v; want 5 inconsistent", res, err)
	}
	if n := primary.Stats().ScrubInconsistent; n != 5 {
		t.Fatalf("primary's gauge: %d inconsistent objects, want 5", n)
	}
	id := placement.PGID{Pool: pool.Id, Seed: pg}
	list, err := cl.ListInconsistent(ctx, id)
	if err != nil || len(list.Objects) != 5 || list.Scrubbed.IsZero() {
		t.Fatalf("ListInconsistent: %+v, %v", list, err)
	}
	want := map[string]struct {
		osd, auth uint32
		errs      []string
	}{
		changed:  {acting[1], acting[0], []string{"data_digest_mismatch"}},
		missing:  {acting[2], acting[0], []string{"missing"}},
		older:    {acting[2], acting[0], []string{"data_digest_mismatch", "stale_version"}},
		lost:     {acting[0], acting[1], []string{"missing"}},
		outvoted: {acting[0], acting[1], []string{"data_digest_mismatch"}},
	}
	for _, io := range list.Objects {
		w, ok := want[io.Key]
		if !ok || !slices.Equal(io.Errors, w.errs) || len(io.Shards) != 3 {
			t.Fatalf("listed %s: errors %v, %d shards; want %v", io.Key, io.Errors, len(io.Shards), w.errs)
		}
		for _, sh := range io.Shards {
			if sh.Authoritative != (sh.Osd == w.auth) {
				t.Fatalf("%s: osd.%d authoritative %v; want osd.%d's copy", io.Key, sh.Osd, sh.Authoritative, w.auth)
			}
			if bad := len(sh.Errors) > 0; bad != (sh.Osd == w.osd) {
				t.Fatalf("%s: osd.%d errors %v; want errors on osd.%d only", io.Key, sh.Osd, sh.Errors, w.osd)
			}
		}
	}

	// Nothing but a repair clears it: a second scrub finds the same.
	if res, err = primary.DeepScrub(ctx, pool.Id, pg); err != nil || res.Inconsistent != 5 {
		t.Fatalf("second scrub: %+v, %v", res, err)
	}

	found, repaired, err := cl.RepairPG(ctx, id)
	if err != nil || found != 5 || repaired != 5 {
		t.Fatalf("RepairPG: %d found, %d repaired, %v; want 5, 5", found, repaired, err)
	}
	if res, err = primary.DeepScrub(ctx, pool.Id, pg); err != nil || !res.Compared || res.Inconsistent != 0 {
		t.Fatalf("scrub after the repair: %+v, %v; want clean", res, err)
	}
	if n := primary.Stats().ScrubInconsistent; n != 0 {
		t.Fatalf("primary's gauge after the repair: %d", n)
	}
	if list, err := cl.ListInconsistent(ctx, id); err != nil || len(list.Objects) != 0 {
		t.Fatalf("ListInconsistent after the repair: %+v, %v", list, err)
	}
	for _, k := range keys {
		want, _ := copyOf(t, ctx, c.OSDs[acting[1]], "rot", k)
		for _, o := range acting {
			got, body := copyOf(t, ctx, c.OSDs[o], "rot", k)
			if !proto.Equal(got, want) || !bytes.Equal(body, bodies[k]) {
				t.Fatalf("osd.%d's copy of %s after the repair: %v, want %v", o, k, got, want)
			}
		}
	}
	if _, _, err := cl.RepairPG(ctx, placement.PGID{Pool: 77, Seed: 1}); err == nil {
		t.Fatal("RepairPG of a pool that does not exist: no error")
	}
}

// TestScrubCompareUnderWrites: a primary's scrubs of a PG that clients
// keep writing to (puts and deletes of the same few keys, so that copies
// are caught between versions) report no object inconsistent.
func TestScrubCompareUnderWrites(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) {
		cfg.DeepScrubInterval = -1
		cfg.ScrubBytesPerSec = -1
	})
	pg := placement.PGOf(pool, "rot", "seed")
	primary := c.OSDs[c.Map.ActingSet(pool.Id, pg)[0]]
	keys := keysInPG(pool, "rot", pg, "w", 8)
	for _, k := range keys {
		if _, err := osdtest.Put(ctx, cl, "rot", k, osdtest.Payload(4<<10, 1), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	var writes atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; wctx.Err() == nil; i++ {
				k := keys[(i*4+w)%len(keys)]
				var err error
				if i%5 == 4 {
					err = cl.RemoveObject(wctx, "rot", k)
				} else {
					_, err = osdtest.Put(wctx, cl, "rot", k, osdtest.Payload(4<<10+i%7, uint64(i)), client.PutOptions{})
				}
				if err != nil && wctx.Err() == nil {
					t.Errorf("write %d of %s: %v", i, k, err)
					return
				}
				writes.Add(1)
			}
		})
	}
	compared := 0
	for range 20 {
		res, err := primary.DeepScrub(ctx, pool.Id, pg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Inconsistent != 0 {
			list, _ := cl.ListInconsistent(ctx, placement.PGID{Pool: pool.Id, Seed: pg})
			t.Fatalf("scrub under writes found %d inconsistent: %v", res.Inconsistent, list.Objects)
		}
		if res.Compared {
			compared++
		}
	}
	stop()
	wg.Wait()
	if compared == 0 || writes.Load() < 20 {
		t.Fatalf("%d of 20 scrubs compared, %d writes: the test did not test", compared, writes.Load())
	}
	t.Logf("%d scrubs compared during %d writes", compared, writes.Load())
}

// TestPushRefused: a replica installs a pushed copy only from its PG's
// primary, only of an object of that PG, and never over a newer version
// of its own (a write that came after the scrub looked); it gives its
// scrub map only to the primary.
func TestPushRefused(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) { cfg.DeepScrubInterval = -1 })
	pg := placement.PGOf(pool, "rot", "seed")
	acting := c.Map.ActingSet(pool.Id, pg)
	primary, replica := c.OSDs[acting[0]], acting[1]
	key := keysInPG(pool, "rot", pg, "p", 1)[0]
	if _, err := osdtest.Put(ctx, cl, "rot", key, osdtest.Payload(5000, 1), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	old, oldBody := copyOf(t, ctx, primary, "rot", key)
	body := osdtest.Payload(6000, 2)
	if _, err := osdtest.Put(ctx, cl, "rot", key, body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cur, _ := copyOf(t, ctx, c.OSDs[replica], "rot", key)

	err := primary.PushForTest(ctx, replica, pool.Id, pg, old, oldBody)
	if !errors.Is(err, ops.ErrServiceUnavailable) {
		t.Fatalf("push of an older version: %v; want ServiceUnavailable", err)
	}
	if got, gotBody := copyOf(t, ctx, c.OSDs[replica], "rot", key); !proto.Equal(got, cur) || !bytes.Equal(gotBody, body) {
		t.Fatalf("the replica's copy after a refused push: %v", got)
	}
	other := keysInPG(pool, "rot", (pg+1)%pool.PgCount, "q", 1)[0]
	e := proto.Clone(old).(*osdpb.LogEntry)
	e.Key = other
	if err := primary.PushForTest(ctx, replica, pool.Id, pg, e, oldBody); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Fatalf("push of another PG's object: %v; want InvalidArgument", err)
	}
	// A pushed delete, too, must carry its version and never removes a
	// newer copy.
	del := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: "rot", Key: key}
	if err := primary.PushForTest(ctx, replica, pool.Id, pg, del, nil); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Fatalf("push of a delete without its version: %v; want InvalidArgument", err)
	}
	del.Version = old.Version
	if err := primary.PushForTest(ctx, replica, pool.Id, pg, del, nil); !errors.Is(err, ops.ErrServiceUnavailable) {
		t.Fatalf("push of a delete older than the copy: %v; want ServiceUnavailable", err)
	}
	if got, _ := copyOf(t, ctx, c.OSDs[replica], "rot", key); !proto.Equal(got, cur) {
		t.Fatalf("the replica's copy after a refused delete: %v", got)
	}
	// The current copy, which the primary may push: a replica may not.
	if err := c.OSDs[acting[2]].PushForTest(ctx, replica, pool.Id, pg, cur, body); !errors.Is(err, ops.ErrWrongPrimary) {
		t.Fatalf("push from a replica, not the primary: %v; want WrongPrimary", err)
	}
	if err := primary.PushForTest(ctx, replica, pool.Id, pg, cur, body); err != nil {
		t.Fatalf("the primary's push of the current copy: %v", err)
	}
	// Scrub maps, too, are the primary's to ask for.
	if objs, err := primary.ScrubMapForTest(ctx, replica, pool.Id, pg); err != nil || len(objs) != 1 || objs[0].Key != key || objs[0].Damaged {
		t.Fatalf("the primary's scrub map request: %v, %v", objs, err)
	}
	if _, err := c.OSDs[acting[2]].ScrubMapForTest(ctx, replica, pool.Id, pg); !errors.Is(err, ops.ErrWrongPrimary) {
		t.Fatalf("a replica's scrub map request: %v; want WrongPrimary", err)
	}
}

// TestScrubCompareLostDelete: a copy that a delete missed (its RepOp
// lost) is stale, not authoritative: the primary's PG log holds the
// delete, newer than the copy, so a repair removes the copy (a replica's
// by a pushed delete, the primary's own in place) rather than bring the
// deleted object back everywhere. A copy newer than a logged delete (a
// put after it) stays authoritative: the copy that lacks it gets it.
func TestScrubCompareLostDelete(t *testing.T) {
	c, cl, ctx, pool, pg, sid, acting, primary := scrubbedPG(t)
	keys := keysInPG(pool, "rot", pg, "d", 3)
	onReplica, onPrimary, putAfter := keys[0], keys[1], keys[2]
	stale := map[string]uint32{onReplica: acting[2], onPrimary: acting[0]}
	old := map[string]*osdpb.LogEntry{}
	oldBodies := map[string][]byte{}
	for i, k := range keys {
		if _, err := osdtest.Put(ctx, cl, "rot", k, osdtest.Payload(8<<10+i, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		old[k], oldBodies[k] = copyOf(t, ctx, primary, "rot", k)
		if err := cl.RemoveObject(ctx, "rot", k); err != nil {
			t.Fatal(err)
		}
	}
	body := osdtest.Payload(9<<10, 7)
	if _, err := osdtest.Put(ctx, cl, "rot", putAfter, body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// The lost deletes: one replica, and the primary, still hold the
	// version the delete removed. The put after the delete is lost on a
	// replica, which is left at the delete.
	for k, id := range stale {
		if err := c.OSDs[id].Store().InstallObject(ctx, sid, old[k], oldBodies[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.OSDs[acting[1]].Store().RemoveObject(ctx, sid, "rot", putAfter); err != nil {
		t.Fatal(err)
	}

	res, err := primary.DeepScrub(ctx, pool.Id, pg)
	if err != nil || !res.Compared || res.Inconsistent != 3 {
		t.Fatalf("scrub: %+v, %v; want 3 inconsistent", res, err)
	}
	id := placement.PGID{Pool: pool.Id, Seed: pg}
	list, err := cl.ListInconsistent(ctx, id)
	if err != nil || len(list.Objects) != 3 {
		t.Fatalf("ListInconsistent: %+v, %v", list, err)
	}
	for _, io := range list.Objects {
		var bad, auth uint32
		var errs []string
		if io.Key == putAfter {
			bad, auth, errs = acting[1], acting[0], []string{"missing"}
		} else {
			// The first copy that lacks it, in acting order, stands for the delete.
			bad, auth, errs = stale[io.Key], acting[0], []string{"stale_version"}
			if bad == acting[0] {
				auth = acting[1]
			}
		}
		if !slices.Equal(io.Errors, errs) {
			t.Fatalf("%s: errors %v, want %v", io.Key, io.Errors, errs)
		}
		for _, sh := range io.Shards {
			if sh.Authoritative != (sh.Osd == auth) || (len(sh.Errors) > 0) != (sh.Osd == bad) {
				t.Fatalf("%s: osd.%d authoritative %v, errors %v; want osd.%d authoritative, errors on osd.%d",
					io.Key, sh.Osd, sh.Authoritative, sh.Errors, auth, bad)
			}
			if io.Key != putAfter && sh.Authoritative && (!sh.Missing || !proto.Equal(sh.Version, deleteVersion(t, ctx, primary, sid, io.Key))) {
				t.Fatalf("%s: authoritative shard %v; want missing at the logged delete's version", io.Key, sh)
			}
		}
	}

	found, repaired, err := cl.RepairPG(ctx, id)
	if err != nil || found != 3 || repaired != 3 {
		t.Fatalf("RepairPG: %d found, %d repaired, %v; want 3, 3", found, repaired, err)
	}
	for _, o := range acting {
		for k := range stale {
			if _, _, err := c.OSDs[o].Store().HeadVersion(ctx, "rot", k); err == nil {
				t.Fatalf("osd.%d still holds %s, deleted, after the repair", o, k)
			}
		}
		if _, got := copyOf(t, ctx, c.OSDs[o], "rot", putAfter); !bytes.Equal(got, body) {
			t.Fatalf("osd.%d's copy of %s, put after its delete, is not the put's", o, putAfter)
		}
	}
	if res, err = primary.DeepScrub(ctx, pool.Id, pg); err != nil || !res.Compared || res.Inconsistent != 0 {
		t.Fatalf("scrub after the repair: %+v, %v; want clean", res, err)
	}
	for k := range stale {
		if _, err := cl.StatObject(ctx, "rot", k); err == nil {
			t.Fatalf("%s is back after the repair", k)
		}
	}
}

// deleteVersion is the version of the newest delete of rot/key in o's
// log of store PG sid.
func deleteVersion(t *testing.T, ctx context.Context, o *osd.OSD, sid uint32, key string) *osdpb.Version {
	t.Helper()
	entries, _, err := o.Store().LogAfter(ctx, sid, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var v *osdpb.Version
	for _, e := range entries {
		if e.Kind == osdpb.OpKind_OP_DELETE && e.Bucket == "rot" && e.Key == key {
			v = e.Version
		}
	}
	if v == nil {
		t.Fatalf("no delete of %s in the log", key)
	}
	return v
}

// TestScrubSecondLookWaitsForTheLog: a replica behind on a write differs
// from the primary at the first look; the second look may compare it only
// once its log had reached that write *before* its map was read. Here the
// replica's RepOp is held until its second-look map has read the object,
// and then let in, so that its log passes the write while that map is
// read: a second look that trusted where the log ended afterwards would
// take the stale copy, read before, for settled and report the object
// inconsistent. The scrub must look again and find it consistent.
func TestScrubSecondLookWaitsForTheLog(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) {
		cfg.DeepScrubInterval = -1
		cfg.ScrubBytesPerSec = -1
	})
	pg := placement.PGOf(pool, "rot", "seed")
	acting := c.Map.ActingSet(pool.Id, pg)
	primary, replica := c.OSDs[acting[0]], acting[len(acting)-1]
	sid := storePGOf(t, pool, pg)
	key := keysInPG(pool, "rot", pg, "late", 1)[0]
	if _, err := osdtest.Put(ctx, cl, "rot", key, osdtest.Payload(4<<10, 1), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _, err := c.OSDs[replica].Store().PGInfo(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}

	// The replica's shard of the PG waits, with the next RepOp, until let
	// is closed.
	let := make(chan struct{})
	var letOnce sync.Once
	release := func() { letOnce.Do(func() { close(let) }) }
	osd.RepOpApplying.Set(func(id, s uint32) {
		if id == replica && s == sid {
			<-let
		}
	})
	// The replica's second-look map, once it has read the stale object:
	// the held write goes in, and its log passes it before the map reads
	// where the log ends.
	var secondLooks atomic.Int64
	osd.ScrubMapRead.Set(func(id, s uint32, names bool) {
		if id != replica || s != sid || !names || secondLooks.Add(1) != 1 {
			return
		}
		release()
		// Polled here, not with Eventually: this is the replica's
		// goroutine, not the test's.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if last, _, err := c.OSDs[replica].Store().PGInfo(ctx, sid); err == nil && last.GetSeq() > before.GetSeq() {
				return
			}
		}
		t.Error("the replica's log did not pass the held write")
	})
	t.Cleanup(func() {
		osd.RepOpApplying.Set(nil)
		osd.ScrubMapRead.Set(nil)
		release()
	})
	put := make(chan error, 1)
	go func() {
		_, err := osdtest.Put(ctx, cl, "rot", key, osdtest.Payload(4<<10+1, 2), client.PutOptions{})
		put <- err
	}()
	// The primary has the new version; the replica, holding its RepOp,
	// the old one.
	osdtest.Eventually(t, 30*time.Second, "the primary to apply the put", func() bool {
		_, got, err := primary.Store().ReadRange(ctx, "rot", key, 0, -1, nil)
		return err == nil && len(got) == 4<<10+1
	})
	res, err := primary.DeepScrub(ctx, pool.Id, pg)
	if err != nil {
		t.Fatal(err)
	}
	if secondLooks.Load() == 0 {
		t.Fatalf("the scrub took no second look (%+v): the test reproduces nothing", res)
	}
	if res.Inconsistent != 0 {
		list, _ := cl.ListInconsistent(ctx, placement.PGID{Pool: pool.Id, Seed: pg})
		t.Fatalf("a write that landed during the second look reported as %d inconsistent: %v", res.Inconsistent, list.Objects)
	}
	if err := <-put; err != nil {
		t.Fatal(err)
	}
}

// TestScrubCompareReplicaRepairedMeanwhile: a replica's copy that failed
// its checksums at the first look (read_error) and was repaired before the
// second (by the replica's own scrub, which a `pg deep-scrub` runs beside
// the primary's compare) is not reported: a repair leaves version, size
// and CRC32C as they were, so the second look must read the copy back
// again to see it. A copy still damaged at the second look stays
// reported, with its read_error. The hook repairs the copy right after
// the replica's first-look map read it, so the race is the same every run.
func TestScrubCompareReplicaRepairedMeanwhile(t *testing.T) {
	c, cl, ctx, pool, pg, sid, acting, primary := scrubbedPG(t)
	replica := acting[len(acting)-1]
	keys := keysInPG(pool, "rot", pg, "dmg", 2)
	healed, rotten := keys[0], keys[1]
	bodies := map[string][]byte{}
	for i, k := range keys {
		bodies[k] = osdtest.Payload(1<<20+5, uint64(40+i)) // big enough for data files of their own
		if _, err := osdtest.Put(ctx, cl, "rot", k, bodies[k], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		damageDataFile(t, c, replica, bodies[k], 5000)
	}
	// The repair the replica's own scrub makes: the primary's copy
	// installed, at the same version.
	good, goodBody := copyOf(t, ctx, primary, "rot", healed)
	var firstLooks atomic.Int64
	osd.ScrubMapRead.Set(func(id, s uint32, names bool) {
		if id != replica || s != sid || names || firstLooks.Add(1) != 1 {
			return
		}
		if err := c.OSDs[replica].Store().InstallObject(ctx, sid, good, goodBody); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { osd.ScrubMapRead.Set(nil) })

	res, err := primary.DeepScrub(ctx, pool.Id, pg)
	if err != nil || !res.Compared {
		t.Fatalf("scrub: %+v, %v", res, err)
	}
	if firstLooks.Load() == 0 {
		t.Fatal("the replica read no first-look map: the test reproduces nothing")
	}
	list, err := cl.ListInconsistent(ctx, placement.PGID{Pool: pool.Id, Seed: pg})
	if err != nil {
		t.Fatal(err)
	}
	if res.Inconsistent != 1 || len(list.Objects) != 1 || list.Objects[0].Key != rotten {
		var listed []string
		for _, io := range list.Objects {
			listed = append(listed, fmt.Sprintf("%s %v", io.Key, io.Errors))
		}
		t.Fatalf("%d inconsistent, listed %v; want only %s (%s was repaired before the second look)", res.Inconsistent, listed, rotten, healed)
	}
	io := list.Objects[0]
	if !slices.Equal(io.Errors, []string{"read_error"}) {
		t.Fatalf("%s: errors %v, want [read_error]", rotten, io.Errors)
	}
	for _, sh := range io.Shards {
		if bad := slices.Contains(sh.Errors, "read_error"); bad != (sh.Osd == replica) {
			t.Fatalf("%s: osd.%d errors %v; want a read_error on osd.%d only", rotten, sh.Osd, sh.Errors, replica)
		}
	}
}
