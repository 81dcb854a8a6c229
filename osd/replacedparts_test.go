package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/internal/stallfs"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestMultipartPartsDroppedOnResend: a multipart object is overwritten (or
// deleted) while a replica withholds its ack past RepTimeout, so the first
// attempt fails; the retry is answered from the PG log as a resend, and the
// parts the write replaced must still be deleted (from the log entry, since
// the primary applies nothing the second time). With failover, the primary
// stops after the first attempt, and the new one answers the retry from its
// own copy of the log, which it logged as a replica.
func TestMultipartPartsDroppedOnResend(t *testing.T) {
	for _, c := range []struct {
		name          string
		del, failover bool
	}{{"overwrite", false, false}, {"delete", true, false}, {"failover", false, true}} {
		t.Run(c.name, func(t *testing.T) { testPartsDroppedOnResend(t, c.del, c.failover) })
	}
}

// heldSyncCluster starts 3 OSDs whose WAL syncs each gate can hold (a
// replica that applies a write but cannot ack it in time).
func heldSyncCluster(t *testing.T) (*osdtest.Cluster, []*stallfs.Gate) {
	t.Helper()
	gates := make([]*stallfs.Gate, 3)
	for i := range gates {
		gates[i] = stallfs.NewGate()
	}
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.Store = store.WithFSForTest(cfg.Store, heldSyncFS(vfs.NewMem(), gates[cfg.ID]))
	}})
	return c, gates
}

func testPartsDroppedOnResend(t *testing.T, del, failover bool) {
	c, gates := heldSyncCluster(t)
	ctx := ctxT(t, 3*time.Minute)
	twoPartObject(t, ctx, c, "mpbucket", "big")
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "mpbucket", "big")
	set := c.Map.ActingSet(pool.Id, pg)
	callers := map[uint32]func(osdpb.MsgType, []byte, []byte, proto.Message) error{}
	for _, id := range set {
		callers[id] = rawCaller(ctx, t, c, id)
	}
	mp := c.Map
	// head asks the primary of bucket/key for its head.
	head := func(bucket, key string) *osdpb.ObjectReply {
		t.Helper()
		pg := placement.PGOf(pool, bucket, key)
		primary, _ := mp.Primary(pool.Id, pg)
		front, _ := proto.Marshal(&osdpb.ObjectRequest{Header: &osdpb.Header{Epoch: mp.Epoch(), Pool: pool.Id, Pg: pg}, Bucket: bucket, Key: key})
		var rep osdpb.ObjectReply
		if err := callers[primary](osdpb.MsgType_MSG_HEAD_OBJECT, front, nil, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	manifest := head("mpbucket", "big")
	parts := manifest.GetMeta().GetParts()
	if len(parts) != 2 {
		t.Fatalf("the multipart object has %d parts, want 2: %v", len(parts), manifest.Header)
	}
	for _, p := range parts {
		if st := head(ops.MultipartBucket, p.Key).Header.GetStatus(); st != osdpb.Status_OK {
			t.Fatalf("part %s before the write: %v", p.Key, st)
		}
	}

	body := []byte("small now")
	write := func(attempt uint32) *osdpb.ObjectReply {
		t.Helper()
		hdr := &osdpb.Header{Epoch: mp.Epoch(), Pool: pool.Id, Pg: pg, Req: &osdpb.ReqID{Client: 4242, Tid: 9}, Attempt: attempt}
		typ, data := osdpb.MsgType_MSG_PUT_OBJECT, body
		var front []byte
		if del {
			typ, data = osdpb.MsgType_MSG_DELETE_OBJECT, nil
			front, _ = proto.Marshal(&osdpb.ObjectRequest{Header: hdr, Bucket: "mpbucket", Key: "big"})
		} else {
			front, _ = proto.Marshal(&osdpb.PutObject{Header: hdr, Bucket: "mpbucket", Key: "big",
				Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}})
		}
		var rep osdpb.ObjectReply
		primary, _ := mp.Primary(pool.Id, pg)
		if err := callers[primary](typ, front, data, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	// A replica applies the first attempt but cannot sync it, so it never
	// acks in time: the primary answers it retriably after RepTimeout.
	gates[set[1]].Hold()
	defer gates[set[1]].Release()
	if rep := write(0); rep.Header.GetStatus() != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Fatalf("the first attempt, its replica held: %v, want SERVICE_UNAVAILABLE (RepTimeout)", rep.Header)
	}
	gates[set[1]].Release()
	if failover {
		down, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Osds[set[0]].Up = false })
		if err != nil {
			t.Fatal(err)
		}
		c.StopOSD(set[0])
		for _, id := range set[1:] {
			if err := c.OSDs[id].AdoptMap(down); err != nil {
				t.Fatal(err)
			}
		}
		mp = down
		if p, _ := mp.Primary(pool.Id, pg); p == set[0] {
			t.Fatalf("osd.%d, down, is still the primary", p)
		}
	}
	// The new primary answers once it has peered.
	var rep *osdpb.ObjectReply
	osdtest.Eventually(t, 30*time.Second, "the resend answered", func() bool {
		rep = write(1)
		return rep.Header.GetStatus() != osdpb.Status_SERVICE_UNAVAILABLE
	})
	if rep.Header.GetStatus() != osdpb.Status_OK {
		t.Fatalf("the resend: %v", rep.Header)
	}
	osdtest.Eventually(t, 20*time.Second, "the replaced parts deleted", func() bool {
		for _, p := range parts {
			if head(ops.MultipartBucket, p.Key).Header.GetStatus() != osdpb.Status_NO_SUCH_KEY {
				return false
			}
		}
		return true
	})
	got := head("mpbucket", "big")
	if del {
		if got.Header.GetStatus() != osdpb.Status_NO_SUCH_KEY {
			t.Fatalf("the deleted object: %v", got.Header)
		}
	} else if got.Header.GetStatus() != osdpb.Status_OK || got.Meta.GetSize() != uint64(len(body)) {
		t.Fatalf("the overwritten object: %v, %v", got.Header, got.Meta)
	}
}

