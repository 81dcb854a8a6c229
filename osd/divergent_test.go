package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestDivergentEntryRolledBack: a replica holds a log entry that no
// member serving the PG has — what a primary that applied a write and
// died before any replica had it leaves behind, in the epoch it died in.
// The PG goes on without the replica in a new epoch, then takes it back.
// Its catch-up must roll the entry back (the object it wrote is gone on
// the replica too), not keep it beside the newer log, and the PG's copies
// must agree.
func TestDivergentEntryRolledBack(t *testing.T) {
	d := divergentReplica(t)
	d.rejoin(t)
	d.checkRolledBack(t)
}

// TestRepOpOnDivergentEntryRecovers: as TestDivergentEntryRolledBack, but
// the primary's push to the returning replica is lost (as when the replica
// refused it for an epoch it did not have yet), so the next thing it gets
// is a write whose sequence number follows its divergent entry's. Its
// RepOp names the primary's previous version (RepOp.prior), which is not
// the divergent entry: the replica recovers first, rolling the entry back,
// instead of stacking the write on it.
func TestRepOpOnDivergentEntryRecovers(t *testing.T) {
	d := divergentReplica(t)
	var dropped atomic.Int32
	osd.RepOpReceived.Set(func(id, _ uint32, r *osdpb.RepOp) bool {
		if id == d.victim && r.Entry.GetKind() == osdpb.OpKind_OP_NONE {
			dropped.Add(1)
			return true
		}
		return false
	})
	t.Cleanup(func() { osd.RepOpReceived.Set(nil) })
	d.rejoin(t)
	if dropped.Load() == 0 {
		t.Fatal("no push or sync reached the victim to drop: the test did not test the lost push")
	}
	d.checkRolledBack(t)
}

// divergent is a PG one of whose members (victim) holds a log entry no
// member that serves has (the ghost object), and a cluster whose map,
// once adopted, brings the victim back (with).
type divergent struct {
	c       *osdtest.Cluster
	ctx     context.Context
	cl      *client.Client
	pool    *osdpb.Pool
	pg, sid uint32
	victim  uint32
	with    *placement.Map
}

const divergentKey, divergentGhost = "k", "ghost"

// divergentReplica puts an object, stops the last member of its PG's
// acting set and gives its store the dead primary's last write: an object
// no one else has, at the next version of the epoch. The PG then goes on
// without it in a new epoch and writes again, so its log passes the
// divergent version in epoch order.
func divergentReplica(t *testing.T) *divergent {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 4})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 20 * time.Second })
	if err := cl.MakeBucket(ctx, "div"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "div", divergentKey)
	if _, err := osdtest.Put(ctx, cl, "div", divergentKey, []byte("one"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, pg)
	victim := acting[len(acting)-1]
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	c.StopOSD(victim)
	applyAlone(ctx, t, c, victim, sid, "div", divergentGhost, []byte("never acknowledged"))
	_, with := newcomerMaps(t, c, victim)
	osdtest.Eventually(t, 60*time.Second, "a write without the victim", func() bool {
		_, err := osdtest.Put(ctx, cl, "div", divergentKey, []byte("two"), client.PutOptions{})
		return err == nil
	})
	return &divergent{c: c, ctx: ctx, cl: cl, pool: pool, pg: pg, sid: sid, victim: victim, with: with}
}

// rejoin brings the victim back in the next epoch and writes the object
// again, through it.
func (d *divergent) rejoin(t *testing.T) {
	d.c.Map = d.with
	adoptAll(t, d.c, d.with)
	d.c.StartOSD(d.victim)
	osdtest.Eventually(t, 60*time.Second, "a write with the victim back", func() bool {
		_, err := osdtest.Put(d.ctx, d.cl, "div", divergentKey, []byte("three"), client.PutOptions{})
		return err == nil
	})
}

// checkRolledBack: the victim's log is the primary's (the divergent entry
// went, and the entries it caught up on came with their request ids), and
// every member has the last write and not the ghost.
func (d *divergent) checkRolledBack(t *testing.T) {
	t.Helper()
	set := d.with.ActingSet(d.pool.Id, d.pg)
	logOf := func(id uint32) []*osdpb.LogEntry {
		entries, _, err := d.c.OSDs[id].Store().LogAfter(context.Background(), d.sid, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	if mine, theirs := logOf(d.victim), logOf(set[0]); !slices.EqualFunc(mine, theirs, func(a, b *osdpb.LogEntry) bool { return proto.Equal(a, b) }) {
		versions := func(es []*osdpb.LogEntry) (vs []string) {
			for _, e := range es {
				vs = append(vs, fmt.Sprintf("%d.%d", e.Version.GetEpoch(), e.Version.GetSeq()))
			}
			return vs
		}
		t.Fatalf("osd.%d's log is %v, its primary's %v", d.victim, versions(mine), versions(theirs))
	}
	for _, id := range set {
		o := d.c.OSDs[id]
		_, got, err := o.Store().ReadRange(context.Background(), "div", divergentKey, 0, -1, nil)
		if err != nil || !bytes.Equal(got, []byte("three")) {
			t.Fatalf("osd.%d: %s: %q, %v", id, divergentKey, got, err)
		}
		if _, err := o.Store().Head(context.Background(), "div", divergentGhost); err == nil {
			t.Fatalf("osd.%d still has %s, which only a dead primary wrote (never acknowledged)", id, divergentGhost)
		}
	}
}

// applyAlone writes bucket/key into stopped OSD id's copy of store PG sid,
// at the PG's next version: what a primary that applied a put and died
// before any replica had it leaves behind.
func applyAlone(ctx context.Context, t *testing.T, c *osdtest.Cluster, id, sid uint32, bucket, key string, body []byte) {
	t.Helper()
	withStore(ctx, t, c, id, func(st *store.Store) error {
		last, _, err := st.PGInfo(ctx, sid)
		if err != nil {
			return err
		}
		e := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: bucket, Key: key,
			Version: &osdpb.Version{Epoch: last.GetEpoch(), Seq: last.GetSeq() + 1},
			Meta:    &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}}
		return st.Apply(ctx, sid, e, body)
	})
}

// withStore runs f on stopped OSD id's store.
func withStore(ctx context.Context, t *testing.T, c *osdtest.Cluster, id uint32, f func(*store.Store) error) {
	t.Helper()
	st, err := store.Open(ctx, store.Options{Dir: filepath.Join(c.Config(id).DataDir, "store"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := f(st); err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
