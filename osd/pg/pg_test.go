package pg_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/pg"
)

// machine wraps a *pg.PG for scripted tests: every Step must succeed.
type machine struct {
	t *testing.T
	*pg.PG
}

func newMachine(t *testing.T, self pg.OSDID, local pg.PeerInfo) *machine {
	t.Helper()
	return &machine{t, pg.New(pg.Config{Self: self, ID: pg.ID{Pool: 1, Seed: 0x1f}, Local: local})}
}

func (m *machine) step(evs ...pg.Event) *machine {
	m.t.Helper()
	for _, ev := range evs {
		if err := m.Step(ev); err != nil {
			m.t.Fatalf("Step(%#v): %v", ev, err)
		}
	}
	return m
}

// maps feeds epochs first, first+1, ... with the given acting sets, pool
// size 3 and min_size 2.
func (m *machine) maps(first pg.Epoch, acting ...[]pg.OSDID) *machine {
	m.t.Helper()
	for i, a := range acting {
		m.step(pg.AdvanceMap{Epoch: first + pg.Epoch(i), Acting: a, Size: 3, MinSize: 2})
	}
	return m
}

// expect checks the machine's state and serving, through Ready and the
// accessors both.
func (m *machine) expect(state string, serving bool) pg.Ready {
	m.t.Helper()
	rd := m.Ready()
	if rd.State.String() != state || rd.Serving != serving {
		m.t.Fatalf("state %s serving %v, want %s serving %v", rd.State, rd.Serving, state, serving)
	}
	if m.State() != rd.State || m.Serving() != serving || (m.CanServe() == nil) != serving {
		m.t.Fatalf("accessors disagree with Ready: %s %v %v", m.State(), m.Serving(), m.CanServe())
	}
	return rd
}

func osds(ids ...pg.OSDID) []pg.OSDID { return ids }

func v(e pg.Epoch, s uint64) pg.Version { return pg.Version{Epoch: e, Seq: s} }

func queried(rd pg.Ready) []pg.OSDID {
	var ids []pg.OSDID
	for _, q := range rd.Queries {
		ids = append(ids, q.To)
	}
	return ids
}

func wantQueries(t *testing.T, rd pg.Ready, epoch pg.Epoch, ids ...pg.OSDID) {
	t.Helper()
	if got := queried(rd); !slices.Equal(got, ids) {
		t.Fatalf("queried %v, want %v", got, ids)
	}
	for _, q := range rd.Queries {
		if q.Epoch != epoch {
			t.Fatalf("query %+v, want epoch %d", q, epoch)
		}
	}
}

func TestFreshSingleMember(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{})
	m.expect("unknown", false)
	m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(1), Size: 1, MinSize: 1})
	rd := m.expect("active+clean", true)
	if len(rd.Queries) != 0 || rd.Recover != nil || len(rd.Push) != 0 {
		t.Fatalf("a lone fresh PG asked for work: %+v", rd)
	}
	if rd.LastEpochStarted != 1 || m.LastEpochStarted() != 1 {
		t.Fatalf("LastEpochStarted %d (%d), want 1", rd.LastEpochStarted, m.LastEpochStarted())
	}
	if got := m.NextVersion(); got != v(1, 1) {
		t.Fatalf("NextVersion %v, want 1'1", got)
	}
	m.step(pg.Applied{Version: v(1, 1)})
	if m.HasReady() {
		t.Fatal("a write made Ready news")
	}
	if got := m.NextVersion(); got != v(1, 2) {
		t.Fatalf("NextVersion %v, want 1'2", got)
	}
}

func TestFreshPGPeersWithReplicas(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
	rd := m.expect("peering", false)
	wantQueries(t, rd, 1, 2, 3)
	if err := m.CanServe(); !errors.Is(err, pg.ErrPeering) {
		t.Fatalf("CanServe while peering: %v", err)
	}
	m.step(pg.Info{From: 2, Epoch: 1})
	m.expect("peering", false)
	m.step(pg.Info{From: 3, Epoch: 1})
	rd = m.expect("active+clean", true)
	if rd.LastEpochStarted != 1 || len(rd.Push) != 0 || rd.Recover != nil {
		t.Fatalf("activation: %+v", rd)
	}
	if m.HasReady() {
		t.Fatal("HasReady after Ready with nothing new")
	}
}

// The bug this package exists for: a newly added, empty OSD became the
// primary of a PG with data and served it empty (NoSuchKey).
func TestNewEmptyPrimaryRecoversBeforeServing(t *testing.T) {
	// Epoch 1: [2 3 4] took writes up to 1'5. Epoch 2: osd.1 joins and
	// ranks first. Its PG is new (LastEpochStarted 0), so the daemon feeds
	// it maps from the pool's creation.
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2, 3, 4), osds(1, 2, 3))
	rd := m.expect("peering", false)
	wantQueries(t, rd, 2, 2, 3, 4) // 4 is asked too: it witnessed epoch 1
	full := pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 1), LastEpochStarted: 1}
	m.step(pg.Info{From: 2, Epoch: 2, Info: full}, pg.Info{From: 3, Epoch: 2, Info: full}, pg.Unreachable{From: 4, Epoch: 2})
	rd = m.expect("peering", false)
	if want := (pg.Recover{From: 2, Epoch: 2, Want: v(1, 5)}); rd.Recover == nil || *rd.Recover != want {
		t.Fatalf("Recover %+v, want %+v", rd.Recover, want)
	}
	if r, ok := m.Recovering(); !ok || r.From != 2 {
		t.Fatalf("Recovering() = %+v, %v", r, ok)
	}
	// A pull it did not ask for, and writes elsewhere, change nothing.
	m.step(pg.Recovered{From: 3, Last: v(1, 5)})
	m.expect("peering", false)
	m.step(pg.Recovered{From: 2, Last: v(1, 5)})
	rd = m.expect("active+clean", true)
	if rd.LastEpochStarted != 2 || len(rd.Push) != 0 {
		t.Fatalf("after recovery: %+v", rd)
	}
	if got := m.Local(); got.Last != v(1, 5) {
		t.Fatalf("Local %+v", got)
	}
}

func TestRecoveryCompletesInSteps(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 2), LastEpochStarted: 1}).maps(1, osds(1, 2, 3))
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 9)}}, pg.Info{From: 3, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 2)}})
	rd := m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.Have != v(1, 2) || rd.Recover.Want != v(1, 9) {
		t.Fatalf("Recover %+v", rd.Recover)
	}
	// The pull stopped short (the daemon's batch): pull the rest.
	m.step(pg.Recovered{From: 2, Last: v(1, 6)})
	rd = m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.Have != v(1, 6) || rd.Recover.Want != v(1, 9) {
		t.Fatalf("second Recover %+v", rd.Recover)
	}
	m.step(pg.Recovered{From: 2, Last: v(1, 9)})
	rd = m.expect("active+recovering+degraded", true)
	if want := []pg.PushTarget{{To: 3, Epoch: 1, Have: v(1, 2), Want: v(1, 9)}}; !slices.Equal(rd.Push, want) {
		t.Fatalf("Push %+v, want %+v", rd.Push, want)
	}
}

