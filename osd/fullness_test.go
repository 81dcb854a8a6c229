package osd_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/smallfs"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// roomyDisk is the tmpfs of the OSDs that a fullness test does not fill:
// a filesystem of their own, so that only the test decides how full any
// OSD is, never the host's disk; the most these tests store stays under
// a quarter of it.
const roomyDisk = 512 << 20

// TestFullDisk fills one replica's data disk (a 96 MiB tmpfs under OSD
// process 2; every PG of the 3-OSD, size-3 pool has it). Writes must then
// fail with StorageFull, never an internal error or a panic; health says
// which OSD is full; reads and deletes go on; deleting makes room and
// writes work again. Then the OSD is stopped (SIGTERM), its disk filled to
// the last byte by another file, and started again: it comes up
// (read-only: reads and deletes work, puts get StorageFull) and takes
// writes again once the file is removed. Every acknowledged object is on
// every replica at the end.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	const disk = 96 << 20
	mc := startMonCluster(t, monClusterOptions{OSDs: 3, DefaultFullRatios: true, SmallDisks: map[int]int64{0: roomyDisk, 1: roomyDisk, 2: disk},
		Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: 10 * time.Minute,
			Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 8}}})
	ctx := ctxT(t, 3*time.Minute)
	cl := mc.healthyClient(ctx, 20*time.Second, "full")
	full := fmt.Sprintf("osd.%d", mc.idOf(2))
	acked := map[string][]byte{}
	put := func(key string, size int) error {
		body := osdtest.Payload(size, uint64(len(acked)+1))
		_, err := osdtest.Put(ctx, cl, "full", key, body, client.PutOptions{})
		if err == nil {
			acked[key] = body
		}
		return err
	}
	// putOnceRoom: the primaries hear of the room from the map and from
	// the full OSD's heartbeats, which may lag one another; until then
	// the answer is StorageFull and nothing else.
	putOnceRoom := func(key string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			err := put(key, 1<<20)
			if err == nil {
				return
			}
			if !errors.Is(err, client.ErrStorageFull) || time.Now().After(deadline) {
				t.Fatalf("put %s once there is room: %v", key, err)
			}
			time.Sleep(100 * time.Millisecond) // polling interval: heartbeats come every 200 ms
		}
	}
	wantFull := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrStorageFull) {
			t.Fatalf("%s: %v, want StorageFull", what, err)
		}
	}

	// Fill: 1 MiB puts (data files) until the full replica refuses.
	var i int
	for i = 0; ; i++ {
		if i > 2*disk>>20 {
			t.Fatalf("%d MiB stored on a %d MiB disk without StorageFull", i, disk>>20)
		}
		err := put(fmt.Sprintf("big-%03d", i), 1<<20)
		if err != nil {
			wantFull(fmt.Sprintf("put %d", i), err)
			t.Logf("put %d: %v", i, err)
			break
		}
	}
	if len(acked) < 50 {
		t.Fatalf("only %d MiB stored on a %d MiB disk before StorageFull", len(acked), disk>>20)
	}
	st := mc.waitStatus(ctx, "HEALTH_ERR naming the full OSD", func(s *mon.Status) bool {
		return s.Health.Status == mon.HealthErr && slices.ContainsFunc(s.Health.Checks, func(c string) bool {
			return strings.Contains(c, "full osd(s)") && strings.Contains(c, full)
		})
	})
	t.Logf("health: %q", st.Health.Checks)
	// Small puts (Pebble's WAL: this is what killed the OSD before) are
	// refused with the same error. The map says the OSD is full now, so
	// every primary refuses before it applies anything: no object appears.
	for j := range 50 {
		key := fmt.Sprintf("small-%03d", j)
		wantFull("small put "+key, put(key, 4<<10))
		if _, _, err := osdtest.Get(ctx, cl, "full", key, client.GetOptions{}); !errors.Is(err, client.ErrNoSuchKey) {
			t.Fatalf("get %s after its put was refused: %v, want NoSuchKey (the primary applied it)", key, err)
		}
	}
	checkReads := func(what string) {
		t.Helper()
		for key, want := range acked {
			got, _, err := osdtest.Get(ctx, cl, "full", key, client.GetOptions{})
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: get %s: %v", what, key, err)
			}
		}
	}
	checkReads("disk full")

	// Deletes go on, and free the room: writes work again.
	del := func(keys []string) {
		t.Helper()
		for _, key := range keys {
			if err := cl.RemoveObject(ctx, "full", key); err != nil {
				t.Fatalf("delete %s on a full disk: %v", key, err)
			}
			delete(acked, key)
		}
	}
	keys := slices.Sorted(maps.Keys(acked))
	del(keys[:len(keys)/2])
	mc.waitStatus(ctx, "no full OSD", func(s *mon.Status) bool {
		return !slices.ContainsFunc(s.Health.Checks, func(c string) bool { return strings.Contains(c, "full osd(s)") })
	})
	putOnceRoom("after-delete")

	// Restart on a disk someone else filled to the last byte.
	data := filepath.Join(mc.dir, "osd-2")
	stopped := time.Now()
	mc.kill(2, syscall.SIGTERM)
	t.Logf("SIGTERM stopped the OSD in %v", time.Since(stopped).Round(time.Millisecond))
	filler := smallfs.Fill(t, data, 0)
	mc.start(2)
	mc.waitStatus(ctx, "the OSD on a full disk up again", func(s *mon.Status) bool { return s.OSDs.Up == 3 })
	// The map that marks it up says it is full (its boot said so); the
	// client's ops carry that epoch to the primaries.
	for up := mc.mon.Map().Epoch(); cl.Map().Epoch() < up; {
		if ctx.Err() != nil {
			t.Fatalf("the client is at epoch %d, the mon at %d", cl.Map().Epoch(), up)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	if o, _ := mc.mon.Map().OSD(mc.idOf(2)); o.Fullness < osdpb.Fullness_FULLNESS_FULL {
		t.Fatalf("the map marks the restarted OSD up as %v", o.Fullness)
	}
	checkReads("restarted on a full disk")
	wantFull("put to a restarted full OSD", put("refused", 4<<10))
	keys = slices.Sorted(maps.Keys(acked))
	del(keys[:4])
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The OSD makes its reserve again and measures its disk every second.
	putOnceRoom("after-restart")
	mc.waitStatus(ctx, "every PG active+clean", func(s *mon.Status) bool {
		return s.PGs["active+clean"] == s.PGTotal && s.OSDs.Up == 3
	})
	checkReads("space back")
	mc.checkStoredCopies(ctx, []int{0, 1, 2}, "full", slices.Sorted(maps.Keys(acked)), func(key string, got []byte) bool {
		return bytes.Equal(got, acked[key])
	})
}

// TestBackfillWaitsForRoom: an OSD joins with its disk over backfillfull
// (a 192 MiB tmpfs 92% filled by another file). The PGs that move to it do
// not backfill into it: they show backfill_toofull and health warns, while
// their writes go on at the old members. Once the file is gone the
// backfill runs and every PG ends active+clean with the newcomer holding
// its copies.
func TestBackfillWaitsForRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	// Big enough that the 8 MiB reserve (kept free while it cannot be
	// made) is well under the 8% left: the PGs it becomes primary of must
	// still copy what they serve.
	const disk = 192 << 20
	mc := startMonCluster(t, monClusterOptions{OSDs: 2, DefaultFullRatios: true, SmallDisks: map[int]int64{0: roomyDisk, 1: roomyDisk, 2: disk},
		Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: 10 * time.Minute,
			Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 2, MinSize: 1, PgCount: 8}}})
	ctx := ctxT(t, 3*time.Minute)
	cl := mc.healthyClient(ctx, 20*time.Second, "room")
	acked := map[string][]byte{}
	for i := range 40 {
		key := fmt.Sprintf("k%02d", i)
		body := osdtest.Payload(64<<10, uint64(i+1))
		if _, err := osdtest.Put(ctx, cl, "room", key, body, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		acked[key] = body
	}

	data := filepath.Join(mc.dir, "osd-2")
	smallfs.MountAt(t, data, disk)
	filler := smallfs.Fill(t, data, disk*8/100)
	mc.start(2)
	st := mc.waitStatus(ctx, "PGs backfill_toofull", func(s *mon.Status) bool {
		for state, n := range s.PGs {
			if n > 0 && strings.Contains(state, "backfill_toofull") {
				return s.OSDs.Up == 3 && slices.ContainsFunc(s.Health.Checks, func(c string) bool { return strings.Contains(c, "backfillfull osd(s)") })
			}
		}
		return false
	})
	t.Logf("newcomer over backfillfull: %v %q", st.PGs, st.Health.Checks)
	// Nothing backfills into it: for three seconds (three beacons, and
	// retries after 1 and 2 s) no PG it holds a copy of gets clean.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if s := mc.status(ctx); s.PGs["active+clean"] == s.PGTotal {
			t.Fatalf("every PG clean while the newcomer is over backfillfull: it was backfilled (%v)", s.PGs)
		}
		time.Sleep(100 * time.Millisecond) // polling interval of a bounded watch
	}
	// Writes go on meanwhile, to every PG, the ones waiting for room on
	// the newcomer included (it acks them unapplied, its walk copies them
	// later), each at once: a client that retries for no more than 3 s
	// (before, a replica refused them while its failed backfills backed
	// off, up to 30 s at a time).
	quick := mc.client(t, 3*time.Second)
	pool, _ := cl.Map().PoolByName("default")
	for round := range 3 {
		for pg := range pool.PgCount {
			key := keysInPG(pool, "room", pg, fmt.Sprintf("during%d", round), 1)[0]
			body := osdtest.Payload(64<<10, uint64(100+round*8)+uint64(pg))
			if _, err := osdtest.Put(ctx, quick, "room", key, body, client.PutOptions{}); err != nil {
				t.Fatalf("put to pg %d.%x while a member waits for room to backfill: %v", pool.Id, pg, err)
			}
			acked[key] = body
		}
	}
	if s := mc.status(ctx); s.PGs["active+clean"] == s.PGTotal {
		t.Fatalf("every PG clean while the newcomer is over backfillfull: %v", s.PGs)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	mc.waitStatus(ctx, "every PG active+clean", func(s *mon.Status) bool {
		return s.OSDs.Up == 3 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == mon.HealthOK
	})
	copies := mc.checkStoredCopies(ctx, []int{0, 1, 2}, "room", slices.Sorted(maps.Keys(acked)), func(key string, got []byte) bool {
		return bytes.Equal(got, acked[key])
	})
	if copies[mc.idOf(2)] == 0 {
		t.Fatalf("the newcomer holds no copies: %v", copies)
	}
}

