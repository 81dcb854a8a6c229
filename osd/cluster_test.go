package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// replicasHave checks that every OSD of the object's acting set holds the
// object with exactly want's bytes.
func replicasHave(t testing.TB, c *osdtest.Cluster, bucket, key string, want []byte) {
	t.Helper()
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, bucket, key)
	for _, id := range c.Map.ActingSet(pool.Id, pg) {
		o := c.OSDs[id]
		if o == nil {
			continue
		}
		_, got, err := o.Store().ReadRange(context.Background(), bucket, key, 0, -1, nil)
		if want == nil {
			if err == nil {
				t.Fatalf("osd.%d still has %s/%s", id, bucket, key)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("osd.%d: %s/%s: %d bytes, err %v; want %d bytes", id, bucket, key, len(got), err, len(want))
		}
	}
}

func TestClusterBasics(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{})
	cl := c.Client(t, nil)
	ctx := ctxT(t, 60*time.Second)

	if err := cl.MakeBucket(ctx, "photos"); err != nil {
		t.Fatal(err)
	}
	if err := cl.MakeBucket(ctx, "photos"); !errors.Is(err, client.ErrBucketAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := cl.MakeBucket(ctx, "Bad_Name"); !errors.Is(err, client.ErrInvalidBucketName) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := osdtest.Put(ctx, cl, "nobucket", "k", []byte("x"), client.PutOptions{}); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Fatalf("put to a missing bucket: %v", err)
	}
	// Every OSD has the bucket record.
	for i, o := range c.OSDs {
		if _, err := o.Store().HeadBucket(ctx, "photos"); err != nil {
			t.Fatalf("osd.%d: bucket record: %v", i, err)
		}
	}

	sizes := []int{0, 1, 4 << 10, 1<<20 + 7, 5 << 20}
	for i, n := range sizes {
		key := fmt.Sprintf("dir/obj-%d", i)
		data := osdtest.Payload(n, uint64(i))
		info, err := osdtest.Put(ctx, cl, "photos", key, data, client.PutOptions{ContentType: "image/png", UserMetadata: map[string]string{"a": "b"}})
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		if info.Size != int64(n) {
			t.Fatalf("put %s: info %+v", key, info)
		}
		got, ginfo, err := osdtest.Get(ctx, cl, "photos", key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get %s: %d bytes, %v", key, len(got), err)
		}
		if ginfo.ContentType != "image/png" || ginfo.UserMetadata["a"] != "b" {
			t.Fatalf("get %s: info %+v", key, ginfo)
		}
		replicasHave(t, c, "photos", key, data)
	}
	// Ranges.
	data := osdtest.Payload(5<<20, 4)
	got, _, err := osdtest.Get(ctx, cl, "photos", "dir/obj-4", client.GetOptions{Range: true, Offset: 1<<20 - 3, Length: 10})
	if err != nil || !bytes.Equal(got, data[1<<20-3:1<<20+7]) {
		t.Fatalf("range: %v", err)
	}
	if _, _, err := osdtest.Get(ctx, cl, "photos", "dir/obj-1", client.GetOptions{Range: true, Offset: 5, Length: 1}); !errors.Is(err, client.ErrInvalidRange) {
		t.Fatalf("range past the end: %v", err)
	}
	if _, _, err := osdtest.Get(ctx, cl, "photos", "nope", client.GetOptions{}); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("missing key: %v", err)
	}
	// Overwrite, then delete.
	if _, err := osdtest.Put(ctx, cl, "photos", "dir/obj-2", []byte("short"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	replicasHave(t, c, "photos", "dir/obj-2", []byte("short"))
	if err := cl.RemoveObject(ctx, "photos", "dir/obj-3"); err != nil {
		t.Fatal(err)
	}
	replicasHave(t, c, "photos", "dir/obj-3", nil)
	if err := cl.RemoveObject(ctx, "photos", "dir/obj-3"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}

	// Listing across every primary, in order, with a delimiter.
	var keys []string
	for o, err := range cl.ListObjects(ctx, "photos", client.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	want := []string{"dir/obj-0", "dir/obj-1", "dir/obj-2", "dir/obj-4"}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("list: %v, want %v", keys, want)
	}
	keys = nil
	for o, err := range cl.ListObjects(ctx, "photos", client.ListOptions{Delimiter: "/"}) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, fmt.Sprintf("%s:%v", o.Key, o.IsPrefix))
	}
	if fmt.Sprint(keys) != "[dir/:true]" {
		t.Fatalf("list with delimiter: %v", keys)
	}

	if err := cl.RemoveBucket(ctx, "photos"); !errors.Is(err, client.ErrBucketNotEmpty) {
		t.Fatalf("removing a full bucket: %v", err)
	}
	for _, k := range want {
		if err := cl.RemoveObject(ctx, "photos", k); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.RemoveBucket(ctx, "photos"); err != nil {
		t.Fatalf("removing an empty bucket: %v", err)
	}
	if ok, err := cl.BucketExists(ctx, "photos"); ok || err != nil {
		t.Fatalf("bucket exists after removal: %v %v", ok, err)
	}
}