func TestTieKeepsOwnLog(t *testing.T) {
	same := pg.PeerInfo{Last: v(1, 4), LastEpochStarted: 1}
	m := newMachine(t, 1, same).maps(1, osds(1, 2, 3))
	m.step(pg.Info{From: 2, Epoch: 1, Info: same}, pg.Info{From: 3, Epoch: 1, Info: same})
	if rd := m.expect("active+clean", true); rd.Recover != nil {
		t.Fatalf("pulled an equal log: %+v", rd.Recover)
	}
}

func TestPriorIntervalUnreachableIsDown(t *testing.T) {
	// Epoch 1: [2 3 4] may have taken writes. Epoch 2: all three are gone
	// and [1 5 6] is the acting set; nobody there can stand for epoch 1.
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2, 3, 4), osds(1, 5, 6))
	wantQueries(t, m.Ready(), 2, 2, 3, 4, 5, 6)
	m.step(pg.Info{From: 5, Epoch: 2}, pg.Info{From: 6, Epoch: 2})
	m.step(pg.Unreachable{From: 2, Epoch: 2}, pg.Unreachable{From: 3, Epoch: 2}, pg.Unreachable{From: 4, Epoch: 2})
	m.expect("down", false)
	if err := m.CanServe(); !errors.Is(err, pg.ErrDown) {
		t.Fatalf("CanServe when down: %v", err)
	}
	if got := m.Blocked(); !slices.Equal(got, osds(2, 3, 4)) {
		t.Fatalf("Blocked %v", got)
	}
	// A map that keeps the interval (osd.3 came back up elsewhere) asks
	// the blockers again.
	m.maps(3, osds(1, 5, 6))
	rd := m.expect("peering", false)
	wantQueries(t, rd, 3, 2, 3, 4)
	m.step(pg.Info{From: 3, Epoch: 3, Info: pg.PeerInfo{Last: v(1, 7), LastEpochStarted: 1}})
	m.step(pg.Unreachable{From: 2, Epoch: 3}, pg.Unreachable{From: 4, Epoch: 3})
	rd = m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.From != 3 {
		t.Fatalf("Recover %+v, want from osd.3", rd.Recover)
	}
	// The witness goes away before the pull is done: down again.
	m.step(pg.Unreachable{From: 3, Epoch: 3})
	m.expect("down", false)
	if _, ok := m.Recovering(); ok {
		t.Fatal("still recovering from an unreachable peer")
	}
}

func TestPriorIntervalWithoutWritesNeedsNoWitness(t *testing.T) {
	// Epoch 1: only osd.2 (below min_size 2): it cannot have served.
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2), osds(1, 5, 6))
	wantQueries(t, m.Ready(), 2, 5, 6)
	m.step(pg.Info{From: 5, Epoch: 2}, pg.Info{From: 6, Epoch: 2})
	m.expect("active+clean", true)
}

func TestNewerStartSupersedesOldIntervals(t *testing.T) {
	// Epoch 1: [2 3 4]. Epoch 2: [5 6 7], which went active (its members
	// say LastEpochStarted 2). Epoch 3: [1 5 6]. The epoch 1 members are
	// all gone, but epoch 2's hold everything epoch 1 acknowledged.
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2, 3, 4), osds(5, 6, 7), osds(1, 5, 6))
	wantQueries(t, m.Ready(), 3, 2, 3, 4, 5, 6, 7)
	info := pg.PeerInfo{Last: v(2, 3), LastEpochStarted: 2}
	m.step(pg.Unreachable{From: 2, Epoch: 3}, pg.Unreachable{From: 3, Epoch: 3}, pg.Info{From: 5, Epoch: 3, Info: info})
	// 4 has not answered, but epoch 1 no longer needs a witness; 6 and 7
	// still do (6 is acting, 7 witnesses epoch 2 with 5).
	m.expect("peering", false)
	m.step(pg.Info{From: 6, Epoch: 3, Info: info}, pg.Unreachable{From: 7, Epoch: 3})
	rd := m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.From != 5 || rd.Recover.Want != v(2, 3) {
		t.Fatalf("Recover %+v", rd.Recover)
	}
}

func TestIncompleteWhenMapsAreMissing(t *testing.T) {
	// The daemon fed a new PG from epoch 5 only, but a peer went active at
	// epoch 3: intervals 3 and 4 are unknown.
	m := newMachine(t, 1, pg.PeerInfo{}).maps(5, osds(1, 2, 3))
	m.step(pg.Info{From: 2, Epoch: 5, Info: pg.PeerInfo{Last: v(4, 1), LastEpochStarted: 3}}, pg.Info{From: 3, Epoch: 5})
	m.expect("incomplete", false)
	if err := m.CanServe(); !errors.Is(err, pg.ErrIncomplete) || m.ServesReads() {
		t.Fatalf("incomplete: CanServe %v, ServesReads %v; want ErrIncomplete, no reads", err, m.ServesReads())
	}
}

func TestBelowMinSize(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 3), LastEpochStarted: 1}).maps(1, osds(1, 2, 3), osds(1))
	wantQueries(t, m.Ready(), 2, 2, 3) // members of epoch 1
	m.step(pg.Unreachable{From: 2, Epoch: 2}, pg.Unreachable{From: 3, Epoch: 2})
	rd := m.expect("undersized+degraded+peered", false)
	if err := m.CanServe(); !errors.Is(err, pg.ErrBelowMinSize) || !m.ServesReads() {
		t.Fatalf("below min_size: CanServe %v, ServesReads %v; want ErrBelowMinSize, reads served", err, m.ServesReads())
	}
	if rd.LastEpochStarted != 0 || m.LastEpochStarted() != 1 {
		t.Fatalf("a peered PG moved LastEpochStarted: %d %d", rd.LastEpochStarted, m.LastEpochStarted())
	}
	// Back to min_size: active, undersized.
	m.maps(3, osds(1, 2))
	m.step(pg.Info{From: 2, Epoch: 3, Info: pg.PeerInfo{Last: v(1, 3), LastEpochStarted: 1}}, pg.Unreachable{From: 3, Epoch: 3})
	m.expect("active+undersized+degraded", true)
	if !m.ServesReads() {
		t.Fatal("an active PG does not serve reads")
	}
}

func TestPushesToReplicasBehind(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 1}).maps(1, osds(1, 2, 3))
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 3)}}, pg.Unreachable{From: 3, Epoch: 1})
	// osd.3 did not answer: until its push ends it counts as being
	// filled from nothing (two whole copies remain, min_size 2).
	rd := m.expect("active+backfilling+degraded", true)
	want := []pg.PushTarget{{To: 2, Epoch: 1, Have: v(1, 3), Want: v(1, 5)}, {To: 3, Epoch: 1, Want: v(1, 5)}}
	if !slices.Equal(rd.Push, want) {
		t.Fatalf("Push %+v, want %+v", rd.Push, want)
	}
	m.step(pg.Applied{Version: v(1, 6)}) // writes go on while replicas recover
	m.step(pg.PeerRecovered{OSD: 2, Last: v(1, 6)})
	m.expect("active+backfilling+degraded", true)
	m.step(pg.Unreachable{From: 3, Epoch: 1})
	m.expect("active+degraded", true)
	m.maps(2, osds(1, 2, 3))
	rd = m.expect("active+backfilling+degraded", true)
	if want := []pg.PushTarget{{To: 3, Epoch: 2, Want: v(1, 6)}}; !slices.Equal(rd.Push, want) {
		t.Fatalf("retried Push %+v, want %+v", rd.Push, want)
	}
	m.step(pg.PeerRecovered{OSD: 3, Last: v(1, 4)}) // short: push the rest
	rd = m.expect("active+recovering+degraded", true)
	if len(rd.Push) != 1 || rd.Push[0].Have != v(1, 4) {
		t.Fatalf("Push after a short recovery %+v", rd.Push)
	}
	m.step(pg.PeerRecovered{OSD: 3, Last: v(1, 6)})
	m.expect("active+clean", true)
}