// TestPutsShareStatfs: a put measures each member's data disk at most once
// (the OSD's full-ratio check and the store's own floor share one statfs),
// on the primary and on its replicas alike, and puts within 100 ms of a
// measure reuse it (store.RecentSpace): a burst of small puts costs each
// member at most one statfs per 100 ms, whatever the machine's speed; the
// OSDs' once-a-second polls come on top.
func TestPutsShareStatfs(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	cl := c.Client(t, nil)
	ctx := ctxT(t, time.Minute)
	if err := cl.MakeBucket(ctx, "statfs"); err != nil {
		t.Fatal(err)
	}
	measures := func() int64 { return storeStat(c, func(st store.Stats) int64 { return st.SpaceMeasures }) }
	const puts, inFlight = 200, 16
	start, before := time.Now(), measures()
	var wg sync.WaitGroup
	for w := range inFlight {
		wg.Go(func() {
			for i := w; i < puts; i += inFlight {
				if _, err := osdtest.Put(ctx, cl, "statfs", fmt.Sprint(i), osdtest.Payload(4<<10, uint64(i)), client.PutOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, took := measures()-before, time.Since(start)
	members := int64(len(c.OSDs))
	polls := members * (int64(took/time.Second) + 2)
	if most := min(puts, int64(took/(100*time.Millisecond))+1) * members; got > most+polls {
		t.Fatalf("%d puts on 3 replicas in %v measured the disks %d times; want at most %d, and %d polls", puts, took.Round(time.Millisecond), got, most, polls)
	}
}

// TestStoreFloorCountsAsFull: an OSD whose disk has less free than its
// store's floor (two memtables and the reserve not yet made) and a usual
// put counts itself full (failsafe) whatever the full ratios say, as its
// store then refuses every put: a durability probe's 300 MiB disk with 8
// MiB memtables refused replica writes at 94% used, below full_ratio, and
// its PGs' puts failed as unacknowledged replica writes, not StorageFull.
func TestStoreFloorCountsAsFull(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4, Tweak: func(cfg *osd.Config) { cfg.Store.MemTableSize = 8 << 20 }})
	o := c.OSDs[0]
	floor := o.Store().Floor()
	if floor < 16<<20 {
		t.Fatalf("floor %d with 8 MiB memtables, want two of them at least", floor)
	}
	total := uint64(300 << 20)
	roomy := store.Space{Total: total, Avail: floor + 8<<20, Reserve: 1}
	short := store.Space{Total: total, Avail: floor + 1<<20, Reserve: 1}
	if r := 1 - float64(short.Avail)/float64(total); r >= 0.95 {
		t.Fatalf("the short disk is %.2f used: past full_ratio already, not the case under test", r)
	}
	if got := o.FullnessOfForTest(roomy); got == osdpb.Fullness_FULLNESS_FAILSAFE {
		t.Fatalf("room for a put above the floor: %v", got)
	}
	if got := o.FullnessOfForTest(short); got != osdpb.Fullness_FULLNESS_FAILSAFE {
		t.Fatalf("less than a put above the store's floor: %v, want FAILSAFE", got)
	}
}
