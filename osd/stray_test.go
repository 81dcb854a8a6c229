package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
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

// strayCluster is four OSDs (three replicas) with a bucket of objects,
// small and in data files, in every PG; leaver is an OSD that a map with
// it out takes out of the acting set of seed, a PG it holds.
type strayCluster struct {
	c          *osdtest.Cluster
	ctx        context.Context
	cl         *client.Client
	pool       *osdpb.Pool
	want       map[string][]byte
	leaver     uint32
	seed, sid  uint32
	out        *placement.Map
	joiner     uint32 // the OSD that takes leaver's place in seed
	keysOfSeed []string
	// strayInterval is what OSDs (re)started from now on get.
	strayInterval time.Duration
}

const strayBucket = "stray"

func startStrayCluster(t *testing.T) *strayCluster { t.Helper(); return startStray(t, false) }

// startStray starts a strayCluster; with leads, seed is a PG the leaver
// is the primary of before it leaves.
func startStray(t *testing.T, leads bool) *strayCluster {
	t.Helper()
	s := &strayCluster{ctx: ctxT(t, 2*time.Minute), want: map[string][]byte{}, strayInterval: 50 * time.Millisecond}
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.StrayInterval = s.strayInterval
	}})
	s.c = c
	s.pool, _ = c.Map.PoolByName(placement.DefaultPoolName)
	s.cl = c.Client(t, nil)
	if err := s.cl.MakeBucket(s.ctx, strayBucket); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		key := fmt.Sprintf("k%03d", i)
		n := 1000 + i
		if i%4 == 0 {
			n = 300 << 10 // a data file
		}
		s.want[key] = osdtest.Payload(n, uint64(i))
		if _, err := osdtest.Put(s.ctx, s.cl, strayBucket, key, s.want[key], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.leaver = 1
	var err error
	s.out, err = c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[s.leaver].In = false })
	if err != nil {
		t.Fatal(err)
	}
	for s.seed = 0; s.seed < s.pool.PgCount; s.seed++ {
		before, after := c.Map.ActingSet(s.pool.Id, s.seed), s.out.ActingSet(s.pool.Id, s.seed)
		if !slices.Contains(before, s.leaver) || len(after) != int(s.pool.Size) || leads && before[0] != s.leaver {
			continue
		}
		for k := range s.want {
			if placement.PGOf(s.pool, strayBucket, k) == s.seed {
				s.keysOfSeed = append(s.keysOfSeed, k)
			}
		}
		if len(s.keysOfSeed) == 0 {
			continue
		}
		for _, id := range after {
			if !slices.Contains(before, id) {
				s.joiner = id
			}
		}
		break
	}
	if len(s.keysOfSeed) == 0 {
		t.Skip("no PG with objects moves off the leaver in this placement")
	}
	slices.Sort(s.keysOfSeed)
	s.sid, err = placement.PGID{Pool: s.pool.Id, Seed: s.seed}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *strayCluster) adopt(t *testing.T, m *placement.Map) {
	t.Helper()
	for _, o := range s.c.OSDs {
		if err := o.AdoptMap(m); err != nil {
			t.Fatal(err)
		}
	}
}

// objectsAt is how many of seed's objects OSD id's store holds.
func (s *strayCluster) objectsAt(t *testing.T, id uint32) int {
	t.Helper()
	n := 0
	for _, k := range s.keysOfSeed {
		if _, err := s.c.OSDs[id].Store().Head(s.ctx, strayBucket, k); err == nil {
			n++
		}
	}
	return n
}