// TestReplicaDownFailsFastThenCatchesUp stops a replica: writes to its PGs
// must fail with a retriable error within a bounded time (not hang); after
// it restarts, it catches up from the primaries, and writes succeed again.
func TestReplicaDownFailsFastThenCatchesUp(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 300 * time.Millisecond })
	if err := cl.MakeBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	put := func(key string, gen int) error {
		_, err := osdtest.Put(ctx, cl, "data", key, osdtest.Payload(3000, uint64(gen)), client.PutOptions{})
		return err
	}
	for i := range 20 {
		if err := put(fmt.Sprintf("k%d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	c.StopOSD(2)
	start := time.Now()
	err := put("k0", 100)
	if !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("write with a replica down: %v, want ServiceUnavailable", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || !ce.Retriable() {
		t.Fatalf("error %v is not retriable", err)
	}
	// RepTimeout is 3s in osdtest; the client gives up after its own
	// 300ms of retries plus one attempt.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the failing write took %v", d)
	}
	// Once the heartbeats marked the replica down, writes fail at once.
	osdtest.Eventually(t, 10*time.Second, "writes fail fast", func() bool {
		s := time.Now()
		return put("k1", 101) != nil && time.Since(s) < time.Second
	})
	c.StartOSD(2)
	// Writes succeed again once osd.2 is back and caught up.
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		osdtest.Eventually(t, 30*time.Second, "write after restart", func() bool { return put(key, 200+i) == nil })
	}
	for i := range 20 {
		replicasHave(t, c, "data", fmt.Sprintf("k%d", i), osdtest.Payload(3000, uint64(200+i)))
	}
}

// TestReplicaBackfill brings back a replica whose store is older than
// what the primaries' trimmed PG logs reach (an old copy of its data
// directory): it must backfill, fetching what changed and removing the
// objects deleted meanwhile, before it applies new writes.
func TestReplicaBackfill(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) { cfg.Store.LogKeep = 8 }})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := osdtest.Put(ctx, cl, "data", fmt.Sprintf("old%d", i), osdtest.Payload(100, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Keep a copy of osd.1's store as it is now.
	c.StopOSD(1)
	dir := c.Config(1).DataDir
	if err := os.CopyFS(dir+".old", os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	c.StartOSD(1)
	for i := range 10 {
		if err := cl.RemoveObject(ctx, "data", fmt.Sprintf("old%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		if _, err := osdtest.Put(ctx, cl, "data", fmt.Sprintf("new%d", i%30), osdtest.Payload(50, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Back to the old copy: osd.1 now misses more than any log holds.
	c.StopOSD(1)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".old", dir); err != nil {
		t.Fatal(err)
	}
	c.StartOSD(1)
	// A write to every PG makes osd.1 catch up there (a gap in its log);
	// writes go on while it backfills, so wait for its backfills to end.
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	covered := map[uint32]bool{}
	for i := 0; len(covered) < int(pool.PgCount); i++ {
		key := fmt.Sprintf("marker%d", i)
		if pg := placement.PGOf(pool, "data", key); !covered[pg] {
			covered[pg] = true
			osdtest.Eventually(t, 30*time.Second, "marker write", func() bool {
				_, err := osdtest.Put(ctx, cl, "data", key, []byte("m"), client.PutOptions{})
				return err == nil
			})
		}
	}
	osdtest.Eventually(t, 30*time.Second, "osd.1 caught up in every PG", func() bool {
		for pg := range pool.PgCount {
			sid, _ := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
			b, err := c.OSDs[1].Store().PGBackfilling(ctx, sid)
			mine, _, err2 := c.OSDs[1].Store().PGInfo(ctx, sid)
			primary, _ := c.Map.Primary(pool.Id, pg)
			theirs, _, err3 := c.OSDs[primary].Store().PGInfo(ctx, sid)
			if err != nil || err2 != nil || err3 != nil || b || mine.GetSeq() != theirs.GetSeq() {
				return false
			}
		}
		return true
	})
	for i := range 10 {
		replicasHave(t, c, "data", fmt.Sprintf("old%d", i), nil)
	}
	for i := 10; i < 20; i++ {
		replicasHave(t, c, "data", fmt.Sprintf("old%d", i), osdtest.Payload(100, uint64(i)))
	}
	for i := 170; i < 200; i++ {
		replicasHave(t, c, "data", fmt.Sprintf("new%d", i%30), osdtest.Payload(50, uint64(i)))
	}
}

// TestHeartbeatsKeepPeersUp: an idle cluster's OSDs see each other up
// well past the grace time, and see a stopped one go down.
func TestHeartbeatsKeepPeersUp(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	deadline := time.Now().Add(2500 * time.Millisecond) // 2.5 x the grace
	for time.Now().Before(deadline) {
		for i, o := range c.OSDs {
			for j := range c.OSDs {
				if i != j && o.PeerDown(uint32(j)) {
					t.Fatalf("osd.%d thinks osd.%d is down", i, j)
				}
			}
		}
		time.Sleep(20 * time.Millisecond) // sampling the liveness view
	}
	c.StopOSD(2)
	osdtest.Eventually(t, 5*time.Second, "osd.2 seen down", func() bool { return c.OSDs[0].PeerDown(2) && c.OSDs[1].PeerDown(2) })
}

// TestHeartbeatsPassALosslessBacklog: while osd.0 is stuck on a request
// from osd.1, everything else osd.1 sent it on their lossless session
// waits behind it, but heartbeats come on a session of their own: neither
// sees the other down well past the grace, and a stopped osd.1 is still
// seen down in time.
func TestHeartbeatsPassALosslessBacklog(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	o0, o1 := c.OSDs[0], c.OSDs[1]
	if err := o1.CallForTest(ctxT(t, 30*time.Second), 0); err != nil {
		t.Fatal(err) // the lossless session osd.1 -> osd.0 is up
	}
	release := make(chan struct{})
	var blocked atomic.Bool
	var maps, beats atomic.Int64 // map requests and heartbeats osd.0 took from osd.1 since the block
	osd.ClusterReceived.Set(func(id, from uint32, mt osdpb.MsgType) bool {
		if id != 0 || from != 1 || !blocked.Load() && mt != osdpb.MsgType_MSG_GET_MAP {
			return false
		}
		switch mt {
		case osdpb.MsgType_MSG_HEARTBEAT, osdpb.MsgType_MSG_HEARTBEAT_REPLY:
			beats.Add(1)
		case osdpb.MsgType_MSG_GET_MAP:
			maps.Add(1)
			if blocked.CompareAndSwap(false, true) {
				<-release // osd.0's dispatch of this session stops here
			}
		}
		return false
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); osd.ClusterReceived.Set(nil) })

	calls := make(chan error, 2)
	go func() { calls <- o1.CallForTest(context.Background(), 0) }()
	osdtest.Eventually(t, 10*time.Second, "osd.0 to be stuck on osd.1's request", blocked.Load)
	go func() { calls <- o1.CallForTest(context.Background(), 0) }() // queued behind it
	start, seen := time.Now(), beats.Load()
	for time.Since(start) < 2500*time.Millisecond { // 2.5 x the grace
		if o0.PeerDown(1) || o1.PeerDown(0) {
			t.Fatalf("a peer is seen down while heartbeats flow (osd.0 sees osd.1 down: %v, osd.1 sees osd.0 down: %v)", o0.PeerDown(1), o1.PeerDown(0))
		}
		time.Sleep(20 * time.Millisecond) // sampling the liveness view
	}
	if n := beats.Load() - seen; n < 10 {
		t.Fatalf("osd.0 took %d heartbeats from osd.1 in 2.5 s of backlog, want at least 10 (one each 100 ms)", n)
	}
	if n := maps.Load(); n != 1 {
		t.Fatalf("osd.0 took %d map requests from osd.1 while stuck on the first; the lossless session was not held back", n)
	}
	unblock()
	for range 2 {
		if err := <-calls; err != nil {
			t.Fatal(err)
		}
	}
	c.StopOSD(1)
	osdtest.Eventually(t, 5*time.Second, "osd.1 seen down", func() bool { return o0.PeerDown(1) && c.OSDs[2].PeerDown(1) })
}

// newcomerMaps marks OSD newcomer out in a new map that every OSD adopts,
// and returns it with the map after it that brings newcomer in.
func newcomerMaps(t *testing.T, c *osdtest.Cluster, newcomer uint32) (without, with *placement.Map) {
	t.Helper()
	without, err := c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[newcomer].In = false })
	if err != nil {
		t.Fatal(err)
	}
	with, err = without.With(func(pb *osdpb.ClusterMap) { pb.Osds[newcomer].In = true })
	if err != nil {
		t.Fatal(err)
	}
	adoptAll(t, c, without)
	return without, with
}

// newcomer is the OSD that newcomerCluster's second map brings in.
const newcomer = 3

// newcomerCluster starts four OSDs under a map without the newcomer and
// returns it and the next map, which has it in.
func newcomerCluster(t *testing.T) (c *osdtest.Cluster, ctx context.Context, pool *osdpb.Pool, without, with *placement.Map) {
	c = osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16})
	ctx = ctxT(t, 2*time.Minute)
	pool, _ = c.Map.PoolByName(placement.DefaultPoolName)
	without, with = newcomerMaps(t, c, newcomer)
	return c, ctx, pool, without, with
}

