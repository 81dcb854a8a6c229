package mon

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestBootAssignsIDs(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	if !m.IsLeader() {
		t.Fatal("a lone mon does not lead")
	}
	if mp := m.Map(); mp.Epoch() != 1 || len(mp.Proto().Osds) != 0 || m.FSID() == "" {
		t.Fatalf("first map: epoch %d, %d OSDs, fsid %q", mp.Epoch(), len(mp.Proto().Osds), m.FSID())
	}
	c := newTestClient(t, nil, m.Addr())

	for n := range 3 {
		rep := mustBoot(t, c, bootOf(n))
		if rep.Id != uint32(n) || rep.Fsid != m.FSID() || rep.Map.GetEpoch() != uint64(2+n) {
			t.Fatalf("boot %d: id %d fsid %s epoch %d", n, rep.Id, rep.Fsid, rep.Map.GetEpoch())
		}
		o := osdOf(t, m.Map(), rep.Id)
		if !o.Up || !o.In || o.Weight != 1 || o.UpFrom != rep.Map.Epoch || o.Host != bootOf(n).Host || o.Uuid != bootOf(n).Uuid {
			t.Fatalf("osd.%d after boot: %v", rep.Id, o)
		}
	}

	// The same uuid again, with or without its id: the same id, a new
	// incarnation (up_from).
	b := bootOf(1)
	b.PublicAddr = "tcp://127.0.0.1:9901"
	rep := mustBoot(t, c, b)
	if rep.Id != 1 {
		t.Fatalf("re-boot of uuid-1 got id %d", rep.Id)
	}
	if o := osdOf(t, m.Map(), 1); o.PublicAddr != b.PublicAddr || o.UpFrom != rep.Map.Epoch {
		t.Fatalf("re-boot did not update osd.1: %v", o)
	}
	b.HasId, b.Id, b.Fsid = true, 1, m.FSID()
	if rep := mustBoot(t, c, b); rep.Id != 1 {
		t.Fatalf("re-boot with id 1 got %d", rep.Id)
	}

	// Another daemon claiming osd.1, an id that does not exist, another
	// cluster: WRONG_CLUSTER, not retried.
	thief := bootOf(7)
	thief.HasId, thief.Id = true, 1
	_, err := c.Boot(ctxFor(t, 10*time.Second), thief)
	if statusOf(err) != osdpb.Status_WRONG_CLUSTER {
		t.Fatalf("uuid-7 claiming osd.1: %v", err)
	}
	t.Logf("claim refused: %v", err)
	ghost := bootOf(8)
	ghost.HasId, ghost.Id = true, 42
	if _, err := c.Boot(ctxFor(t, 10*time.Second), ghost); statusOf(err) != osdpb.Status_WRONG_CLUSTER {
		t.Fatalf("boot as missing osd.42: %v", err)
	}
	alien := bootOf(9)
	alien.Fsid = "another-cluster"
	if _, err := c.Boot(ctxFor(t, 10*time.Second), alien); statusOf(err) != osdpb.Status_WRONG_CLUSTER {
		t.Fatalf("boot with another fsid: %v", err)
	}
	// A refused boot writes no map.
	before := m.Map().Epoch()
	if _, err := c.Boot(ctxFor(t, 10*time.Second), &osdpb.MonBoot{PublicAddr: "tcp://127.0.0.1:1"}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("boot without a uuid: %v", err)
	}
	if _, err := c.Boot(ctxFor(t, 10*time.Second), &osdpb.MonBoot{Uuid: "u", PublicAddr: "nonsense"}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("boot with a bad address: %v", err)
	}
	if got := m.Map().Epoch(); got != before {
		t.Fatalf("refused boots moved the epoch from %d to %d", before, got)
	}

	// Lowest free id: after osd.1 is removed, a new OSD gets 1.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{1}})
	if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "osd rm", Ids: []uint32{1}}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), "still in") {
		t.Fatalf("osd rm of an OSD down but in: %v", err)
	}
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{1}})
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd rm", Ids: []uint32{1}})
	if rep := mustBoot(t, c, bootOf(5)); rep.Id != 1 {
		t.Fatalf("new OSD after osd rm 1 got id %d, want 1", rep.Id)
	}
}