func TestIntervalChangeStopsServingAtOnce(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
	m.step(pg.Info{From: 2, Epoch: 1}, pg.Info{From: 3, Epoch: 1})
	m.expect("active+clean", true)

	m.maps(2, osds(2, 1, 3)) // osd.2 is primary now
	m.expect("replica", false)
	if m.Role() != pg.RoleReplica {
		t.Fatalf("role %v", m.Role())
	}
	if err := m.CanServe(); !errors.Is(err, pg.ErrNotPrimary) {
		t.Fatalf("CanServe as a replica: %v", err)
	}
	m.maps(3, osds(1, 2)) // primary again, another set: peer again
	rd := m.expect("peering", false)
	wantQueries(t, rd, 3, 2, 3) // 3 witnessed epochs 1 and 2
	m.maps(4, osds(2, 3))
	if m.expect("stray", false); m.Role() != pg.RoleStray {
		t.Fatalf("role %v", m.Role())
	}
}

func TestNewReplicaSetRestartsPeering(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
	m.step(pg.Info{From: 2, Epoch: 1}, pg.Info{From: 3, Epoch: 1})
	m.expect("active+clean", true)
	m.maps(2, osds(1, 2, 4)) // same primary, osd.4 replaces osd.3
	wantQueries(t, m.expect("peering", false), 2, 2, 3, 4)
}

// A witness that answered, then failed the pull, no longer vouches for the
// intervals before its LastEpochStarted: they need witnesses again.
func TestWitnessLostDuringRecovery(t *testing.T) {
	// Epoch 1: [2 3 4] took writes up to 1'5. Epoch 2: [5 6 7]; osd.5
	// pulled them and went active, but 6 and 7 were never pushed to.
	// Epoch 3: [1 6 7].
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2, 3, 4), osds(5, 6, 7), osds(1, 6, 7))
	m.Ready()
	m.step(pg.Unreachable{From: 2, Epoch: 3}, pg.Unreachable{From: 3, Epoch: 3}, pg.Unreachable{From: 4, Epoch: 3})
	m.step(pg.Info{From: 5, Epoch: 3, Info: pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 2}})
	m.step(pg.Info{From: 6, Epoch: 3}, pg.Info{From: 7, Epoch: 3})
	rd := m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.From != 5 {
		t.Fatalf("Recover %+v, want from osd.5", rd.Recover)
	}
	m.step(pg.Unreachable{From: 5, Epoch: 3})
	m.expect("down", false)
	if got := m.Blocked(); !slices.Equal(got, osds(2, 3, 4)) {
		t.Fatalf("Blocked %v", got)
	}
}

// downMachine is osd.1, primary at epoch 2 of [1 5 6], down: [2 3 4] of
// epoch 1 may have taken writes, and none of them answers.
func downMachine(t *testing.T) *machine {
	t.Helper()
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2, 3, 4), osds(1, 5, 6))
	m.Ready()
	m.step(pg.Info{From: 5, Epoch: 2}, pg.Info{From: 6, Epoch: 2})
	m.step(pg.Unreachable{From: 2, Epoch: 2}, pg.Unreachable{From: 3, Epoch: 2}, pg.Unreachable{From: 4, Epoch: 2})
	m.expect("down", false)
	return m
}

func TestNotifyUnblocksDown(t *testing.T) {
	m := downMachine(t)
	// osd.4 restarted and announced itself, unasked.
	m.step(pg.Info{From: 4, Epoch: 2, Info: pg.PeerInfo{Last: v(1, 2), LastEpochStarted: 1}})
	rd := m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.From != 4 {
		t.Fatalf("Recover %+v, want from osd.4", rd.Recover)
	}
	m.step(pg.Recovered{From: 4, Last: v(1, 2)})
	// osd.5 and osd.6 hold nothing: until one is filled, ours is the
	// only whole copy, short of min_size 2.
	rd = m.expect("backfilling+degraded+peered", false)
	if len(rd.Push) != 2 {
		t.Fatalf("Push %+v, want osd.5 and osd.6", rd.Push)
	}
	m.step(pg.PeerRecovered{OSD: 5, Last: v(1, 2)})
	m.expect("active+backfilling+degraded", true)
}

// TestLostUnblocksDown: a PG down for want of a prior interval's members
// waits for those the map does not give up; once every one is (an
// operator's `osd lost`, or `osd rm`), the interval is given up and the PG
// goes active on what the members it has hold. A loss declared before an
// interval began does not give that interval up (the OSD came back and may
// have taken its writes), and an OSD that is up is never given up.
func TestLostUnblocksDown(t *testing.T) {
	m := downMachine(t)
	// osds describes the map: lost epochs of down OSDs (0: not lost),
	// those up, and those removed; an OSD it does not list is up.
	type osdState struct {
		lostAt   pg.Epoch
		up, gone bool
	}
	advance := func(e pg.Epoch, osdsNow map[pg.OSDID]osdState) {
		t.Helper()
		givenUp := func(id pg.OSDID, first pg.Epoch) bool {
			s, ok := osdsNow[id]
			return ok && (s.gone || !s.up && s.lostAt > first)
		}
		m.step(pg.AdvanceMap{Epoch: e, Acting: osds(1, 5, 6), Size: 3, MinSize: 2, GivenUp: givenUp})
		for _, id := range queried(m.Ready()) {
			if s := osdsNow[id]; !s.up {
				m.step(pg.Unreachable{From: id, Epoch: e})
			}
		}
	}
	// osd.2 and osd.3 lost, osd.4 not: still down, blocked by osd.4 alone.
	advance(3, map[pg.OSDID]osdState{2: {lostAt: 3}, 3: {lostAt: 3}, 4: {}})
	m.expect("down", false)
	if got := m.Blocked(); !slices.Equal(got, osds(4)) {
		t.Fatalf("Blocked %v, want osd.4 alone", got)
	}
	// osd.4 was declared lost at epoch 1, when the interval began: that
	// says nothing of it.
	advance(4, map[pg.OSDID]osdState{2: {lostAt: 3}, 3: {lostAt: 3}, 4: {lostAt: 1}})
	m.expect("down", false)
	// osd.4 declared lost anew, but up (its disk was not dead after all):
	// it is asked, and waited for.
	advance(5, map[pg.OSDID]osdState{2: {lostAt: 3}, 3: {lostAt: 3}, 4: {lostAt: 5, up: true}})
	if rd := m.Ready(); rd.State.String() == "active" || rd.State.String() == "active+clean" {
		t.Fatalf("went %s without asking osd.4, which is up", rd.State)
	}
	if got := m.Blocked(); len(got) != 0 && !slices.Equal(got, osds(4)) {
		t.Fatalf("Blocked %v", got)
	}
	// osd.4 goes down again before it answers (its query fails), and is
	// removed (osd rm): given up too.
	advance(6, map[pg.OSDID]osdState{2: {lostAt: 3}, 3: {lostAt: 3}, 4: {gone: true}})
	m.step(pg.Unreachable{From: 4, Epoch: 5})
	m.expect("active+clean", true)
	if got := m.Blocked(); len(got) != 0 {
		t.Fatalf("Blocked %v when active", got)
	}
}