// dataFileBytes is what the data files under OSD id's store take: the
// space a removal must give back.
func (s *strayCluster) dataFileBytes(t *testing.T, id uint32) int64 {
	t.Helper()
	var n int64
	root := filepath.Join(s.c.Dir, fmt.Sprintf("osd.%d", id), "store", "data")
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // reaped meanwhile
		}
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// leaverPGs are the PGs the leaver's store holds, but the meta PG.
func (s *strayCluster) leaverPGs(t *testing.T) []uint32 {
	t.Helper()
	pgs, err := s.c.OSDs[s.leaver].Store().HeldPGs(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta := osd.MetaStorePG(s.out)
	return slices.DeleteFunc(pgs, func(sid uint32) bool { return sid == meta })
}

// leaverGone waits until the leaver, out of every acting set, holds no
// object, no PG (but the meta PG) and no data-file bytes.
func (s *strayCluster) leaverGone(t *testing.T) {
	t.Helper()
	st := s.c.OSDs[s.leaver].Store()
	osdtest.Eventually(t, time.Minute, "the leaver's stray copies are removed", func() bool {
		return len(s.leaverPGs(t)) == 0 && st.Stats().Objects == 0 && s.dataFileBytes(t, s.leaver) == 0
	})
	if n := s.objectsAt(t, s.leaver); n != 0 {
		t.Fatalf("the leaver still has %d objects of pg %x", n, s.seed)
	}
}

// everyCopy checks that every member of seed's acting set under m holds
// every object of seed, and that the cluster serves every object.
func (s *strayCluster) everyCopy(t *testing.T, m *placement.Map) {
	t.Helper()
	for _, id := range m.ActingSet(s.pool.Id, s.seed) {
		osdtest.Eventually(t, 30*time.Second, fmt.Sprintf("osd.%d holds pg %x", id, s.seed), func() bool {
			return s.objectsAt(t, id) == len(s.keysOfSeed)
		})
	}
	for k, want := range s.want {
		got, _, err := osdtest.Get(s.ctx, s.cl, strayBucket, k, client.GetOptions{})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s: %v (%d bytes, want %d)", k, err, len(got), len(want))
		}
	}
}

// TestStrayRemoved: an OSD marked out keeps its copies until the PGs are
// clean on their new acting sets, then removes them, data files and all,
// and forgets them; its empty copy answers peering as incomplete (no
// witness of what it held); marked in again, it is backfilled from
// nothing.
func TestStrayRemoved(t *testing.T) {
	s := startStrayCluster(t)
	before := s.dataFileBytes(t, s.leaver)
	if before == 0 || s.objectsAt(t, s.leaver) != len(s.keysOfSeed) {
		t.Fatalf("the leaver holds %d data-file bytes and %d of %d objects before it leaves", before, s.objectsAt(t, s.leaver), len(s.keysOfSeed))
	}
	s.adopt(t, s.out)
	s.leaverGone(t)
	s.everyCopy(t, s.out)
	leaver := s.c.OSDs[s.leaver]
	osdtest.Eventually(t, 30*time.Second, "the leaver forgets the removed pg", func() bool {
		return !leaver.HoldsPGStateForTest(s.sid)
	})
	info, err := leaver.QueryForTest(s.pool.Id, s.seed, s.out.ActingSet(s.pool.Id, s.seed)[0])
	if err != nil || !info.Incomplete || info.Last.GetSeq() != 0 {
		t.Fatalf("the removed copy answers a query with %v (%v); want an empty, incomplete copy", info, err)
	}

	// Back in: the leaver rejoins its PGs with empty copies and is
	// backfilled.
	back, err := s.out.With(func(pb *osdpb.ClusterMap) { pb.Osds[s.leaver].In = true })
	if err != nil {
		t.Fatal(err)
	}
	s.adopt(t, back)
	s.everyCopy(t, back)
	for _, k := range s.keysOfSeed {
		_, got, err := s.c.OSDs[s.leaver].Store().ReadRange(s.ctx, strayBucket, k, 0, -1, nil)
		if err != nil || !bytes.Equal(got, s.want[k]) {
			t.Fatalf("the leaver's copy of %s after it came back: %v", k, err)
		}
	}
}

