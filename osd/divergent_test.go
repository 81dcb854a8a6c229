package osd_test

import (
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
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
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 4})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 20 * time.Second })
	if err := cl.MakeBucket(ctx, "div"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const key, ghost = "k", "ghost"
	pg := placement.PGOf(pool, "div", key)
	if _, err := osdtest.Put(ctx, cl, "div", key, []byte("one"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, pg)
	victim := acting[len(acting)-1]
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}

	// The victim stops, and its store gets the dead primary's last
	// write: an object no one else has, at the next version of the epoch.
	c.StopOSD(victim)
	applyAlone(ctx, t, c, victim, sid, "div", ghost, []byte("never acknowledged"))

	// A new epoch without the victim: the PG writes on (its log now
	// passes the divergent version in epoch order).
	_, with := newcomerMaps(t, c, victim)
	osdtest.Eventually(t, 60*time.Second, "a write without the victim", func() bool {
		_, err := osdtest.Put(ctx, cl, "div", key, []byte("two"), client.PutOptions{})
		return err == nil
	})
	// The victim comes back in the next epoch and catches up.
	c.Map = with
	for _, o := range c.OSDs {
		if o != nil {
			if err := o.AdoptMap(with); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.StartOSD(victim)
	osdtest.Eventually(t, 60*time.Second, "a write with the victim back", func() bool {
		_, err := osdtest.Put(ctx, cl, "div", key, []byte("three"), client.PutOptions{})
		return err == nil
	})
	set := with.ActingSet(pool.Id, pg)
	logOf := func(id uint32) []*osdpb.LogEntry {
		entries, _, err := c.OSDs[id].Store().LogAfter(context.Background(), sid, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	// The victim's log is the primary's: the divergent entry went, and the
	// entries it caught up on came with their request ids.
	if mine, theirs := logOf(victim), logOf(set[0]); !slices.EqualFunc(mine, theirs, func(a, b *osdpb.LogEntry) bool { return proto.Equal(a, b) }) {
		t.Fatalf("osd.%d's log has %d entries, its primary's %d", victim, len(mine), len(theirs))
	}
	for _, id := range set {
		o := c.OSDs[id]
		_, got, err := o.Store().ReadRange(context.Background(), "div", key, 0, -1, nil)
		if err != nil || !bytes.Equal(got, []byte("three")) {
			t.Fatalf("osd.%d: %s: %q, %v", id, key, got, err)
		}
		if _, err := o.Store().Head(context.Background(), "div", ghost); err == nil {
			t.Fatalf("osd.%d still has %s, which only a dead primary wrote (never acknowledged)", id, ghost)
		}
	}
}

// applyAlone writes bucket/key into stopped OSD id's copy of store PG sid,
// at the PG's next version: what a primary that applied a put and died
// before any replica had it leaves behind.
func applyAlone(ctx context.Context, t *testing.T, c *osdtest.Cluster, id, sid uint32, bucket, key string, body []byte) {
	t.Helper()
	st, err := store.Open(ctx, store.Options{Dir: filepath.Join(c.Config(id).DataDir, "store"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	last, _, err := st.PGInfo(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	e := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: bucket, Key: key,
		Version: &osdpb.Version{Epoch: last.GetEpoch(), Seq: last.GetSeq() + 1},
		Meta:    &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}}
	if err := st.Apply(ctx, sid, e, body); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