// TestPartDeleteRetried: a replaced part's delete that is lost on the way
// to its PG's primary (dropped unanswered, as by a primary that died or
// was peering) is sent again, and the part goes.
func TestPartDeleteRetried(t *testing.T) {
	var dropped atomic.Int32
	osd.ClusterReceived.Set(func(_, _ uint32, typ osdpb.MsgType) bool {
		return typ == osdpb.MsgType_MSG_DELETE_OBJECT_IF && dropped.CompareAndSwap(0, 1)
	})
	defer osd.ClusterReceived.Set(nil)
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.RepTimeout = 500 * time.Millisecond }})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "retried"); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	callers := map[uint32]func(osdpb.MsgType, []byte, []byte, proto.Message) error{}
	for id := range c.OSDs {
		callers[uint32(id)] = rawCaller(ctx, t, c, uint32(id))
	}
	head := func(bucket, key string) (*osdpb.ObjectReply, uint32) {
		t.Helper()
		pg := placement.PGOf(pool, bucket, key)
		primary, _ := c.Map.Primary(pool.Id, pg)
		front, _ := proto.Marshal(&osdpb.ObjectRequest{Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg}, Bucket: bucket, Key: key})
		var rep osdpb.ObjectReply
		if err := callers[primary](osdpb.MsgType_MSG_HEAD_OBJECT, front, nil, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep, primary
	}
	// Four parts, so that (all but surely) one lives in a PG another OSD
	// leads: its delete goes over the cluster network.
	var parts []*osdpb.PartRef
	const tries = 10
	try := 0
	for ; dropped.Load() == 0 && try < tries; try++ {
		key := fmt.Sprint("big", try)
		id, err := cl.NewMultipartUpload(ctx, "retried", key, client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var done []client.CompletePart
		for i, n := range []int{5 << 20, 5 << 20, 5 << 20, 1000} {
			p, err := cl.PutObjectPart(ctx, "retried", key, id, i+1, bytes.NewReader(osdtest.Payload(n, uint64(i))), int64(n))
			if err != nil {
				t.Fatal(err)
			}
			done = append(done, client.CompletePart{PartNumber: i + 1, ETag: p.ETag})
		}
		if _, err := cl.CompleteMultipartUpload(ctx, "retried", key, id, done); err != nil {
			t.Fatal(err)
		}
		manifest, objPrimary := head("retried", key)
		parts = manifest.GetMeta().GetParts()
		remote := false
		for _, p := range parts {
			if _, at := head(ops.MultipartBucket, p.Key); at != objPrimary {
				remote = true
			}
		}
		if !remote {
			continue
		}
		if _, err := osdtest.Put(ctx, cl, "retried", key, []byte("small now"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		break
	}
	if try == tries {
		t.Fatalf("in %d objects of 4 parts, every part sat in a PG its object's primary leads", tries)
	}
	osdtest.Eventually(t, 20*time.Second, "the first part delete over the network dropped", func() bool { return dropped.Load() == 1 })
	osdtest.Eventually(t, 20*time.Second, "every replaced part deleted", func() bool {
		for _, p := range parts {
			if rep, _ := head(ops.MultipartBucket, p.Key); rep.Header.GetStatus() != osdpb.Status_NO_SUCH_KEY {
				return false
			}
		}
		return true
	})
}

// partsReader starts one OSD that keeps replaced objects for keep, puts
// mpbucket/big, 11 MiB in three parts, and opens it for reading.
func partsReader(t *testing.T, keep time.Duration) (*osdtest.Cluster, context.Context, *client.Client, []byte, *osdpb.ObjectMeta, *client.Object) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.Store.KeepReplacedFor = keep
	}})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "mpbucket"); err != nil {
		t.Fatal(err)
	}
	old := osdtest.Payload(11<<20, 1)
	if _, err := osdtest.Put(ctx, cl, "mpbucket", "big", old, client.PutOptions{PartSize: 5 << 20}); err != nil {
		t.Fatal(err)
	}
	meta, err := c.OSDs[0].Store().Head(ctx, "mpbucket", "big")
	if err != nil || len(meta.Parts) != 3 {
		t.Fatalf("the multipart object: %v, %v", meta, err)
	}
	obj, err := cl.GetObject(ctx, "mpbucket", "big", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { obj.Close() })
	return c, ctx, cl, old, meta, obj
}