// TestStrayKeptWhileBackfilling: while the OSD that takes the leaver's
// place in a PG has not copied it, the PG is not clean, and the leaver's
// copy stays however often it asks.
func TestStrayKeptWhileBackfilling(t *testing.T) {
	s := startStrayCluster(t)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { osd.RecoveryStarting.Set(nil); free() })
	osd.RecoveryStarting.Set(func(id, sid uint32) error {
		if id == s.joiner && sid == s.sid {
			<-release
		}
		return nil
	})
	primary := s.c.OSDs[s.out.ActingSet(s.pool.Id, s.seed)[0]]
	s.adopt(t, s.out)
	// The other PGs the leaver left become clean and go; this one stays.
	osdtest.Eventually(t, time.Minute, "the leaver keeps only the held pg", func() bool {
		return slices.Equal(s.leaverPGs(t), []uint32{s.sid})
	})
	// The leaver asks every 50 ms, now about this PG alone; its primary
	// refuses while the joiner is held.
	_, kept0 := primary.StrayAnswers()
	osdtest.Eventually(t, 30*time.Second, "the primary refuses the leaver's removal a few times", func() bool {
		_, kept := primary.StrayAnswers()
		return kept >= kept0+5
	})
	if n := s.objectsAt(t, s.leaver); n != len(s.keysOfSeed) {
		t.Fatalf("the leaver's copy of pg %x lost %d objects while the joiner had not copied them", s.seed, len(s.keysOfSeed)-n)
	}
	if n := s.objectsAt(t, s.joiner); n == len(s.keysOfSeed) {
		t.Fatal("the joiner copied the pg though its recovery was held")
	}
	free()
	s.leaverGone(t)
	s.everyCopy(t, s.out)
}

// TestStrayRemovalInterrupted: a removal cut short (here after its first
// page, as a crash would) leaves the PG refused; the next start finishes
// it in the background, paced as any, the PG refused until it is gone.
func TestStrayRemovalInterrupted(t *testing.T) {
	s := startStrayCluster(t)
	stopped := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { osd.RemovalPage.Set(nil) })
	osd.RemovalPage.Set(func(id, sid uint32) error {
		if id != s.leaver || sid != s.sid {
			return nil
		}
		once.Do(func() { close(stopped) })
		return errors.New("crash")
	})
	s.adopt(t, s.out)
	select {
	case <-stopped:
	case <-s.ctx.Done():
		t.Fatal("the removal of the leaver's copy never began")
	}
	// The removal keeps failing until the OSD stops, as after a crash;
	// the restarted OSD asks nobody (an hour between looks): only its
	// start can resume the removal, which is held after a page here.
	s.c.StopOSD(s.leaver)
	paged, release := make(chan struct{}), make(chan struct{})
	var pagedOnce, freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	t.Cleanup(free)
	osd.RemovalPage.Set(func(id, sid uint32) error {
		if id == s.leaver && sid == s.sid {
			pagedOnce.Do(func() { close(paged) })
			<-release
		}
		return nil
	})
	s.strayInterval = time.Hour
	s.c.StartOSD(s.leaver)
	select {
	case <-paged:
	case <-s.ctx.Done():
		t.Fatal("the restarted leaver never resumed the cut removal")
	}
	var rep osdpb.PGLogPullReply
	if st := askAs(s.ctx, t, s.c, 7, s.leaver, osdpb.MsgType_MSG_PG_LOG_PULL, &osdpb.PGLogPull{Pool: s.pool.Id, Pg: s.seed}, &rep); st != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Fatalf("a log pull from the part-removed copy: %v, %d entries; want SERVICE_UNAVAILABLE", st, len(rep.Entries))
	}
	free()
	osdtest.Eventually(t, 30*time.Second, "the restarted leaver finishes the cut removal", func() bool {
		return !slices.Contains(s.leaverPGs(t), s.sid) && s.objectsAt(t, s.leaver) == 0
	})
	if err := s.c.OSDs[s.leaver].AdoptMap(s.out); err != nil {
		t.Fatal(err)
	}
	s.everyCopy(t, s.out)
}