// TestNewStoreWitnessesNothing: osd.1's disk was replaced and it came back
// under its old id with an empty store (born at epoch 3), beside osd.4,
// while osd.2 and osd.3, which hold epoch 1's writes, are down. osd.1
// answers for itself with a whole copy of nothing: it must not witness
// epoch 1, or the PG goes active empty and, once it takes a write, rolls
// osd.2's and osd.3's acknowledged writes back as divergent when they
// return. It waits for them, as it would for any silent member; so does a
// primary whose map does not yet say so, from osd.1's answer.
func TestNewStoreWitnessesNothing(t *testing.T) {
	const born = 3
	givenUp := func(id pg.OSDID, first pg.Epoch) bool { return id == 1 && born > first }
	m := newMachine(t, 1, pg.PeerInfo{})
	m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
	m.step(pg.AdvanceMap{Epoch: 2, Acting: osds(4), Size: 3, MinSize: 2})
	m.step(pg.AdvanceMap{Epoch: born, Acting: osds(1, 4), Size: 3, MinSize: 2, GivenUp: givenUp})
	wantQueries(t, m.Ready(), born, 2, 3, 4)
	m.step(pg.Info{From: 4, Epoch: born})
	m.step(pg.Unreachable{From: 2, Epoch: born}, pg.Unreachable{From: 3, Epoch: born})
	m.expect("down", false)
	if got := m.Blocked(); !slices.Equal(got, osds(2, 3)) {
		t.Fatalf("Blocked %v, want [2 3]", got)
	}
	// osd.2 comes back with epoch 1's writes: the PG recovers from it.
	m.step(pg.Info{From: 2, Epoch: born, Info: pg.PeerInfo{Last: v(1, 7), LastEpochStarted: 1}})
	if rd := m.Ready(); rd.Recover == nil || rd.Recover.From != 2 || rd.Recover.Want != v(1, 7) {
		t.Fatalf("Recover %+v, want from osd.2 to 1'7", rd.Recover)
	}

	// The same seen from osd.4 as the primary: osd.1's answer is no
	// witness either.
	m = newMachine(t, 4, pg.PeerInfo{})
	m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
	m.step(pg.AdvanceMap{Epoch: 2, Acting: osds(4), Size: 3, MinSize: 2})
	m.step(pg.AdvanceMap{Epoch: born, Acting: osds(4, 1), Size: 3, MinSize: 2, GivenUp: givenUp})
	m.Ready()
	m.step(pg.Info{From: 1, Epoch: born})
	m.step(pg.Unreachable{From: 2, Epoch: born}, pg.Unreachable{From: 3, Epoch: born})
	m.expect("down", false)
	if got := m.Blocked(); !slices.Equal(got, osds(2, 3)) {
		t.Fatalf("primary osd.4: Blocked %v, want [2 3]", got)
	}

	// And from osd.4 with a map older than the epoch that says so: osd.1's
	// answer says when its store was made.
	m = newMachine(t, 4, pg.PeerInfo{})
	m.maps(1, osds(1, 2, 3), osds(4, 1))
	m.Ready()
	m.step(pg.Info{From: 1, Epoch: 2, Info: pg.PeerInfo{Born: born}})
	m.step(pg.Unreachable{From: 2, Epoch: 2}, pg.Unreachable{From: 3, Epoch: 2})
	m.expect("down", false)
}

// TestNewStoreEndsItsInterval: the primary, osd.1, comes back on a new
// store before the mon marked it down, so the acting set never changed. The
// map that records the new store ends the interval: what osd.1 held of it
// needs a witness, and with osd.2 and osd.3 silent the PG is down, not
// active on nothing.
func TestNewStoreEndsItsInterval(t *testing.T) {
	const born = 2
	givenUp := func(id pg.OSDID, first pg.Epoch) bool { return id == 1 && born > first }
	m := newMachine(t, 1, pg.PeerInfo{Born: born})
	m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
	m.step(pg.AdvanceMap{Epoch: born, Acting: osds(1, 2, 3), Size: 3, MinSize: 2, GivenUp: givenUp})
	wantQueries(t, m.Ready(), born, 2, 3)
	m.step(pg.Unreachable{From: 2, Epoch: born}, pg.Unreachable{From: 3, Epoch: born})
	m.expect("down", false)
}

// TestIncompleteMembersAloneDoNotBlock: an interval every member of which
// answered, none with a complete copy (emptied as strays once the PG was
// clean elsewhere, as after a pool went to size 1), leaves nobody to wait
// for: the PG goes on with what answered, as Ceph's does with members up.
// Before, it stayed down, blocked by OSDs that were up, itself among them.
func TestIncompleteMembersAloneDoNotBlock(t *testing.T) {
	m := newMachine(t, 2, pg.PeerInfo{Incomplete: true}).maps(2, osds(2, 3, 4), osds(2, 3))
	m.Ready()
	m.step(pg.Info{From: 3, Epoch: 3, Info: pg.PeerInfo{Incomplete: true}})
	m.step(pg.Unreachable{From: 4, Epoch: 3})
	// osd.4, silent, may hold epoch 1's writes: down, waiting for it
	// alone (not for osd.3, which answered, nor for ourselves).
	m.expect("down", false)
	if got := m.Blocked(); !slices.Equal(got, osds(4)) {
		t.Fatalf("Blocked %v, want [4]", got)
	}
	// osd.4 answers, incomplete too: nobody left to wait for.
	m.step(pg.Info{From: 4, Epoch: 3, Info: pg.PeerInfo{Incomplete: true}})
	if rd := m.Ready(); rd.State&pg.StateDown != 0 || len(m.Blocked()) != 0 {
		t.Fatalf("state %s blocked by %v with every member of epoch 1 heard", rd.State, m.Blocked())
	}
}

// A replica that missed RepOps is pushed to; a pull that stops short of
// what the primary had then is not the end of it.
func TestMissedRepOpNeedsPush(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
	m.step(pg.Info{From: 2, Epoch: 1}, pg.Info{From: 3, Epoch: 1})
	m.step(pg.Applied{Version: v(1, 1)}, pg.Applied{Version: v(1, 2)})
	m.expect("active+clean", true)
	m.step(pg.Unreachable{From: 3, Epoch: 1}) // RepOp 1'2 timed out
	m.expect("active+degraded", true)
	m.step(pg.PeerRecovered{OSD: 3, Last: v(1, 1)}) // a late pull, short
	rd := m.expect("active+recovering+degraded", true)
	if want := []pg.PushTarget{{To: 3, Epoch: 1, Have: v(1, 1), Want: v(1, 2)}}; !slices.Equal(rd.Push, want) {
		t.Fatalf("Push %+v, want %+v", rd.Push, want)
	}
	m.step(pg.PeerRecovered{OSD: 3, Last: v(1, 2)})
	m.expect("active+clean", true)
}