// TestReplacedPartsWaitForReaders: the parts a multipart object's
// overwrite replaced are deleted only once the store's KeepReplacedFor has
// passed, so a read that began on the old object reads its later parts
// still, as S3 finishes a GET with the object it started on; a graceful
// stop deletes them before it ends instead of leaving them to osprey gc.
func TestReplacedPartsWaitForReaders(t *testing.T) {
	c, ctx, cl, old, meta, obj := partsReader(t, time.Minute)
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(obj, first); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "mpbucket", "big", []byte("small now"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(append(first, rest...), old) {
		t.Fatalf("a read across the overwrite: %d bytes, %v", len(first)+len(rest), err)
	}
	c.StopOSD(0)
	c.StartOSD(0)
	for _, p := range meta.Parts {
		if _, err := c.OSDs[0].Store().Head(ctx, ops.MultipartBucket, p.Key); !errors.Is(err, store.ErrNoSuchKey) {
			t.Fatalf("part %s after a graceful stop: %v, want deleted", p.Key, err)
		}
	}
}

// TestReplacedPartsHeldWhileRead: a reader of a multipart object slower
// than the store's KeepReplacedFor reads it whole across an overwrite, as
// S3 finishes a GET with the object it began on: while it reads on, it
// holds the replaced parts at the object's primary, which defers their
// delete (and says so in its stats); once it stops, they go a hold later.
// writeTo reads through io.Copy (WriteTo, the S3 gateway's way) into a
// slow writer that takes a window in over three holds. With restart, the
// primary stops as its delete waits and gives the delete up (as a crash
// would), and it is the restarted primary's delete of its log's recent
// entries that the reader holds. With stop, the primary stops gracefully
// while the reader holds the parts: it leaves them to the restarted one,
// rather than delete them under the reader.
func TestReplacedPartsHeldWhileRead(t *testing.T) {
	for _, mode := range []string{"reading", "writeTo", "restart", "stop"} {
		t.Run(mode, func(t *testing.T) { testPartsHeld(t, mode) })
	}
}

func testPartsHeld(t *testing.T, mode string) {
	const keep = time.Second
	c, ctx, cl, old, meta, obj := partsReader(t, keep)
	got := make([]byte, 1<<20, len(old))
	if _, err := io.ReadFull(obj, got); err != nil {
		t.Fatal(err)
	}
	var stopping atomic.Bool
	osd.PartsDropping.Set(func(uint32) bool { return stopping.Load() })
	defer osd.PartsDropping.Set(nil)
	if _, err := osdtest.Put(ctx, cl, "mpbucket", "big", []byte("small now"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if mode == "restart" {
		stopping.Store(true)
		c.StopOSD(0)
		stopping.Store(false)
		c.StartOSD(0)
	}
	// A slow reader: 64 KiB every 50 ms, until its hold has deferred the
	// delete for three holds' time (it would have gone after one).
	w := &slowWriter{buf: bytes.NewBuffer(got), tick: time.NewTicker(50 * time.Millisecond), held: func() bool { return c.OSDs[0].Stats().PartDropsHeld > 0 }}
	defer w.tick.Stop()
	if mode == "stop" {
		for w.heldSince.IsZero() {
			if _, err := io.CopyN(w, obj, 64<<10); err != nil || w.buf.Len() > 4<<20 {
				t.Fatalf("reading until the parts are held, at %d: %v", w.buf.Len(), err)
			}
		}
		c.StopOSD(0)
		c.StartOSD(0)
		w.heldSince = time.Time{} // held again, at the restarted primary
	}
	o := c.OSDs[0]
	if mode == "writeTo" {
		if _, err := io.Copy(w, obj); err != nil {
			t.Fatalf("a slow io.Copy across the overwrite, at %d: %v", w.buf.Len(), err)
		}
	}
	w.readPastHolds(t, ctx, obj, keep, old)
	obj.Close()
	partsGone(t, ctx, []*osd.OSD{o}, meta)
	if n := o.Stats().PartDropsHeld; n != 0 {
		t.Fatalf("%d deletes still held after they ran", n)
	}
}

// slowWriter takes 64 KiB per tick, and notes when held first says so.
type slowWriter struct {
	buf       *bytes.Buffer
	tick      *time.Ticker
	held      func() bool
	heldSince time.Time
}

func (w *slowWriter) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		n := min(len(rest), 64<<10)
		w.buf.Write(rest[:n])
		rest = rest[n:]
		if w.heldSince.IsZero() && w.held() {
			w.heldSince = time.Now()
		}
		<-w.tick.C
	}
	return len(p), nil
}

// readPastHolds reads obj on into w, 64 KiB at a time, until held has
// said so for three holds of keep (a delete not deferred would have run
// after one), then the rest, which must make want.
func (w *slowWriter) readPastHolds(t *testing.T, ctx context.Context, obj io.Reader, keep time.Duration, want []byte) {
	t.Helper()
	for w.heldSince.IsZero() || time.Since(w.heldSince) < 3*keep {
		if ctx.Err() != nil || w.buf.Len() > 10<<20 {
			t.Fatalf("the delete of the replaced parts was not deferred (held since %v, %d bytes read)", w.heldSince, w.buf.Len())
		}
		if _, err := io.CopyN(w, obj, 64<<10); err != nil {
			t.Fatalf("reading on at %d: %v", w.buf.Len(), err)
		}
	}
	if _, err := io.Copy(w.buf, obj); err != nil || !bytes.Equal(w.buf.Bytes(), want) {
		t.Fatalf("a slow read across the overwrite: %d bytes, %v", w.buf.Len(), err)
	}
}

// partsGone waits until none of osds holds any of meta's parts.
func partsGone(t *testing.T, ctx context.Context, osds []*osd.OSD, meta *osdpb.ObjectMeta) {
	t.Helper()
	osdtest.Eventually(t, 30*time.Second, "the parts deleted once their reader stopped", func() bool {
		for _, o := range osds {
			for _, p := range meta.Parts {
				if _, err := o.Store().Head(ctx, ops.MultipartBucket, p.Key); !errors.Is(err, store.ErrNoSuchKey) {
					return false
				}
			}
		}
		return true
	})
}

// TestReplacedPartsHeldAsPrimaryMoves: a map moves the object's PG to
// another primary (an OSD comes in) while the old one, still up, waits to
// delete the parts its overwrite replaced; the reader now names its parts
// to the new primary, which the old one asks before it deletes them.
func TestReplacedPartsHeldAsPrimaryMoves(t *testing.T) {
	const keep = time.Second
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16, Tweak: func(cfg *osd.Config) { cfg.Store.KeepReplacedFor = keep }})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	without, with := newcomerMaps(t, c, newcomer)
	key, oldPrimary := "", uint32(0)
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("big%d", i)
		pg := placement.PGOf(pool, "mpbucket", k)
		p1, _ := without.Primary(pool.Id, pg)
		if p2, _ := with.Primary(pool.Id, pg); p2 == newcomer && p1 != newcomer {
			key, oldPrimary = k, p1
		}
	}
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "mpbucket"); err != nil {
		t.Fatal(err)
	}
	old := osdtest.Payload(11<<20, 7)
	if _, err := osdtest.Put(ctx, cl, "mpbucket", key, old, client.PutOptions{PartSize: 5 << 20}); err != nil {
		t.Fatal(err)
	}
	meta, err := c.OSDs[oldPrimary].Store().Head(ctx, "mpbucket", key)
	if err != nil || len(meta.Parts) != 3 {
		t.Fatalf("the multipart object: %v, %v", meta, err)
	}
	obj, err := cl.GetObject(ctx, "mpbucket", key, client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got := make([]byte, 1<<20, len(old))
	if _, err := io.ReadFull(obj, got); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "mpbucket", key, []byte("small now"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	adoptAll(t, c, with)
	o := c.OSDs[oldPrimary]
	w := &slowWriter{buf: bytes.NewBuffer(got), tick: time.NewTicker(50 * time.Millisecond), held: func() bool { return o.Stats().PartDropsHeld > 0 }}
	defer w.tick.Stop()
	w.readPastHolds(t, ctx, obj, keep, old)
	obj.Close()
	partsGone(t, ctx, c.OSDs, meta)
}

// TestReplacedPartsDroppedAfterPrimaryCrash: the primary of a multipart
// object that was deleted loses its pending delete of the parts (as a
// crash during its wait does: the delete lives in memory only). The PG's
// next primary, the same OSD restarted or another after a failover,
// deletes them when it goes active, from the entry in its log.
func TestReplacedPartsDroppedAfterPrimaryCrash(t *testing.T) {
	for _, failover := range []bool{false, true} {
		t.Run(map[bool]string{false: "restart", true: "failover"}[failover], func(t *testing.T) {
			testReplacedPartsDroppedAfterPrimaryCrash(t, failover)
		})
	}
}

func testReplacedPartsDroppedAfterPrimaryCrash(t *testing.T, failover bool) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.Store.KeepReplacedFor = 100 * time.Millisecond }})
	ctx := ctxT(t, 2*time.Minute)
	cl := twoPartObject(t, ctx, c, "crashed", "big")
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	set := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "crashed", "big"))
	primary := set[0]
	meta, err := c.OSDs[primary].Store().Head(ctx, "crashed", "big")
	if err != nil || len(meta.GetParts()) != 2 {
		t.Fatalf("the object's head at its primary: %v, %v", meta, err)
	}
	// held reports how many copies of the parts the running OSDs hold.
	held := func() int {
		n := 0
		for _, o := range c.OSDs {
			if o == nil {
				continue
			}
			for _, p := range meta.GetParts() {
				if _, err := o.Store().Head(ctx, ops.MultipartBucket, p.Key); err == nil {
					n++
				}
			}
		}
		return n
	}
	if n := held(); n != 6 {
		t.Fatalf("%d copies of the parts before the delete; want 6", n)
	}

	gaveUp := make(chan struct{}, 1)
	osd.PartsDropping.Set(func(id uint32) bool {
		if id != primary {
			return false
		}
		select {
		case gaveUp <- struct{}{}:
		default:
		}
		return true
	})
	defer osd.PartsDropping.Set(nil)
	if err := cl.RemoveObject(ctx, "crashed", "big"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gaveUp:
	case <-ctx.Done():
		t.Fatal("the primary never came to delete the parts")
	}
	osd.PartsDropping.Set(nil)
	if n := held(); n != 6 {
		t.Fatalf("%d copies of the parts once the primary gave their delete up; want 6", n)
	}

	c.StopOSD(primary)
	if failover {
		down, err := c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[primary].Up = false })
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range set[1:] {
			if err := c.OSDs[id].AdoptMap(down); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		c.StartOSD(primary)
	}
	osdtest.Eventually(t, 60*time.Second, "the parts deleted by the PG's next primary", func() bool { return held() == 0 })
}