// TestStrayKeptWhileDown: a map that has the leaver down takes it out of
// its PGs' acting sets (they run undersized until it is up again, as
// after a restart): it keeps its copies, and removes them only once it is
// up and out and they are clean elsewhere.
func TestStrayKeptWhileDown(t *testing.T) {
	s := startStrayCluster(t)
	down, err := s.c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[s.leaver].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	s.adopt(t, down)
	s.everyCopy(t, down)
	leaver := s.c.OSDs[s.leaver]
	rounds := leaver.StrayRounds()
	osdtest.Eventually(t, 30*time.Second, "the leaver looks for strays a few times", func() bool {
		return leaver.StrayRounds() >= rounds+5
	})
	if n := s.objectsAt(t, s.leaver); n != len(s.keysOfSeed) {
		t.Fatalf("the leaver, down in its map, removed %d objects of pg %x", len(s.keysOfSeed)-n, s.seed)
	}
	out, err := down.With(func(pb *osdpb.ClusterMap) { pb.Osds[s.leaver].Up, pb.Osds[s.leaver].In = true, false })
	if err != nil {
		t.Fatal(err)
	}
	s.out = out
	s.adopt(t, out)
	s.leaverGone(t)
	s.everyCopy(t, out)
}

// TestPrimaryAnswersStrays: the primary allows a stray's removal only
// once the PG is clean without it, and never to a copy ahead of its own
// log (the only holder of some write), to an OSD it does not know, to
// one whose map it has not seen, nor as a non-primary; PG ids out of
// range are refused.
func TestPrimaryAnswersStrays(t *testing.T) {
	s := startStrayCluster(t)
	// The leaver's questions are asked here, under its name.
	s.c.StopOSD(s.leaver)
	for _, o := range s.c.OSDs {
		if o != nil {
			if err := o.AdoptMap(s.out); err != nil {
				t.Fatal(err)
			}
		}
	}
	acting := s.out.ActingSet(s.pool.Id, s.seed)
	primary, replica := acting[0], acting[1]
	ask := func(as, to uint32, q *osdpb.PGStray) (osdpb.Status, bool) {
		t.Helper()
		var rep osdpb.PGStrayReply
		st := askAs(s.ctx, t, s.c, as, to, osdpb.MsgType_MSG_PG_STRAY, q, &rep)
		return st, rep.Remove
	}
	q := func(epoch uint64, pool, pgn uint32, last *osdpb.Version) *osdpb.PGStray {
		return &osdpb.PGStray{Epoch: epoch, Pool: pool, Pg: pgn, Last: last}
	}
	e := s.out.Epoch()
	osdtest.Eventually(t, 30*time.Second, "the primary allows the leaver's removal once the pg is clean", func() bool {
		st, remove := ask(s.leaver, primary, q(e, s.pool.Id, s.seed, &osdpb.Version{}))
		return st == osdpb.Status_OK && remove
	})
	const stranger = 7 // not in the map
	for _, tc := range []struct {
		name   string
		as, to uint32
		q      *osdpb.PGStray
		want   osdpb.Status
	}{
		{"a copy ahead of the primary's log", s.leaver, primary, q(e, s.pool.Id, s.seed, &osdpb.Version{Epoch: e + 100, Seq: 1}), osdpb.Status_OK},
		{"an OSD not in the map", stranger, primary, q(e, s.pool.Id, s.seed, &osdpb.Version{}), osdpb.Status_OK},
		{"a map the primary has not seen", s.leaver, primary, q(e+5, s.pool.Id, s.seed, &osdpb.Version{}), osdpb.Status_STALE_EPOCH},
		{"asking a replica", s.leaver, replica, q(e, s.pool.Id, s.seed, &osdpb.Version{}), osdpb.Status_WRONG_PRIMARY},
		{"pool 65536", s.leaver, primary, q(e, 65536+s.pool.Id, s.seed, nil), osdpb.Status_INVALID_ARGUMENT},
		{"pg out of range", s.leaver, primary, q(e, s.pool.Id, 9999, nil), osdpb.Status_INVALID_ARGUMENT},
	} {
		if st, remove := ask(tc.as, tc.to, tc.q); st != tc.want || remove {
			t.Errorf("%s: status %v, remove %v; want %v and keep", tc.name, st, remove, tc.want)
		}
	}
}