// TestRetryPushesAtTheSameMap: a fresh PG whose replicas refused their
// query and then its push (they had not taken up the map yet) is peered
// and backfilling with no new map to retry at; RetryPushes sends the
// pushes again, and their answers make it clean.
func TestRetryPushesAtTheSameMap(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
	m.step(pg.Unreachable{From: 2, Epoch: 1}, pg.Unreachable{From: 3, Epoch: 1})
	rd := m.expect("backfilling+degraded+peered", false)
	if len(rd.Push) != 2 {
		t.Fatalf("Push %+v, want one to each replica", rd.Push)
	}
	m.step(pg.RetryPushes{}) // nothing failed yet: nothing to send again
	if rd := m.Ready(); len(rd.Push) != 0 {
		t.Fatalf("Push %+v with both pushes in flight", rd.Push)
	}
	m.step(pg.Unreachable{From: 2, Epoch: 1}, pg.Unreachable{From: 3, Epoch: 1}) // refused
	m.expect("degraded+peered", false)
	m.step(pg.RetryPushes{})
	rd = m.expect("backfilling+degraded+peered", false)
	want := []pg.PushTarget{{To: 2, Epoch: 1}, {To: 3, Epoch: 1}}
	if !slices.Equal(rd.Push, want) {
		t.Fatalf("Push %+v after RetryPushes, want %+v", rd.Push, want)
	}
	m.step(pg.PeerRecovered{OSD: 2}, pg.PeerRecovered{OSD: 3})
	m.expect("active+clean", true)
	// A replica ignores it, as does a primary not yet active.
	r := newMachine(t, 2, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
	r.step(pg.RetryPushes{})
	if rd := r.Ready(); len(rd.Push) != 0 || rd.State != pg.StateReplica {
		t.Fatalf("replica: %+v", rd)
	}
}

func TestStaleAnswersIgnored(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3), osds(1, 2, 4))
	m.Ready()
	// Answers to the epoch 1 queries are for another interval: given
	// before epoch 2, they cannot witness it.
	m.step(pg.Info{From: 2, Epoch: 1}, pg.Info{From: 3, Epoch: 1}, pg.Info{From: 4, Epoch: 1})
	m.expect("peering", false)
	m.step(pg.Unreachable{From: 3, Epoch: 1})
	m.step(pg.Info{From: 2, Epoch: 2}, pg.Info{From: 3, Epoch: 2})
	m.expect("peering", false)
	m.step(pg.Info{From: 4, Epoch: 2})
	m.expect("active+clean", true)
	// An old map changes nothing.
	m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(3), Size: 3, MinSize: 2})
	m.expect("active+clean", true)
}

func TestStepRejectsBrokenContract(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   pg.AdvanceMap
		want error
	}{
		{"gap", pg.AdvanceMap{Epoch: 3, Acting: osds(1), Size: 3, MinSize: 2}, pg.ErrMapGap},
		{"min_size 0", pg.AdvanceMap{Epoch: 2, Acting: osds(1), Size: 3}, pg.ErrInvalidEvent},
		{"min_size above size", pg.AdvanceMap{Epoch: 2, Acting: osds(1), Size: 1, MinSize: 2}, pg.ErrInvalidEvent},
		{"too many", pg.AdvanceMap{Epoch: 2, Acting: osds(1, 2), Size: 1, MinSize: 1}, pg.ErrInvalidEvent},
		{"repeated osd", pg.AdvanceMap{Epoch: 2, Acting: osds(1, 2, 1), Size: 3, MinSize: 2}, pg.ErrInvalidEvent},
		{"repeated osd in up", pg.AdvanceMap{Epoch: 2, Acting: osds(1, 2), Up: osds(3, 4, 3), Size: 3, MinSize: 2}, pg.ErrInvalidEvent},
		{"up too large", pg.AdvanceMap{Epoch: 2, Acting: osds(1), Up: osds(2, 3), Size: 1, MinSize: 1}, pg.ErrInvalidEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(1, 2, 3))
			if err := m.Step(tc.ev); !errors.Is(err, tc.want) {
				t.Fatalf("Step: %v, want %v", err, tc.want)
			}
			if m.Epoch() != 1 {
				t.Fatalf("a refused map moved the epoch to %d", m.Epoch())
			}
		})
	}
}

func TestAcceptRepOp(t *testing.T) {
	// Epochs 5-6: [1 2 3]; epoch 7: [3 2 1]. osd.2 is a replica in both.
	history := [][]pg.OSDID{osds(1, 2, 3), osds(1, 2, 3), osds(3, 2, 1)}
	for _, tc := range []struct {
		name  string
		self  pg.OSDID
		from  pg.OSDID
		epoch pg.Epoch
		want  error // nil: accepted
	}{
		{"primary of the interval", 2, 3, 7, nil},
		{"old primary", 2, 1, 7, pg.ErrNotPrimary},
		{"old interval", 2, 3, 6, pg.ErrStaleEpoch},
		{"old primary, old epoch", 2, 1, 6, pg.ErrStaleEpoch},
		{"future epoch", 2, 3, 8, pg.ErrFutureEpoch},
		{"stray", 4, 3, 7, pg.ErrNotReplica},
		{"the primary itself", 3, 3, 7, pg.ErrNotReplica},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, tc.self, pg.PeerInfo{}).maps(5, history...)
			err := m.AcceptRepOp(tc.from, tc.epoch)
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("AcceptRepOp(osd.%d, %d) = %v, want %v", tc.from, tc.epoch, err, tc.want)
			}
			if err == nil {
				return
			}
			var re *pg.RefusedError
			if !errors.As(err, &re) || re.From != tc.from || re.Epoch != tc.epoch || re.Known != 7 || re.PG != (pg.ID{Pool: 1, Seed: 0x1f}) {
				t.Fatalf("refusal %#v", err)
			}
		})
	}
	m := newMachine(t, 2, pg.PeerInfo{}).maps(5, history...)
	if p, ok := m.Primary(); !ok || p != 3 || m.IntervalStart() != 7 || m.ID().String() != "1.1f" {
		t.Fatalf("Primary %v %v, IntervalStart %d, ID %v", p, ok, m.IntervalStart(), m.ID())
	}
	want := "pg 1.1f: refused osd.1 at epoch 6 (ours 7): pg: stale epoch"
	if err := m.AcceptRepOp(1, 6); err == nil || err.Error() != want {
		t.Fatalf("refusal reads %q, want %q", err, want)
	}
	if err := newMachine(t, 2, pg.PeerInfo{}).AcceptRepOp(1, 1); !errors.Is(err, pg.ErrFutureEpoch) {
		t.Fatalf("a machine with no map accepted: %v", err)
	}
}

func TestAnswerQuery(t *testing.T) {
	local := pg.PeerInfo{Last: v(3, 4), LogTail: v(1, 1), LastEpochStarted: 3}
	stray := newMachine(t, 4, local).maps(5, osds(1, 2, 3))
	if info, err := stray.AnswerQuery(1, 5); err != nil || info != local {
		t.Fatalf("stray's answer %+v, %v", info, err)
	}
	for _, tc := range []struct {
		from  pg.OSDID
		epoch pg.Epoch
		want  error
	}{{1, 6, pg.ErrFutureEpoch}, {2, 5, pg.ErrNotPrimary}} {
		if _, err := stray.AnswerQuery(tc.from, tc.epoch); !errors.Is(err, tc.want) {
			t.Fatalf("AnswerQuery(osd.%d, %d) = %v, want %v", tc.from, tc.epoch, err, tc.want)
		}
	}
	stray.maps(6, osds(2, 1, 3))
	if _, err := stray.AnswerQuery(1, 5); !errors.Is(err, pg.ErrStaleEpoch) {
		t.Fatalf("answered the old primary: %v", err)
	}
}