func TestOperatorOutSurvivesReboot(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.DownOutInterval = 300 * time.Millisecond
	cfg.MinInRatio = -1 // with osd.0 out, osd.1 is half the OSDs (TestDownOutMinInRatio)
	m := startTestMon(t, cfg)
	c := newTestClient(t, nil, m.Addr())
	for n := range 2 {
		mustBoot(t, c, bootOf(n))
	}

	// osd.0: the operator marks it out; a reboot keeps it out.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{0}})
	if o := osdOf(t, m.Map(), 0); o.In || o.AutoOut {
		t.Fatalf("after osd out: %v", o)
	}
	mustBoot(t, c, bootOf(0))
	if o := osdOf(t, m.Map(), 0); o.In || !o.Up {
		t.Fatalf("operator's out did not survive a reboot: %v", o)
	}

	// osd.1: down, then out by the mon after the interval; a reboot
	// brings it back in.
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{1}})
	if o := osdOf(t, m.Map(), 1); o.Up || o.DownSinceUnixNano == 0 {
		t.Fatalf("after osd down: %v", o)
	}
	eventually(t, 10*time.Second, "osd.1 auto-out", func() bool {
		o := osdOf(t, m.Map(), 1)
		return !o.In && o.AutoOut
	})
	mustBoot(t, c, bootOf(1))
	if o := osdOf(t, m.Map(), 1); !o.In || o.AutoOut || !o.Up || o.DownSinceUnixNano != 0 {
		t.Fatalf("auto-out OSD after reboot: %v", o)
	}
	// osd.0 is up and out: no down-out business. An operator "osd in".
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd in", Ids: []uint32{0}})
	if o := osdOf(t, m.Map(), 0); !o.In {
		t.Fatalf("after osd in: %v", o)
	}
	// Commands that change nothing write no map.
	before := m.Map().Epoch()
	if rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd in", Ids: []uint32{0, 1}}); rep.Epoch != before {
		t.Fatalf("a no-op osd in moved the epoch to %d", rep.Epoch)
	}
	if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{0, 77}}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("osd out of an unknown id: %v", err)
	}
	if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "osd rm", Ids: []uint32{0}}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("osd rm of an up OSD: %v", err)
	}
	// A weight beyond CRUSH's limit would take every PG.
	for _, w := range []float64{MaxWeight + 1, 1e300, math.Inf(1), math.NaN(), -1} {
		if _, err := c.Command(ctxFor(t, 10*time.Second), &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: w}); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
			t.Fatalf("osd reweight to %v: %v", w, err)
		}
	}
	if got := m.Map().Epoch(); got != before {
		t.Fatalf("refused commands moved the epoch from %d to %d", before, got)
	}
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: 2.5})
	if o := osdOf(t, m.Map(), 0); o.Weight != 2.5 {
		t.Fatalf("after reweight: %v", o)
	}
}