// backMidRemoval takes the leaver out, holds the removal of its copy of
// seed after its first page, and returns a map with the leaver in again
// and what lets the removal go on.
func (s *strayCluster) backMidRemoval(t *testing.T) (back *placement.Map, free func()) {
	t.Helper()
	inRemoval, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free = sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() { osd.RemovalPage.Set(nil); free() })
	osd.RemovalPage.Set(func(id, sid uint32) error {
		if id == s.leaver && sid == s.sid {
			once.Do(func() { close(inRemoval) })
			<-release
		}
		return nil
	})
	s.adopt(t, s.out)
	select {
	case <-inRemoval:
	case <-s.ctx.Done():
		t.Fatal("the removal of the leaver's copy never began")
	}
	back, err := s.out.With(func(pb *osdpb.ClusterMap) { pb.Osds[s.leaver].In = true })
	if err != nil {
		t.Fatal(err)
	}
	return back, free
}

// TestStrayRejoinsMidRemoval: a stray marked in again while its copy is
// being removed takes no RepOp, push or query for the PG until the copy
// is gone (a half-removed copy that acked a push as current would leave
// the PG "clean" with an empty replica), then is backfilled whole.
func TestStrayRejoinsMidRemoval(t *testing.T) {
	s := startStrayCluster(t)
	back, free := s.backMidRemoval(t)
	s.adopt(t, back)
	// The PG peers without the leaver's answer and serves; its push to
	// the leaver is refused while the removal holds.
	if _, _, err := osdtest.Get(s.ctx, s.cl, strayBucket, s.keysOfSeed[0], client.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	rounds := s.c.OSDs[s.leaver].StrayRounds()
	osdtest.Eventually(t, 30*time.Second, "a few rounds pass while the removal holds", func() bool {
		return s.c.OSDs[s.leaver].StrayRounds() >= rounds+5
	})
	free()
	s.everyCopy(t, back)
	for _, k := range s.keysOfSeed {
		_, got, err := s.c.OSDs[s.leaver].Store().ReadRange(s.ctx, strayBucket, k, 0, -1, nil)
		if err != nil || !bytes.Equal(got, s.want[k]) {
			t.Fatalf("the leaver's copy of %s after its removal and backfill: %v", k, err)
		}
	}
}

// TestStrayRejoinsAsPrimaryMidRemoval: a stray that the map makes the
// PG's primary again while its copy is being removed keeps the PG's state
// (and its peering mark) when the removal ends: it serves nothing until
// it has peered and pulled the PG back, then serves every object.
func TestStrayRejoinsAsPrimaryMidRemoval(t *testing.T) {
	s := startStray(t, true)
	back, free := s.backMidRemoval(t)
	if back.ActingSet(s.pool.Id, s.seed)[0] != s.leaver {
		t.Skip("marked in again, the leaver does not lead the pg")
	}
	s.adopt(t, back)
	free()
	// Read at once: every read waits for the PG to peer (the client
	// retries), none finds the emptied copy.
	for _, k := range s.keysOfSeed {
		got, _, err := osdtest.Get(s.ctx, s.cl, strayBucket, k, client.GetOptions{})
		if err != nil || !bytes.Equal(got, s.want[k]) {
			t.Fatalf("get %s from the rejoined primary: %v (%d bytes, want %d)", k, err, len(got), len(s.want[k]))
		}
	}
	s.everyCopy(t, back)
}

// TestStrayAnswerHoldsForItsMapOnly: a primary's "remove" answers the map
// the stray asked with. Here the stray is marked in again before it acts
// on the answer, takes an acknowledged write as the only member of a
// one-replica PG, and is marked out again: removing its copy on the old
// answer would lose that write, which no other OSD has yet.
func TestStrayAnswerHoldsForItsMapOnly(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Size: 1, PGs: 8, Tweak: func(cfg *osd.Config) {
		cfg.StrayInterval = 50 * time.Millisecond
	}})
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, strayBucket); err != nil {
		t.Fatal(err)
	}
	const leaver = uint32(1)
	out, err := c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[leaver].In = false })
	if err != nil {
		t.Fatal(err)
	}
	seed := uint32(0)
	for ; seed < pool.PgCount; seed++ {
		if slices.Equal(c.Map.ActingSet(pool.Id, seed), []uint32{leaver}) && len(out.ActingSet(pool.Id, seed)) == 1 {
			break
		}
	}
	if seed == pool.PgCount {
		t.Skip("no PG of the leaver's alone in this placement")
	}
	keyOf := func(prefix string) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s%d", prefix, i); placement.PGOf(pool, strayBucket, k) == seed {
				return k
			}
		}
	}
	late := keyOf("late")
	if _, err := osdtest.Put(ctx, cl, strayBucket, keyOf("old"), []byte("old"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sid, _ := placement.PGID{Pool: pool.Id, Seed: seed}.StoreID()
	answered, release := make(chan struct{}), make(chan struct{})
	var once, freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	t.Cleanup(func() { osd.StrayAllowed.Set(nil); free() })
	osd.StrayAllowed.Set(func(id, s uint32) {
		if id == leaver && s == sid {
			once.Do(func() { close(answered); <-release })
		}
	})
	adopt := func(m *placement.Map, ids ...uint32) {
		for _, id := range ids {
			if err := c.OSDs[id].AdoptMap(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	adopt(out, 0, 1, 2)
	select {
	case <-answered:
	case <-ctx.Done():
		t.Fatal("the primary never allowed the removal")
	}
	// The leaver holds the answer; meanwhile it is a member again.
	back, _ := out.With(func(pb *osdpb.ClusterMap) { pb.Osds[leaver].In = true })
	adopt(back, 0, 1, 2)
	if got := back.ActingSet(pool.Id, seed); !slices.Equal(got, []uint32{leaver}) {
		t.Skipf("marked in again, the PG's acting set is %v", got)
	}
	if _, err := osdtest.Put(ctx, cl, strayBucket, late, []byte("acknowledged"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	out2, _ := back.With(func(pb *osdpb.ClusterMap) { pb.Osds[leaver].In = false })
	adopt(out2, leaver)
	free() // the leaver acts on the answer now, at a newer map
	rounds := c.OSDs[leaver].StrayRounds()
	osdtest.Eventually(t, 30*time.Second, "the leaver looks for strays again", func() bool {
		return c.OSDs[leaver].StrayRounds() > rounds+1
	})
	adopt(out2, 0, 2)
	var lastErr error
	osdtest.Eventually(t, time.Minute, "the acknowledged write is read back", func() bool {
		got, _, err := osdtest.Get(ctx, cl, strayBucket, late, client.GetOptions{})
		lastErr = err
		return err == nil && bytes.Equal(got, []byte("acknowledged"))
	})
	if lastErr != nil {
		t.Fatal(lastErr)
	}
}

// TestStrayReadRacingRemoval: a peer's log pull or backfill step that was
// admitted just before the stray's removal began, and reads while part
// of the copy is gone (or after it is all gone), is refused, retriably,
// instead of handing the asker a part of the copy as if whole.
func TestStrayReadRacingRemoval(t *testing.T) {
	s := startStrayCluster(t)
	type gate struct {
		ch   chan struct{}
		open func()
	}
	newGate := func() gate {
		ch := make(chan struct{})
		g := gate{ch, sync.OnceFunc(func() { close(ch) })}
		t.Cleanup(g.open)
		return g
	}
	allowed, start, paged, finish := newGate(), newGate(), newGate(), newGate()
	held := [2]gate{newGate(), newGate()}
	goOn := [2]gate{newGate(), newGate()}
	var reads atomic.Int32
	var armed atomic.Bool
	t.Cleanup(func() {
		osd.StrayAllowed.Set(nil)
		osd.RemovalPage.Set(nil)
		osd.CopyReadBegun.Set(nil)
	})
	var allowedOnce, pagedOnce sync.Once
	osd.StrayAllowed.Set(func(id, sid uint32) {
		if id == s.leaver && sid == s.sid {
			allowedOnce.Do(func() { allowed.open(); <-start.ch })
		}
	})
	osd.RemovalPage.Set(func(id, sid uint32) error {
		if id == s.leaver && sid == s.sid {
			pagedOnce.Do(func() { paged.open(); <-finish.ch })
		}
		return nil
	})
	osd.CopyReadBegun.Set(func(id, sid uint32) {
		if id != s.leaver || sid != s.sid || !armed.Load() {
			return
		}
		if i := reads.Add(1) - 1; i < 2 {
			held[i].open()
			<-goOn[i].ch
		}
	})
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-s.ctx.Done():
			t.Fatalf("%s never happened", what)
		}
	}
	ask := func(as uint32, mt osdpb.MsgType, req proto.Message, rep repliedTo) <-chan osdpb.Status {
		got := make(chan osdpb.Status, 1)
		go func() {
			st := osdpb.Status(-1) // askAs gave up (no reply)
			defer func() { got <- st }()
			st = askAs(s.ctx, t, s.c, as, s.leaver, mt, req, rep)
		}()
		return got
	}
	status := func(got <-chan osdpb.Status) osdpb.Status {
		t.Helper()
		select {
		case st := <-got:
			return st
		case <-s.ctx.Done():
			t.Fatal("no answer")
			return 0
		}
	}
	s.adopt(t, s.out)
	wait(allowed.ch, "the primary's remove")

	// Two reads pass their first check before the removal begins: a
	// backfill step and a log pull, both from the start of the PG.
	armed.Store(true)
	var bfRep osdpb.PGBackfillReply
	var lpRep osdpb.PGLogPullReply
	bf := ask(7, osdpb.MsgType_MSG_PG_BACKFILL, &osdpb.PGBackfill{Pool: s.pool.Id, Pg: s.seed}, &bfRep)
	wait(held[0].ch, "the backfill step's admission")
	lp := ask(8, osdpb.MsgType_MSG_PG_LOG_PULL, &osdpb.PGLogPull{Pool: s.pool.Id, Pg: s.seed}, &lpRep)
	wait(held[1].ch, "the log pull's admission")

	start.open()
	wait(paged.ch, "the removal's first page")
	// The backfill step reads now, with the first page gone.
	goOn[0].open()
	if st := status(bf); st != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Errorf("a backfill step that read a part-removed copy: %v (done %v, entry %v); want SERVICE_UNAVAILABLE", st, bfRep.Done, bfRep.Entry)
	}
	// The log pull reads once the removal has ended and the PG's state
	// is gone: what it reads is not the copy it was admitted to.
	finish.open()
	osdtest.Eventually(t, 30*time.Second, "the removal ends", func() bool {
		return !s.c.OSDs[s.leaver].HoldsPGStateForTest(s.sid)
	})
	goOn[1].open()
	if st := status(lp); st != osdpb.Status_SERVICE_UNAVAILABLE {
		t.Errorf("a log pull admitted before the removal: %v (%d entries); want SERVICE_UNAVAILABLE", st, len(lpRep.Entries))
	}
}