// twoPartObject makes bucket and completes bucket/key of two parts, the
// least data a multipart object of more than one part takes (all but the
// last part are 5 MiB at least), through a client it returns.
func twoPartObject(t *testing.T, ctx context.Context, c *osdtest.Cluster, bucket, key string) *client.Client {
	t.Helper()
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	id, err := cl.NewMultipartUpload(ctx, bucket, key, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var done []client.CompletePart
	for i, data := range [][]byte{osdtest.Payload(5<<20, 1), osdtest.Payload(1000, 2)} {
		p, err := cl.PutObjectPart(ctx, bucket, key, id, i+1, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		done = append(done, client.CompletePart{PartNumber: i + 1, ETag: p.ETag})
	}
	if _, err := cl.CompleteMultipartUpload(ctx, bucket, key, id, done); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestDropOfAbsentPartWritesNothing: deleting a replaced object's parts
// again (as a new primary does for its log's recent entries) costs no
// log entry for a part gone already, at its own PGs or another OSD's,
// while a part still there is deleted and logged on every member.
func TestDropOfAbsentPartWritesNothing(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	twoPartObject(t, ctx, c, "absent", "big")
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	primary, _ := c.Map.Primary(pool.Id, placement.PGOf(pool, "absent", "big"))
	meta, err := c.OSDs[primary].Store().Head(ctx, "absent", "big")
	if err != nil || len(meta.GetParts()) != 2 {
		t.Fatalf("the object's head at its primary: %v, %v", meta, err)
	}
	parts := []string{meta.Parts[0].Key, meta.Parts[1].Key}
	// The completed upload's record goes after the completion answered:
	// a log entry of its own, which must land before the count.
	id, _, _ := ops.ParsePartKey(parts[0])
	rec := ops.UploadKey("absent", "big", id)
	osdtest.Eventually(t, 10*time.Second, "the completed upload's record removed everywhere", func() bool {
		for _, o := range c.OSDs {
			if _, err := o.Store().Head(ctx, ops.MultipartBucket, rec); !errors.Is(err, store.ErrNoSuchKey) {
				return false
			}
		}
		return true
	})
	// Parts of an upload that never was, in PGs led by every OSD.
	var absent []string
	led := map[uint32]bool{}
	for i := uint32(1); len(led) < 3 || len(absent) < 12; i++ {
		k := ops.PartKey(ops.NewUploadID(), i%ops.MaxParts+1)
		p, _ := c.Map.Primary(pool.Id, placement.PGOf(pool, ops.MultipartBucket, k))
		led[p] = true
		absent = append(absent, k)
	}
	lasts := func() map[string]*osdpb.Version {
		out := map[string]*osdpb.Version{}
		for id, o := range c.OSDs {
			for pg := range uint32(8) {
				last, _, err := o.Store().PGInfo(ctx, osd.StorePG(pool.Id, pg))
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("osd.%d pg %d", id, pg)] = last
			}
		}
		return out
	}
	before := lasts()
	c.OSDs[0].DropPartsForTest(pool.Id, absent)
	for at, v := range lasts() {
		if !proto.Equal(v, before[at]) {
			t.Errorf("%s: log at %v after deleting absent parts, was %v", at, v, before[at])
		}
	}
	// A part that is there goes, logged at its PG's members.
	c.OSDs[0].DropPartsForTest(pool.Id, parts[:1])
	pg := placement.PGOf(pool, ops.MultipartBucket, parts[0])
	after := lasts()
	for _, id := range c.Map.ActingSet(pool.Id, pg) {
		at := fmt.Sprintf("osd.%d pg %d", id, pg)
		if proto.Equal(after[at], before[at]) {
			t.Errorf("%s: the log did not grow with the delete of %s", at, parts[0])
		}
		if _, err := c.OSDs[id].Store().Head(ctx, ops.MultipartBucket, parts[0]); !errors.Is(err, store.ErrNoSuchKey) {
			t.Errorf("osd.%d still holds %s: %v", id, parts[0], err)
		}
	}
}