func TestReplicaRaisesLastEpochStarted(t *testing.T) {
	m := newMachine(t, 2, pg.PeerInfo{Last: v(1, 3), LastEpochStarted: 1}).maps(1, osds(1, 2, 3), osds(3, 2, 1))
	m.Ready()
	m.step(pg.Applied{Version: v(1, 5)}) // a pull of older writes: not enough
	if rd := m.Ready(); rd.LastEpochStarted != 0 {
		t.Fatalf("raised on a pull: %d", rd.LastEpochStarted)
	}
	m.step(pg.Applied{Version: v(2, 6)}) // a write of this interval
	if rd := m.Ready(); rd.LastEpochStarted != 2 {
		t.Fatalf("LastEpochStarted %d, want 2", rd.LastEpochStarted)
	}
}

// TestActivatedReplicaRaisesLastEpochStarted: a replica the active
// primary pushed to its log end raises its LastEpochStarted once its log
// ends exactly there, with no write of the interval since: it then
// witnesses the interval, and a later peering does not wait for the
// members of the intervals before it (a pool at size 1, one member that
// is gone now). A push of another interval, or a log that ends elsewhere,
// raises nothing.
func TestActivatedReplicaRaisesLastEpochStarted(t *testing.T) {
	// osd.2 held nothing of epoch 2's interval [1] (size 1, min_size 1:
	// it may have taken writes); epoch 3 makes it a replica of [1 2 3],
	// and the primary pushes it to 2'9.
	m := newMachine(t, 2, pg.PeerInfo{Last: v(1, 3), LastEpochStarted: 1})
	m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Size: 3, MinSize: 2},
		pg.AdvanceMap{Epoch: 2, Acting: osds(1), Size: 1, MinSize: 1},
		pg.AdvanceMap{Epoch: 3, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
	m.Ready()
	m.step(pg.Activated{Epoch: 2, Version: v(2, 9)}) // of epoch 2's interval: not ours
	m.step(pg.Activated{Epoch: 4, Version: v(2, 9)}) // of a map we do not have
	m.step(pg.Applied{Version: v(2, 9)})             // the pull reaches 2'9
	if rd := m.Ready(); rd.LastEpochStarted != 0 {
		t.Fatalf("raised on a push of another interval: %d", rd.LastEpochStarted)
	}
	m.step(pg.Applied{Version: v(1, 3)}) // back where it was
	m.step(pg.Activated{Epoch: 3, Version: v(2, 9)})
	m.step(pg.Applied{Version: v(2, 8)}) // the pull, not there yet
	if rd := m.Ready(); rd.LastEpochStarted != 0 {
		t.Fatalf("raised short of the push: %d", rd.LastEpochStarted)
	}
	m.step(pg.Applied{Version: v(2, 9)})
	if rd := m.Ready(); rd.LastEpochStarted != 3 {
		t.Fatalf("LastEpochStarted %d after the pull reached the push, want 3", rd.LastEpochStarted)
	}
	// osd.1 is gone: [2 3] peers from epoch 3 on, which osd.2 witnesses
	// itself, and does not wait for osd.1, the only member of epoch 2's
	// interval.
	m.maps(4, osds(2, 3))
	wantQueries(t, m.Ready(), 4, 1, 3)
	m.step(pg.Unreachable{From: 1, Epoch: 4}, pg.Info{From: 3, Epoch: 4, Info: pg.PeerInfo{Last: v(2, 9), LastEpochStarted: 3}})
	m.expect("active+undersized+degraded", true)

	// A replica whose log already ends at the push raises at once; one
	// whose log ends past it (an entry the primary never had) does not.
	for _, c := range []struct {
		last v2
		want pg.Epoch
	}{{v2{2, 9}, 3}, {v2{2, 10}, 0}} {
		m := newMachine(t, 2, pg.PeerInfo{Last: v(c.last.e, c.last.s), LastEpochStarted: 1})
		m.step(pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Size: 3, MinSize: 2},
			pg.AdvanceMap{Epoch: 2, Acting: osds(1), Size: 1, MinSize: 1},
			pg.AdvanceMap{Epoch: 3, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
		m.Ready()
		m.step(pg.Activated{Epoch: 3, Version: v(2, 9)})
		if rd := m.Ready(); rd.LastEpochStarted != c.want {
			t.Errorf("log at %v, pushed to 2'9: LastEpochStarted %d, want %d", c.last, rd.LastEpochStarted, c.want)
		}
	}
}

// TestActivationNotifiesCaughtUpReplicas: the primary going active pushes
// to the replicas behind and tells those caught up (Notify) the log it
// went active with, so that they witness the interval too.
func TestActivationNotifiesCaughtUpReplicas(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 1}).maps(1, osds(1, 2, 3), osds(1))
	m.step(pg.AdvanceMap{Epoch: 3, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 3, Info: pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 1}},
		pg.Info{From: 3, Epoch: 3, Info: pg.PeerInfo{Last: v(1, 4), LastEpochStarted: 1}})
	rd := m.expect("active+recovering+degraded", true)
	if len(rd.Push) != 1 || rd.Push[0].To != 3 || rd.Push[0].Want != v(1, 5) {
		t.Fatalf("Push %+v, want osd.3 to 1'5", rd.Push)
	}
	if len(rd.Notify) != 1 || rd.Notify[0].To != 2 || rd.Notify[0].Want != v(1, 5) || rd.Notify[0].Epoch != 3 {
		t.Fatalf("Notify %+v, want osd.2 of 1'5 at epoch 3", rd.Notify)
	}
	// The caught-up replica, told so, witnesses epoch 3's interval.
	r := newMachine(t, 2, pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 1}).maps(1, osds(1, 2, 3), osds(1))
	r.step(pg.AdvanceMap{Epoch: 3, Acting: osds(1, 2, 3), Size: 3, MinSize: 2})
	r.Ready()
	r.step(pg.Activated{Epoch: rd.Notify[0].Epoch, Version: rd.Notify[0].Want})
	if got := r.Ready(); got.LastEpochStarted != 3 {
		t.Fatalf("notified replica: LastEpochStarted %d, want 3", got.LastEpochStarted)
	}
}

type v2 struct {
	e pg.Epoch
	s uint64
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct {
		s    pg.State
		want string
	}{
		{0, "unknown"},
		{pg.StateActive | pg.StateClean, "active+clean"},
		{pg.StateDegraded | pg.StateActive | pg.StateUndersized, "active+undersized+degraded"},
		{pg.StateRecovering | pg.StateDegraded | pg.StateActive, "active+recovering+degraded"},
		{pg.StatePeered | pg.StateUndersized | pg.StateDegraded, "undersized+degraded+peered"},
		{pg.StateDown, "down"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%#x: %q, want %q", uint16(tc.s), got, tc.want)
		}
	}
	if got := (pg.ID{Pool: 1, Seed: 31}).String(); got != "1.1f" {
		t.Errorf("ID %q", got)
	}
	if got := v(7, 42).String(); got != "7'42" {
		t.Errorf("Version %q", got)
	}
	if !v(1, 9).Less(v(2, 1)) || v(2, 1).Less(v(2, 1)) || !v(2, 1).LE(v(2, 1)) || v(2, 2).LE(v(2, 1)) {
		t.Error("Version order")
	}
	if got := pg.RolePrimary.String(); got != "primary" {
		t.Errorf("Role %q", got)
	}
}