// TestOSDLost: `osd lost` needs --yes-i-really-mean-it and a down OSD; it
// stamps lost_at with the epoch it makes, once, and again only after the
// OSD came back (up_from past the loss).
func TestOSDLost(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, m.Addr())
	for n := range 2 {
		mustBoot(t, c, bootOf(n))
	}
	refused := func(cmd *osdpb.MonCommand, why string) {
		t.Helper()
		before := m.Map().Epoch()
		if _, err := c.Command(ctxFor(t, 10*time.Second), cmd); statusOf(err) != osdpb.Status_INVALID_ARGUMENT || !strings.Contains(err.Error(), why) {
			t.Fatalf("%s %v (sure %v): %v, want INVALID_ARGUMENT saying %q", cmd.Prefix, cmd.Ids, cmd.Sure, err, why)
		}
		if got := m.Map().Epoch(); got != before {
			t.Fatalf("refused osd lost moved the epoch from %d to %d", before, got)
		}
	}
	refused(&osdpb.MonCommand{Prefix: "osd lost", Ids: []uint32{1}, Sure: true}, "is up")
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{1}})
	refused(&osdpb.MonCommand{Prefix: "osd lost", Ids: []uint32{1}}, "--yes-i-really-mean-it")
	refused(&osdpb.MonCommand{Prefix: "osd lost", Ids: []uint32{9}, Sure: true}, "no such OSD")
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd lost", Ids: []uint32{1}, Sure: true})
	if o := osdOf(t, m.Map(), 1); o.LostAt != rep.Epoch || o.LostAt == 0 {
		t.Fatalf("osd.1 lost_at %d after osd lost made epoch %d", o.LostAt, rep.Epoch)
	}
	if got := osdOf(t, m.Map(), 0).LostAt; got != 0 {
		t.Fatalf("osd.0 lost_at %d", got)
	}
	lostAt := rep.Epoch
	if again := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd lost", Ids: []uint32{1}, Sure: true}); again.Epoch != lostAt {
		t.Fatalf("osd lost of an OSD lost already moved the epoch to %d", again.Epoch)
	}
	// It comes back, then goes for good again: a new loss.
	mustBoot(t, c, bootOf(1))
	mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{1}})
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd lost", Ids: []uint32{1}, Sure: true})
	if o := osdOf(t, m.Map(), 1); o.LostAt != rep.Epoch || o.LostAt <= lostAt {
		t.Fatalf("osd.1 lost_at %d after a second loss at epoch %d (first %d)", o.LostAt, rep.Epoch, lostAt)
	}
}

// TestBootBorn: a boot records the epoch the OSD's store was made (born)
// for a new OSD and for a store that says it is new (a replaced disk under
// the old id), and keeps it for a restart on the old store, so that peering
// gives up what the id held before a new store (placement.Map.GivenUp).
func TestBootBorn(t *testing.T) {
	pb := &osdpb.ClusterMap{Epoch: 9, Fsid: "f", Osds: []*osdpb.OSDInfo{
		{Id: 0, Uuid: "u0", UpFrom: 4, Born: 2},
		{Id: 1, Uuid: "u1"}, // made by osd create, never booted
		{Id: 2, Uuid: "u2", UpFrom: 3},
	}}
	boot := func(b *osdpb.MonBoot, want uint64) {
		t.Helper()
		id, err := applyBoot(pb, b)
		if err != nil {
			t.Fatal(err)
		}
		if o := osdByID(pb, id); o.Born != want {
			t.Fatalf("boot %+v: osd.%d born %d, want %d", b, id, o.Born, want)
		}
		pb.Epoch++
	}
	boot(&osdpb.MonBoot{HasId: true, Id: 0, Uuid: "u0", PublicAddr: "tcp://127.0.0.1:1"}, 2)  // a restart
	boot(&osdpb.MonBoot{HasId: true, Id: 1, Uuid: "u1", PublicAddr: "tcp://127.0.0.1:2"}, 11) // first boot
	boot(&osdpb.MonBoot{HasId: true, Id: 2, Uuid: "u2", PublicAddr: "tcp://127.0.0.1:3", FreshStore: true}, 12)
	boot(&osdpb.MonBoot{Uuid: "u3", PublicAddr: "tcp://127.0.0.1:4"}, 13) // a new OSD
	boot(&osdpb.MonBoot{HasId: true, Id: 2, Uuid: "u2", PublicAddr: "tcp://127.0.0.1:3"}, 12)
	// Each boot says what its build does: an upgraded OSD's, and one
	// rolled back to an older build.
	for _, f := range []uint64{placement.Features, 0} {
		boot(&osdpb.MonBoot{HasId: true, Id: 0, Uuid: "u0", PublicAddr: "tcp://127.0.0.1:1", Features: f}, 2)
		if got := osdByID(pb, 0).Features; got != f {
			t.Fatalf("osd.0 booted with features %#x: the map says %#x", f, got)
		}
	}
}