// TestMapChangeNewPrimaryCatchesUp brings an OSD into the cluster with a
// new map epoch: straw2 makes it the primary of some PGs whose objects it
// does not hold. It must recover each such PG from the old members before
// it serves it, and every object must read back.
func TestMapChangeNewPrimaryCatchesUp(t *testing.T) {
	c, ctx, pool, without, with := newcomerCluster(t)
	var led []uint32
	for pg := range pool.PgCount {
		if p, _ := with.Primary(pool.Id, pg); p == newcomer {
			led = append(led, pg)
		}
	}
	if len(led) == 0 {
		t.Skip("the newcomer leads no PG in this placement")
	}
	cl := c.Client(t, nil)
	if cl.Map().Epoch() != without.Epoch() {
		t.Fatalf("client at epoch %d, want %d", cl.Map().Epoch(), without.Epoch())
	}
	if err := cl.MakeBucket(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := 0; len(want) < 30; i++ {
		key := fmt.Sprintf("obj%d", i)
		if slices.Contains(led, placement.PGOf(pool, "moving", key)) || i%5 == 0 {
			want[key] = osdtest.Payload(1000+i, uint64(i))
			if _, err := osdtest.Put(ctx, cl, "moving", key, want[key], client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.OSDs[newcomer].Store().Head(ctx, "moving", "obj0"); err == nil {
		t.Log("note: the newcomer already holds obj0 as a replica")
	}
	t.Logf("osd.%d comes in and leads pgs %v", newcomer, led)
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	for key, data := range want {
		osdtest.Eventually(t, 30*time.Second, "read "+key+" under the new map", func() bool {
			got, _, err := osdtest.Get(ctx, cl, "moving", key, client.GetOptions{})
			if err != nil && !errors.Is(err, client.ErrServiceUnavailable) {
				t.Fatalf("%s: %v", key, err)
			}
			return err == nil && bytes.Equal(got, data)
		})
	}
	if cl.Map().Epoch() != with.Epoch() {
		t.Fatalf("client at epoch %d, want %d", cl.Map().Epoch(), with.Epoch())
	}
	// The newcomer holds the objects of the PGs it leads, and writes go on.
	for key, data := range want {
		if slices.Contains(led, placement.PGOf(pool, "moving", key)) {
			if _, got, err := c.OSDs[newcomer].Store().ReadRange(ctx, "moving", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("newcomer: %s: %v", key, err)
			}
		}
	}
	if _, err := osdtest.Put(ctx, cl, "moving", "after", []byte("new map"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPutFollowsNewPrimary: a client that has not seen the map that gave a
// PG a new primary sends its put to the old one; that attempt is refused
// (the op's payload buffer was taken from the old primary's session), and
// the retry goes to the new primary under the map the client learns from
// the refusal, not again down the first attempt's session.
func TestPutFollowsNewPrimary(t *testing.T) {
	c, ctx, pool, without, with := newcomerCluster(t)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 20 * time.Second })
	if err := cl.MakeBucket(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("obj%d", i)
		if p, _ := with.Primary(pool.Id, placement.PGOf(pool, "moving", k)); p == newcomer {
			key = k
		}
		if i > 10000 {
			t.Skip("the newcomer leads no PG in this placement")
		}
	}
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	if cl.Map().Epoch() != without.Epoch() {
		t.Fatalf("client at epoch %d, want %d", cl.Map().Epoch(), without.Epoch())
	}
	data := []byte("after the map changed")
	osdtest.Eventually(t, 30*time.Second, "put "+key+" under the new map", func() bool {
		_, err := osdtest.Put(ctx, cl, "moving", key, data, client.PutOptions{})
		if err != nil && !errors.Is(err, client.ErrServiceUnavailable) {
			t.Fatalf("%s: %v", key, err)
		}
		return err == nil
	})
	if _, got, err := c.OSDs[newcomer].Store().ReadRange(ctx, "moving", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the new primary osd.%d: %s is %q, %v", newcomer, key, got, err)
	}
}

// TestNewPrimaryBucketNotCaughtUp: an OSD that comes back in as a PG's
// primary learns of the buckets created while it was out when the meta
// PG catches it up. Until then a put or get for such a bucket is
// retriable (ServiceUnavailable), never NoSuchBucket; a bucket nobody
// created is NoSuchBucket at once when the newcomer can ask the meta PG's
// primary, and ServiceUnavailable when it is that primary itself. Once
// caught up, the put goes through and the newcomer answers a missing
// bucket itself. The test holds the newcomer's catch-up of the meta PG
// (RecoveryStarting) so that the window stays open.
func TestNewPrimaryBucketNotCaughtUp(t *testing.T) { forMetaRoles(t, testNewPrimaryBucketNotCaughtUp) }

// testNewPrimaryBucketNotCaughtUp brings back as the newcomer the OSD that
// is the meta PG's primary with every OSD in (asMetaPrimary), or another.
func testNewPrimaryBucketNotCaughtUp(t *testing.T, asMetaPrimary bool) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	metaPrimary, _ := c.Map.Primary(pool.Id, placement.MetaPG)
	newcomer := (metaPrimary + 1) % uint32(len(c.OSDs))
	if asMetaPrimary {
		newcomer = metaPrimary
	}
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "early"); err != nil {
		t.Fatal(err)
	}
	without, with := newcomerMaps(t, c, newcomer)
	if err := cl.MakeBucket(ctx, "moving"); err != nil { // while the newcomer is out
		t.Fatal(err)
	}
	if p, _ := with.Primary(pool.Id, placement.MetaPG); p != metaPrimary {
		t.Fatalf("the meta PG's primary is osd.%d with the newcomer back, osd.%d at the start", p, metaPrimary)
	}
	// A key of each bucket in one PG the newcomer leads under the new map
	// (a put of "early" going through says the newcomer serves that PG),
	// and bucket "nosuch", which nobody creates.
	pg := ledPG(t, with, pool, newcomer, "the newcomer")
	movingKey, earlyKey, nosuchKey := keyInPG(t, pool, "moving", pg, ""), keyInPG(t, pool, "early", pg, ""), keyInPG(t, pool, "nosuch", pg, "")
	t.Logf("osd.%d leads pg %d.%x under epoch %d; the meta PG's primary is osd.%d", newcomer, pool.Id, pg, with.Epoch(), metaPrimary)

	// An upload of the bucket, made while the newcomer is out, to complete
	// at the newcomer.
	uploadID, err := cl.NewMultipartUpload(ctx, "moving", movingKey, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	part, err := cl.PutObjectPart(ctx, "moving", movingKey, uploadID, 1, bytes.NewReader([]byte("part")), 4)
	if err != nil {
		t.Fatal(err)
	}
	complete := func(cl *client.Client) error {
		_, err := cl.CompleteMultipartUpload(ctx, "moving", movingKey, uploadID, []client.CompletePart{{PartNumber: 1, ETag: part.ETag}})
		return err
	}

	if _, err := osdtest.Put(ctx, cl, "early", earlyKey, []byte("known"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	catchUp := holdMetaCatchUp(t, newcomer)
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	catchUp.started(ctx, t, "the newcomer")
	if _, err := c.OSDs[newcomer].Store().HeadBucket(ctx, "moving"); err == nil {
		t.Fatal("the newcomer knows the bucket before its catch-up: the test reproduces nothing")
	}
	osdtest.Eventually(t, 30*time.Second, "the newcomer to serve its pg", func() bool {
		_, _, err := osdtest.Get(ctx, cl, "early", earlyKey, client.GetOptions{})
		return err == nil
	})
	if cl.Map().Epoch() != with.Epoch() {
		t.Fatalf("client at epoch %d, want %d (it was at %d)", cl.Map().Epoch(), with.Epoch(), without.Epoch())
	}

	// A client that gives up soon sees the retriable answer.
	quick := c.Client(t, func(o *client.Options) { o.RetryFor = 200 * time.Millisecond })
	// A write to a bucket the newcomer knows needs the meta PG's primary
	// to vouch for it (the newcomer's copy may hold a bucket deleted since):
	// nobody can while the newcomer is that primary and catching up.
	_, err = osdtest.Put(ctx, quick, "early", earlyKey, []byte("vouched"), client.PutOptions{})
	if asMetaPrimary && !errors.Is(err, client.ErrServiceUnavailable) || !asMetaPrimary && err != nil {
		t.Fatalf("put to a bucket the newcomer knows, before its catch-up: %v", err)
	}
	if _, err := osdtest.Put(ctx, quick, "moving", movingKey, []byte("x"), client.PutOptions{}); !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("put to a bucket the newcomer has not caught up on: %v, want ServiceUnavailable", err)
	}
	if _, _, err := osdtest.Get(ctx, quick, "moving", movingKey, client.GetOptions{}); !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("get from a bucket the newcomer has not caught up on: %v, want ServiceUnavailable", err)
	}
	if err := complete(quick); !errors.Is(err, client.ErrServiceUnavailable) {
		t.Fatalf("completing an upload of a bucket the newcomer has not caught up on: %v, want ServiceUnavailable", err)
	}
	var listErr error
	for _, err := range quick.ListObjects(ctx, "moving", client.ListOptions{}) {
		listErr = err
	}
	if !errors.Is(listErr, client.ErrServiceUnavailable) {
		t.Fatalf("listing a bucket the newcomer has not caught up on: %v, want ServiceUnavailable", listErr)
	}
	if _, err := quick.StatBucket(ctx, "moving"); asMetaPrimary && !errors.Is(err, client.ErrServiceUnavailable) || !asMetaPrimary && err != nil {
		t.Fatalf("head bucket at the meta PG's primary: %v", err)
	}
	// A bucket nobody created: the newcomer asks the meta PG's primary.
	headBuckets := func() uint64 {
		for _, op := range c.OSDs[metaPrimary].Stats().Ops {
			if op.Op == "head_bucket" {
				return op.Count
			}
		}
		return 0
	}
	asked := headBuckets()
	wantMissing := client.ErrNoSuchBucket
	if asMetaPrimary {
		wantMissing = client.ErrServiceUnavailable // nobody else can tell
	}
	if _, err := osdtest.Put(ctx, quick, "nosuch", nosuchKey, []byte("x"), client.PutOptions{}); !errors.Is(err, wantMissing) {
		t.Fatalf("put to a bucket nobody created, before the catch-up: %v, want %v", err, wantMissing)
	}
	if !asMetaPrimary && headBuckets() == asked {
		t.Fatal("the newcomer answered NoSuchBucket without asking the meta PG's primary")
	}

	catchUp.release()
	if err := complete(cl); err != nil {
		t.Fatalf("completing the upload after the catch-up: %v", err)
	}
	data := []byte("after the catch-up")
	if _, err := osdtest.Put(ctx, cl, "moving", movingKey, data, client.PutOptions{}); err != nil {
		t.Fatalf("put after the catch-up: %v", err)
	}
	if _, got, err := c.OSDs[newcomer].Store().ReadRange(ctx, "moving", movingKey, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the new primary osd.%d: %s is %q, %v", newcomer, movingKey, got, err)
	}
	// Caught up, the newcomer answers a missing bucket itself (once the
	// sync that waited for its catch-up is applied).
	osdtest.Eventually(t, 10*time.Second, "the newcomer to answer NoSuchBucket without asking", func() bool {
		asked := headBuckets()
		_, err := osdtest.Put(ctx, quick, "nosuch", nosuchKey, []byte("x"), client.PutOptions{})
		if err != nil && !errors.Is(err, client.ErrNoSuchBucket) && !(asMetaPrimary && errors.Is(err, client.ErrServiceUnavailable)) {
			t.Fatalf("put to a bucket nobody created, after the catch-up: %v, want NoSuchBucket", err)
		}
		return errors.Is(err, client.ErrNoSuchBucket) && headBuckets() == asked
	})
}

// TestReloadMap: an OSD started from a map file adopts a newer one written
// over it when told to (SIGHUP in `osprey osd`), and refuses a map of
// another cluster.
func TestReloadMap(t *testing.T) {
	m := osdtest.NewMap(t, osdtest.Options{OSDs: 1, PGs: 4})
	path := t.TempDir() + "/map.json"
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	o, err := osd.Start(context.Background(), osd.Config{ID: 0, MapPath: path, DataDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(context.Background())
	next, err := m.With(func(pb *osdpb.ClusterMap) { pb.Osds[0].Weight = 2 })
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Save(path); err != nil {
		t.Fatal(err)
	}
	if got, err := o.ReloadMap(); err != nil || got.Epoch() != next.Epoch() {
		t.Fatalf("reload: epoch %d, %v; want %d", got.Epoch(), err, next.Epoch())
	}
	other := osdtest.NewMap(t, osdtest.Options{OSDs: 1, PGs: 4}) // another fsid
	other, _ = other.With(func(pb *osdpb.ClusterMap) { pb.Epoch = 10 })
	if err := other.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := o.ReloadMap(); err == nil || o.Map().Epoch() != next.Epoch() {
		t.Fatalf("a foreign map was adopted (epoch %d, err %v)", o.Map().Epoch(), err)
	}
}

// TestNewPrimaryWaitsForPreviousInterval: an OSD comes in as the primary of
// a PG while every member of the PG's previous acting set is unreachable.
// It must not serve the PG from its empty store (that answered NoSuchKey
// for acknowledged objects): reads fail retriably until a previous member
// answers, and then return the object.
func TestNewPrimaryWaitsForPreviousInterval(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const newcomer = 3
	without, with := newcomerMaps(t, c, newcomer)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "waits"); err != nil {
		t.Fatal(err)
	}
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("obj%d", i)
		if with.IsPrimary(pool.Id, placement.PGOf(pool, "waits", k), newcomer) {
			key = k
		}
	}
	data := osdtest.Payload(5000, 7)
	if _, err := osdtest.Put(ctx, cl, "waits", key, data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := without.ActingSet(pool.Id, placement.PGOf(pool, "waits", key))
	for _, id := range before {
		c.StopOSD(id)
	}
	if err := c.OSDs[newcomer].AdoptMap(with); err != nil {
		t.Fatal(err)
	}
	impatient := c.Client(t, func(o *client.Options) { o.RetryFor = 2 * time.Second })
	if _, _, err := osdtest.Get(ctx, impatient, "waits", key, client.GetOptions{}); err == nil || errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("get %s while the previous members %v are down: %v; want a retriable failure", key, before, err)
	} else {
		t.Logf("while %v are down: %v", before, err)
	}
	for _, id := range before {
		c.StartOSD(id)
	}
	osdtest.Eventually(t, 30*time.Second, "read "+key+" once a previous member is back", func() bool {
		got, _, err := osdtest.Get(ctx, cl, "waits", key, client.GetOptions{})
		if errors.Is(err, client.ErrNoSuchKey) {
			t.Fatalf("%s: %v", key, err)
		}
		return err == nil && bytes.Equal(got, data)
	})
}

// TestPrimaryWitnessesSkippedInterval: an OSD that missed a whole interval
// (stopped while the map moved its PG elsewhere and back) comes back as
// the PG's primary with a map that skips that interval. It must fetch the
// epochs it missed, see that the interval took writes on OSDs it never
// heard of, and recover from them before it serves: comparing only the
// map it had with the new one finds every member of both empty-handed,
// and the PG answered NoSuchKey for an acknowledged object.
func TestPrimaryWitnessesSkippedInterval(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 6, PGs: 64})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	// A PG whose first acting set S is the same under both maps that
	// follow: everyone else out (interval 3), and S out (interval 2).
	var set []uint32
	var seed uint32
	for pg := range pool.PgCount {
		if s := c.Map.ActingSet(pool.Id, pg); len(s) == 3 {
			set, seed = s, pg
			break
		}
	}
	elsewhere, err := c.Map.With(func(pb *osdpb.ClusterMap) {
		for _, o := range pb.Osds {
			o.In = !slices.Contains(set, o.Id)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	back, err := elsewhere.With(func(pb *osdpb.ClusterMap) {
		for _, o := range pb.Osds {
			o.In = slices.Contains(set, o.Id)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := back.ActingSet(pool.Id, seed); !slices.Equal(got, set) {
		t.Skipf("placement: pg %x is %v under the last map, not %v", seed, got, set)
	}
	primary := set[0]
	c.StopOSD(primary)
	adoptAll(t, c, elsewhere)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "skipped"); err != nil {
		t.Fatal(err)
	}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("obj%d", i); placement.PGOf(pool, "skipped", k) == seed {
			key = k
		}
	}
	data := osdtest.Payload(3000, 11)
	if _, err := osdtest.Put(ctx, cl, "skipped", key, data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for id, o := range c.OSDs {
		if o != nil {
			if err := o.AdoptMap(back); err != nil {
				t.Fatalf("osd.%d: %v", id, err)
			}
		}
	}
	// The old primary returns with the map it had before it stopped, and
	// then gets the last one, skipping the interval that took the write.
	p := c.StartOSD(primary)
	if err := p.AdoptMap(back); err != nil {
		t.Fatal(err)
	}
	osdtest.Eventually(t, 30*time.Second, "read "+key+" from the returned primary", func() bool {
		got, _, err := osdtest.Get(ctx, cl, "skipped", key, client.GetOptions{})
		if errors.Is(err, client.ErrNoSuchKey) {
			t.Fatalf("%s answered NoSuchKey: the primary served without the interval it missed", key)
		}
		return err == nil && bytes.Equal(got, data)
	})
	if _, got, err := p.Store().ReadRange(ctx, "skipped", key, 0, -1, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("osd.%d does not hold %s after peering: %v", primary, key, err)
	}
}

// TestRepTimeoutBeforeTimerStored: with a RepTimeout shorter than it takes
// to send a RepOp, the timer finishes the entry before replicate has stored
// it; the write fails as ServiceUnavailable, the daemon keeps serving, and
// the race detector finds nothing (finish reads the timer under the lock).
func TestRepTimeoutBeforeTimerStored(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) { cfg.RepTimeout = time.Nanosecond }})
	ctx := ctxT(t, time.Minute)
	// One attempt per call: a resend would be answered from the primary's
	// log, a success once the replicas have caught up, as a loaded host
	// lets them. A call the PG refused while it peered changed nothing.
	// The timer's goroutine may also run after the replicas' acks, on a
	// loaded host (it failed so once in a full race run): that write
	// succeeds, and the next one is tried.
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = time.Nanosecond })
	for i := range 3 {
		n := 0
		osdtest.Eventually(t, 30*time.Second, "a write the timer failed", func() bool {
			n++
			err := cl.MakeBucket(ctx, fmt.Sprintf("data%d.%d", i, n))
			if err == nil || errors.Is(err, client.ErrServiceUnavailable) && strings.Contains(err.Error(), "peering") {
				return false
			}
			if !errors.Is(err, client.ErrServiceUnavailable) || !strings.Contains(err.Error(), "did not ack") {
				t.Fatalf("make bucket with a 1ns RepTimeout: %v, want ServiceUnavailable (replicas did not ack)", err)
			}
			return true
		})
	}
}

// TestBucketArrivingWhileOpAnswers: an op that found its bucket missing
// while the bucket was on its way (a catch-up installing the records, a
// create landing) is answered ServiceUnavailable, which the client
// retries, not NoSuchBucket, when the bucket is there by the time the
// answer is decided. (An OSD that became current between the op's look
// and its answer used to refuse a bucket it held by then.)
func TestBucketArrivingWhileOpAnswers(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 10 * time.Second })
	st, metaPG := c.OSDs[0].Store(), osd.MetaStorePG(c.Map)
	var arrived atomic.Int32
	osd.BucketAnswering.Set(func(_ uint32, bucket string) {
		if bucket != "late" || arrived.Add(1) != 1 {
			return
		}
		e := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "late", Version: &osdpb.Version{Epoch: 1 << 40, Seq: 1}}
		if err := st.Apply(ctx, metaPG, e, nil); err != nil {
			t.Errorf("creating the bucket in the store: %v", err)
		}
	})
	t.Cleanup(func() { osd.BucketAnswering.Set(nil) })
	if _, err := osdtest.Put(ctx, cl, "late", "k", []byte("x"), client.PutOptions{}); err != nil {
		t.Fatalf("put to a bucket that arrived while the op answered: %v, want it retried and stored", err)
	}
	if arrived.Load() == 0 {
		t.Fatal("the put never found the bucket missing: the test reproduces nothing")
	}
	// A bucket that stays missing is still NoSuchBucket.
	if _, err := osdtest.Put(ctx, cl, "never", "k", []byte("x"), client.PutOptions{}); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Fatalf("put to a missing bucket: %v, want NoSuchBucket", err)
	}
}