// TestIncompleteCopyWitnessesNothing: a member being backfilled acked
// writes to objects its walk had not reached, so its answer cannot stand
// for its interval, nor be the log to pull, however high its Last.
func TestIncompleteCopyWitnessesNothing(t *testing.T) {
	// Epoch 1: [2 3 4] took writes; osd.4 was being backfilled. Epoch 2:
	// [1 5 6].
	m := newMachine(t, 1, pg.PeerInfo{}).maps(1, osds(2, 3, 4), osds(1, 5, 6))
	m.Ready()
	m.step(pg.Info{From: 5, Epoch: 2}, pg.Info{From: 6, Epoch: 2})
	m.step(pg.Info{From: 4, Epoch: 2, Info: pg.PeerInfo{Last: v(1, 9), LastEpochStarted: 1, Incomplete: true}})
	m.step(pg.Unreachable{From: 2, Epoch: 2}, pg.Unreachable{From: 3, Epoch: 2})
	m.expect("down", false)
	// It waits for the silent ones: the incomplete one answered, and
	// waiting for it changes nothing.
	if got := m.Blocked(); !slices.Equal(got, osds(2, 3)) {
		t.Fatalf("Blocked %v, want [2 3]", got)
	}
	// A complete member of epoch 1 answers, behind the incomplete one:
	// it is the log to pull.
	m.step(pg.Info{From: 3, Epoch: 2, Info: pg.PeerInfo{Last: v(1, 7), LastEpochStarted: 1}})
	rd := m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.From != 3 || rd.Recover.Want != v(1, 7) {
		t.Fatalf("Recover %+v, want from osd.3 up to 1'7", rd.Recover)
	}
	// Our own copy, mid-backfill when we restarted, does not witness
	// epoch 1's interval either, though we were in it.
	own := newMachine(t, 2, pg.PeerInfo{Last: v(1, 3), LastEpochStarted: 1, Incomplete: true}).maps(1, osds(2, 3, 4), osds(2, 5, 6))
	own.Ready()
	own.step(pg.Info{From: 5, Epoch: 2}, pg.Info{From: 6, Epoch: 2})
	own.step(pg.Unreachable{From: 3, Epoch: 2}, pg.Unreachable{From: 4, Epoch: 2})
	own.expect("down", false)
	// The same when the backfill began in this process.
	live := newMachine(t, 2, pg.PeerInfo{Last: v(1, 3), LastEpochStarted: 1}).maps(1, osds(2, 3, 4))
	live.step(pg.BackfillStarted{}).maps(2, osds(2, 5, 6))
	live.Ready()
	live.step(pg.Info{From: 5, Epoch: 2}, pg.Info{From: 6, Epoch: 2})
	live.step(pg.Unreachable{From: 3, Epoch: 2}, pg.Unreachable{From: 4, Epoch: 2})
	live.expect("down", false)
}

// TestIncompleteSelfIsNoCandidate: a primary whose own copy is mid-backfill
// pulls from a complete peer even when its Last is not behind.
func TestIncompleteSelfIsNoCandidate(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 9), LastEpochStarted: 1, Incomplete: true}).maps(1, osds(1, 2, 3))
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 9), LastEpochStarted: 1}}, pg.Info{From: 3, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 8), LastEpochStarted: 1}})
	rd := m.expect("peering", false)
	if rd.Recover == nil || rd.Recover.From != 2 {
		t.Fatalf("Recover %+v, want a pull from osd.2, the complete copy", rd.Recover)
	}
}

// TestBackfillTargetsDoNotCountTowardMinSize: a member that holds no
// whole copy (nothing, a copy behind the log's tail, or one mid-backfill)
// takes the PG's writes but acks those its walk has not reached
// unapplied, so the PG serves only while min_size members hold a whole
// copy: a member caught up from the log counts, one being backfilled
// counts once its push completes.
func TestBackfillTargetsDoNotCountTowardMinSize(t *testing.T) {
	local := pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 3), LastEpochStarted: 1}
	for _, c := range []struct {
		name        string
		two, three  pg.PeerInfo
		state       string
		serving     bool
		backfilling []pg.OSDID
	}{
		{"one empty, one behind within the log", pg.PeerInfo{Last: v(1, 4), LogTail: v(1, 1)}, pg.PeerInfo{},
			"active+backfilling+degraded", true, osds(3)},
		{"one empty, one behind the log's tail", pg.PeerInfo{Last: v(1, 2), LogTail: v(1, 1)}, pg.PeerInfo{},
			"backfilling+degraded+peered", false, osds(2, 3)},
		{"one empty, one mid-backfill at our Last", pg.PeerInfo{Last: v(1, 5), Incomplete: true}, pg.PeerInfo{},
			"backfilling+degraded+peered", false, osds(2, 3)},
		{"both caught up", pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 3)}, pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 3)},
			"active+clean", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t, 1, local).maps(1, osds(1, 2, 3))
			m.Ready()
			m.step(pg.Info{From: 2, Epoch: 1, Info: c.two}, pg.Info{From: 3, Epoch: 1, Info: c.three})
			m.expect(c.state, c.serving)
			if got := m.Backfilling(); !slices.Equal(got, c.backfilling) {
				t.Fatalf("Backfilling %v, want %v", got, c.backfilling)
			}
			if c.serving {
				return
			}
			err := m.CanServe()
			if !errors.Is(err, pg.ErrBelowMinSize) || !m.ServesReads() {
				t.Fatalf("CanServe %v, ServesReads %v; want ErrBelowMinSize, reads served", err, m.ServesReads())
			}
			if want := "1 of min_size 2 members hold a whole copy, osd.2, osd.3 being backfilled"; !strings.Contains(err.Error(), want) {
				t.Fatalf("CanServe says %q, want it to say %q", err, want)
			}
			// osd.3's backfill ends first: two whole copies.
			m.step(pg.PeerRecovered{OSD: 3, Last: v(1, 5)})
			m.expect("active+backfilling+degraded", true)
			if got := m.Backfilling(); !slices.Equal(got, osds(2)) {
				t.Fatalf("Backfilling %v after osd.3's push, want [2]", got)
			}
		})
	}
}

