package osd_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestResendAfterRecovery: a replica misses two puts to one object (it is
// marked down), the first of which a client will resend, and recovers
// them from the primary, by a log catch-up or, when the primary's log no
// longer reaches back to it, by a backfill. Then the primary goes down
// and the recovered replica leads the PG. The client's resend of the
// first put (same request id, attempt 1) must be answered from the new
// primary's log with the first time's version, not applied again: that
// would bring the overwritten body back.
func TestResendAfterRecovery(t *testing.T) {
	t.Run("log catch-up", func(t *testing.T) { testResendAfterRecovery(t, false) })
	t.Run("backfill", func(t *testing.T) { testResendAfterRecovery(t, true) })
}

func testResendAfterRecovery(t *testing.T, backfill bool) {
	const keep = 8
	// A primary trims its log at every write to its newest keep entries
	// (a replica, at the end of a recovery).
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.Store.LogKeep = keep }})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	const key = "k"
	pg := placement.PGOf(pool, "once", key)
	sid := pool.Id<<16 | pg
	primary, _ := c.Map.Primary(pool.Id, pg)
	// victim: the replica that leads the PG once the primary is down.
	without := func(m *placement.Map, id uint32) *placement.Map {
		m, err := m.With(func(pb *osdpb.ClusterMap) { pb.Osds[id].Up = false })
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	victim, _ := without(c.Map, primary).Primary(pool.Id, pg)
	down := without(c.Map, victim)
	back, err := down.With(func(pb *osdpb.ClusterMap) { pb.Osds[victim].Up = true })
	if err != nil {
		t.Fatal(err)
	}
	final := without(back, primary)
	if p, _ := final.Primary(pool.Id, pg); p != victim || victim == primary {
		t.Fatalf("pg %x: osd.%d leads it without osd.%d, want osd.%d", pg, p, primary, victim)
	}
	adopt := func(m *placement.Map) {
		t.Helper()
		c.Map = m
		for id, o := range c.OSDs {
			if o != nil {
				if err := o.AdoptMap(m); err != nil {
					t.Fatalf("osd.%d: %v", id, err)
				}
			}
		}
	}
	if _, err := osdtest.Put(ctx, cl, "once", key, []byte("zero"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// fill writes n other objects of the PG.
	fill := func(n int) {
		t.Helper()
		for i := 0; n > 0; i++ {
			k := fmt.Sprintf("fill%d", i)
			if placement.PGOf(pool, "once", k) != pg {
				continue
			}
			if _, err := osdtest.Put(ctx, cl, "once", k, []byte("x"), client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			n--
		}
	}
	if !backfill {
		// The victim's log passes keep entries: its recovery trims it.
		fill(keep + 2)
	}
	had, _, err := c.OSDs[victim].Store().PGInfo(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}

	// put sends a put of key to OSD to as a client would, with its own
	// request id; a refusal while the PG peers is sent again, as a client
	// does.
	put := func(to uint32, tid uint64, attempt uint32, body []byte) *osdpb.ObjectReply {
		t.Helper()
		call := rawCaller(ctx, t, c, to)
		deadline := time.Now().Add(30 * time.Second)
		for {
			front, _ := proto.Marshal(&osdpb.PutObject{
				Header: &osdpb.Header{Epoch: c.OSDs[to].Map().Epoch(), Pool: pool.Id, Pg: pg, Req: &osdpb.ReqID{Client: 77, Tid: tid}, Attempt: attempt},
				Bucket: "once", Key: key, Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}})
			var rep osdpb.ObjectReply
			err := call(osdpb.MsgType_MSG_PUT_OBJECT, front, body, &rep)
			switch st := rep.Header.GetStatus(); {
			case err == nil && st == osdpb.Status_OK:
				return &rep
			case err == nil && (st == osdpb.Status_SERVICE_UNAVAILABLE || st == osdpb.Status_STALE_EPOCH) && time.Now().Before(deadline):
				time.Sleep(10 * time.Millisecond) // a client's resend backoff, not synchronization
			default:
				t.Fatalf("put to osd.%d (tid %d, attempt %d): %v %v", to, tid, attempt, err, rep.Header)
			}
		}
	}

	adopt(down)
	if backfill {
		// Enough writes for the primary's log to pass the victim's version.
		fill(2 * keep)
	}
	first := put(primary, 1, 0, []byte("first"))
	second := put(primary, 2, 0, []byte("second"))
	if _, tooOld, err := c.OSDs[primary].Store().LogAfter(ctx, sid, had, 1); err != nil || tooOld != backfill {
		t.Fatalf("the primary's log after the victim's version %v: too old %v (%v), want %v", had, tooOld, err, backfill)
	}

	adopt(back)
	vs := c.OSDs[victim].Store()
	// The victim recovers, and its log becomes the primary's window: what
	// the primary kept of the victim's own entries (a catch-up) or of its
	// log (a backfill), and the copied entries. A recovery trims the log
	// after it recorded the last entries: poll for both.
	ps := c.OSDs[primary].Store()
	behind := func() string {
		last, vtail, err := vs.PGInfo(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		b, err := vs.PGBackfilling(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if b || !proto.Equal(last, second.Header.Version) {
			return fmt.Sprintf("backfilling %v, at %v, want %v", b, last, second.Header.Version)
		}
		if _, ptail, _ := ps.PGInfo(ctx, sid); !proto.Equal(vtail, ptail) {
			return fmt.Sprintf("its log starts after %v, the primary's after %v", vtail, ptail)
		}
		mine, _, err := vs.LogAfter(ctx, sid, vtail, 0)
		if err != nil {
			t.Fatal(err)
		}
		theirs, _, err := ps.LogAfter(ctx, sid, vtail, 0)
		if err != nil || !slices.EqualFunc(mine, theirs, func(a, b *osdpb.LogEntry) bool { return proto.Equal(a, b) }) {
			return fmt.Sprintf("its log has %d entries, the primary's %d (%v)", len(mine), len(theirs), err)
		}
		return ""
	}
	msgrtest.EventuallyDescribed(t, time.Minute, func() string { return "the victim to recover with the primary's log: " + behind() },
		func() bool { return behind() == "" })
	if _, got, err := vs.ReadRange(ctx, "once", key, 0, -1, nil); err != nil || !bytes.Equal(got, []byte("second")) {
		t.Fatalf("the victim's copy after recovery: %q, %v", got, err)
	}

	c.StopOSD(primary)
	adopt(final)
	again := put(victim, 1, 1, []byte("first"))
	if !proto.Equal(again.Header.Version, first.Header.Version) {
		t.Fatalf("the resend to the new primary: version %v, want the first time's %v (applied again)", again.Header.Version, first.Header.Version)
	}
	if _, got, err := vs.ReadRange(ctx, "once", key, 0, -1, nil); err != nil || !bytes.Equal(got, []byte("second")) {
		t.Fatalf("after the resend the new primary has %q (%v), want the overwrite's %q", got, err, "second")
	}
	if last, _, err := vs.PGInfo(ctx, sid); err != nil || !proto.Equal(last, second.Header.Version) {
		t.Fatalf("pg version %v after the resend, want %v (%v)", last, second.Header.Version, err)
	}
}