// TestRemappedFillsUpSet: a pg_temp entry keeps a PG's old acting set
// while its up set has a member that holds nothing. The old members serve
// (three whole copies); the newcomer is queried, pushed to and takes
// writes, but is no member of the interval: it does not count toward
// min_size, its lack is misplaced copies, not degraded ones, and once its
// push ends the primary says the up set can take over.
func TestRemappedFillsUpSet(t *testing.T) {
	remapped := pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Up: osds(4, 2, 3), Size: 3, MinSize: 2}
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 3), LastEpochStarted: 1}).step(remapped)
	wantQueries(t, m.Ready(), 1, 2, 3, 4)
	whole := pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 3), LastEpochStarted: 1}
	m.step(pg.Info{From: 2, Epoch: 1, Info: whole}, pg.Info{From: 3, Epoch: 1, Info: whole}, pg.Info{From: 4, Epoch: 1})
	rd := m.expect("active+backfilling+remapped", true)
	if want := []pg.PushTarget{{To: 4, Epoch: 1, Want: v(1, 5)}}; !slices.Equal(rd.Push, want) {
		t.Fatalf("Push %+v, want %+v", rd.Push, want)
	}
	if got := m.Filling(); !slices.Equal(got, osds(4)) || len(m.Backfilling()) != 0 || m.UpFilled() {
		t.Fatalf("Filling %v, Backfilling %v, UpFilled %v", got, m.Backfilling(), m.UpFilled())
	}
	m.step(pg.Applied{Version: v(1, 6)}) // writes go on meanwhile
	// Its push failed (no room yet): not clean, not filled.
	m.step(pg.Unreachable{From: 4, Epoch: 1})
	m.expect("active+remapped", true)
	if m.UpFilled() {
		t.Fatal("UpFilled with the newcomer's push failed")
	}
	// A later sync brings it up (the daemon's resync): clean.
	m.step(pg.PeerRecovered{OSD: 4, Last: v(1, 6)})
	m.expect("active+clean+remapped", true)
	if !m.UpFilled() {
		t.Fatal("the newcomer holds the PG: UpFilled is false")
	}

	// The newcomer takes the primary's RepOps; an OSD in neither set
	// does not.
	for _, c := range []struct {
		self pg.OSDID
		role pg.Role
		err  error
	}{{4, pg.RoleReplica, nil}, {2, pg.RoleReplica, nil}, {5, pg.RoleStray, pg.ErrNotReplica}} {
		r := newMachine(t, c.self, pg.PeerInfo{}).step(remapped)
		if err := r.AcceptRepOp(1, 1); r.Role() != c.role || !errors.Is(err, c.err) && !(err == nil && c.err == nil) {
			t.Errorf("osd.%d: role %v, AcceptRepOp %v; want %v, %v", c.self, r.Role(), err, c.role, c.err)
		}
	}

	// Only the acting set counts toward min_size: with osd.2 and osd.3
	// gone from it, one whole copy is not enough, however full osd.4 is.
	m = newMachine(t, 1, pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 1}).
		step(pg.AdvanceMap{Epoch: 1, Acting: osds(1), Up: osds(4, 2), Size: 2, MinSize: 2})
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 1}, pg.Info{From: 4, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 5), LastEpochStarted: 1}})
	m.expect("backfilling+undersized+degraded+remapped+peered", false)

	// An up set that shrank below the acting set (its others went down)
	// does not take over, whole as it is.
	m = newMachine(t, 1, pg.PeerInfo{Last: v(1, 5), LogTail: v(1, 3), LastEpochStarted: 1}).
		step(pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Up: osds(3), Size: 3, MinSize: 2})
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 1, Info: whole}, pg.Info{From: 3, Epoch: 1, Info: whole})
	m.expect("active+clean+remapped", true)
	if m.UpFilled() {
		t.Fatal("UpFilled with an up set of one for an acting set of three")
	}

	// The map that drops the entry is a new interval: osd.1, out of the
	// up set, is a stray there.
	m = newMachine(t, 1, pg.PeerInfo{Last: v(1, 6), LastEpochStarted: 1}).step(remapped)
	m.step(pg.AdvanceMap{Epoch: 2, Acting: osds(4, 2, 3), Size: 3, MinSize: 2})
	if m.Role() != pg.RoleStray || m.IntervalStart() != 2 {
		t.Fatalf("after the entry went: role %v, interval from %d", m.Role(), m.IntervalStart())
	}
}

// TestFilledMemberWitnesses: a member being filled took every write its
// interval acknowledged once its walk was done, so a new primary takes its
// whole copy as the interval's witness, and waits for it, as for an acting
// member; mid-walk it witnesses nothing.
func TestFilledMemberWitnesses(t *testing.T) {
	for _, c := range []struct {
		name    string
		four    pg.Event
		state   string
		from    pg.OSDID // the pull's source, when peering goes on
		blocked []pg.OSDID
	}{
		{"filled", pg.Info{From: 4, Epoch: 2, Info: pg.PeerInfo{Last: v(1, 7)}}, "peering", 4, nil},
		{"silent", pg.Unreachable{From: 4, Epoch: 2}, "down", 0, osds(1, 2, 3, 4)},
		{"mid-walk", pg.Info{From: 4, Epoch: 2, Info: pg.PeerInfo{Last: v(1, 7), Incomplete: true}}, "down", 0, osds(1, 2, 3)},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t, 5, pg.PeerInfo{}).step(
				pg.AdvanceMap{Epoch: 1, Acting: osds(1, 2, 3), Up: osds(4, 2, 3), Size: 3, MinSize: 2},
				pg.AdvanceMap{Epoch: 2, Acting: osds(5, 6), Size: 3, MinSize: 2})
			wantQueries(t, m.Ready(), 2, 1, 2, 3, 4, 6)
			m.step(pg.Unreachable{From: 1, Epoch: 2}, pg.Unreachable{From: 2, Epoch: 2}, pg.Unreachable{From: 3, Epoch: 2},
				pg.Info{From: 6, Epoch: 2}, c.four)
			rd := m.expect(c.state, false)
			if c.from != 0 && (rd.Recover == nil || rd.Recover.From != c.from) {
				t.Fatalf("Recover %+v, want a pull from osd.%d", rd.Recover, c.from)
			}
			if got := m.Blocked(); !slices.Equal(got, c.blocked) {
				t.Fatalf("Blocked %v, want %v", got, c.blocked)
			}
		})
	}
}

// TestTrimmedTailMakesABackfill: the log's tail moves with each trim
// (LogTrimmed), and a member whose log ends before it is backfilled, so it
// counts toward nothing: the primary must know the tail now, not as it
// was when the machine was made.
func TestTrimmedTailMakesABackfill(t *testing.T) {
	m := newMachine(t, 1, pg.PeerInfo{Last: v(1, 5000), LastEpochStarted: 1})
	m.step(pg.LogTrimmed{Tail: v(1, 3000)}, pg.LogTrimmed{Tail: v(1, 2000)}) // an older tail changes nothing
	if got := m.Local().LogTail; got != v(1, 3000) {
		t.Fatalf("LogTail %v after trims to 1'3000 then 1'2000", got)
	}
	m.maps(1, osds(1, 2, 3))
	m.Ready()
	m.step(pg.Info{From: 2, Epoch: 1, Info: pg.PeerInfo{Last: v(1, 10), LastEpochStarted: 1}}, pg.Info{From: 3, Epoch: 1})
	m.expect("backfilling+degraded+peered", false)
	if got := m.Backfilling(); !slices.Equal(got, osds(2, 3)) {
		t.Fatalf("Backfilling %v, want [2 3]", got)
	}
}

// TestIDString: errors name a PG as Ceph prints it, and the PG of bucket
// records as "meta", not as pool.ffffffff.
func TestIDString(t *testing.T) {
	for id, want := range map[pg.ID]string{{Pool: 1, Seed: 0x1f}: "1.1f", {Pool: 2, Seed: 0}: "2.0", {Pool: 1, Seed: placement.MetaPG}: "meta"} {
		if got := id.String(); got != want {
			t.Errorf("%#v: %q, want %q", id, got, want)
		}
	}
}
