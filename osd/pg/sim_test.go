package pg_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ospreystore/osprey/osd/pg"
)

// The simulation runs one PG on a small cluster through random failures
// and checks, after every step, that no acknowledged write is lost and that
// no two OSDs serve as primary in one epoch. The machines under test are
// the production ones; the test plays the daemons (logs, messages, the mon)
// around them, as a daemon is told to in the package comment.

var (
	simSeeds = flag.Int("pgsim.seeds", 200, "seeds the peering simulation runs")
	simSteps = flag.Int("pgsim.steps", 300, "steps per seed")
	simSeed  = flag.Int64("pgsim.seed", -1, "run only this seed (with -v: its trace)")
)

const (
	simSize, simMinSize = 3, 2
	simOSDs             = 6 // at most; 4 at the start
)

type simOSD struct {
	id    pg.OSDID
	in    bool // added to the cluster
	alive bool
	inc   int          // incarnation: sessions of an earlier one are dead
	log   []pg.Version // persisted, survives kills
	les   pg.Epoch     // persisted LastEpochStarted
	m     *pg.PG       // nil while dead
}

func (o *simOSD) last() pg.Version {
	if len(o.log) == 0 {
		return pg.Version{}
	}
	return o.log[len(o.log)-1]
}

func (o *simOSD) has(v pg.Version) bool {
	_, ok := slices.BinarySearchFunc(o.log, v, cmpVersion)
	return ok
}

func cmpVersion(a, b pg.Version) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

type msgKind uint8

const (
	mQuery      msgKind = iota // primary → peer
	mInfo                      // peer → primary
	mFail                      // a request's timeout, to its requester
	mRecoverReq                // primary → authoritative peer
	mRecoverRep                // authoritative peer → primary, with its log
	mPush                      // primary → replica
	mPushDone                  // replica → primary
	mRepOp                     // primary → replica, one write
	mNotify                    // primary → caught-up replica: the log it went active with
)

var kindNames = [...]string{"query", "info", "fail", "recover-req", "recover-rep", "push", "push-done", "repop", "notify"}

type simMsg struct {
	kind     msgKind
	from, to pg.OSDID
	inc      int // the requester's incarnation
	epoch    pg.Epoch
	info     pg.PeerInfo
	rec      pg.Recover
	last     pg.Version
	write    int
	prev     pg.Version
	snap     []pg.Version // a log, for recover replies and repops
}

// requester is the OSD waiting for msg's outcome (for a request or its
// reply), and target the one it asked.
func (msg *simMsg) requester() (req, target pg.OSDID) {
	switch msg.kind {
	case mInfo, mRecoverRep, mPushDone:
		return msg.to, msg.from
	}
	return msg.from, msg.to
}

type simWrite struct {
	v       pg.Version
	acting  []pg.OSDID
	applied []pg.OSDID
	acked   bool
	// lost: every copy of it was on disks since replaced, a loss no
	// peering can undo; the invariants skip it.
	lost bool
}

type simStats struct {
	acked                 int // writes every acting member applied
	down                  int // steps some machine was down
	recovered             int // pulls a primary finished before serving
	emptyPrimaryRecovered int // of which by a primary with an empty log
	refusedRepOps         int
	servingSteps          int
	staleServing          int // steps a primary served an interval the mon had ended
	activatedLES          int // last_epoch_started raised by a push or notice (pg.Activated)
	newDisks              int // OSDs back on a new, empty store under their old id
	declaredLost          int // osd lost of a down OSD
	pgTemps               int // old acting sets kept while the up set fills (pg_temp)
	pgTempsFilled         int // of those, dropped because the primary said the up set holds the PG
}

type sim struct {
	t      *testing.T
	rng    *rand.Rand
	osds   []*simOSD
	rank   []pg.OSDID          // the mon's ranking of OSDs (CRUSH)
	up     []bool              // the mon's view
	maps   [][]pg.OSDID        // acting set by epoch; maps[0] unused
	upSets [][]pg.OSDID        // up set by epoch when a pg_temp entry makes it differ, else nil
	temp   []pg.OSDID          // the mon's pg_temp entry, nil for none
	curUp  []pg.OSDID          // the up set the next epoch records (nil: the acting set)
	born   [simOSDs][]pg.Epoch // per OSD, the epochs its stores were made, after its first
	lost   [simOSDs][]pg.Epoch // per OSD, the epochs an operator declared it lost (osd lost)
	ups    [][]bool            // the mon's view by epoch; ups[0] unused
	net    []simMsg
	cut    [simOSDs][simOSDs]bool // links down: messages over them are lost
	writes []*simWrite
	trace  []string
	stats  simStats
	failed bool
}

func newSim(t *testing.T, seed int64) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x0590)), maps: [][]pg.OSDID{nil}, upSets: [][]pg.OSDID{nil}, ups: [][]bool{nil}}
	for id := range simOSDs {
		s.osds = append(s.osds, &simOSD{id: pg.OSDID(id)})
		s.rank = append(s.rank, pg.OSDID(id))
	}
	// A random ranking: an OSD added later may come first and become the
	// primary with an empty log.
	s.rng.Shuffle(len(s.rank), func(i, j int) { s.rank[i], s.rank[j] = s.rank[j], s.rank[i] })
	s.up = make([]bool, simOSDs)
	for _, o := range s.osds[:4] {
		o.in, o.alive = true, true
		s.up[o.id] = true
	}
	s.newEpoch(s.mapActing())
	for _, o := range s.osds[:4] {
		s.boot(o)
	}
	return s
}

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf(format, args...))
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.failed = true
	tail := s.trace[max(0, len(s.trace)-60):]
	if *simSeed >= 0 {
		tail = s.trace // one seed: the whole of it
	}
	s.t.Fatalf("%s\n--- last %d of %d events:\n%s\n--- osds:\n%s", fmt.Sprintf(format, args...), len(tail), len(s.trace), strings.Join(tail, "\n"), s.dump())
}

func (s *sim) dump() string {
	var b strings.Builder
	for _, o := range s.osds {
		if !o.in {
			continue
		}
		fmt.Fprintf(&b, "osd.%d alive=%v les=%d last=%v", o.id, o.alive, o.les, o.last())
		if o.m != nil {
			fmt.Fprintf(&b, " epoch=%d state=%s blocked=%v", o.m.Epoch(), o.m.State(), o.m.Blocked())
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "map %d: %v", len(s.maps)-1, s.maps[len(s.maps)-1])
	return b.String()
}

// The mon.

func (s *sim) latest() pg.Epoch { return pg.Epoch(len(s.maps) - 1) }

func (s *sim) mapActing() []pg.OSDID {
	var acting []pg.OSDID
	for _, id := range s.rank {
		if s.osds[id].in && s.up[id] && len(acting) < simSize {
			acting = append(acting, id)
		}
	}
	return acting
}

func (s *sim) newEpoch(acting []pg.OSDID) {
	s.maps = append(s.maps, acting)
	s.upSets = append(s.upSets, s.curUp)
	s.ups = append(s.ups, slices.Clone(s.up))
	s.loseWrites(nil) // an OSD declared lost earlier may be down again
	s.logf("mon: epoch %d acting %v up %v", s.latest(), acting, s.curUp)
}

// monTick marks dead OSDs down and restarted ones up, as heartbeats would
// tell the mon some time after the fact. As the mon primes pg_temp, a
// placement change that brings in a member the acting set lacks, with as
// many old members up, keeps the old acting set (most times: also the
// other way); the entry goes once the acting primary says the up set holds
// the PG, or when its up members are the placement again or none is up.
func (s *sim) monTick() {
	for _, o := range s.osds {
		s.up[o.id] = o.in && o.alive
	}
	upOnly := func(ids []pg.OSDID) []pg.OSDID {
		return slices.DeleteFunc(slices.Clone(ids), func(id pg.OSDID) bool { return !s.up[id] })
	}
	placement := s.mapActing()
	latest := s.latest()
	curActing, curUp := s.maps[latest], s.upSets[latest]
	if curUp == nil {
		curUp = curActing
	}
	if s.temp != nil {
		t := upOnly(s.temp)
		p := s.osds[s.temp[0]]
		switch {
		case len(t) == 0 || slices.Equal(t, placement):
			s.temp = nil
		case slices.Equal(t, curActing) && p.alive && p.m != nil && p.m.Epoch() == latest && p.m.UpFilled():
			s.temp = nil
			s.stats.pgTempsFilled++
			s.logf("mon: osd.%d says up set %v holds the pg", p.id, curUp)
		}
	}
	if s.temp == nil && !slices.Equal(placement, curUp) && s.rng.IntN(4) > 0 {
		old := upOnly(curActing)
		if len(old) > 0 && len(old) >= len(placement) && slices.ContainsFunc(placement, func(id pg.OSDID) bool { return !slices.Contains(old, id) }) {
			s.temp = old
			s.stats.pgTemps++
		}
	}
	acting, up := placement, []pg.OSDID(nil)
	if s.temp != nil {
		if acting = upOnly(s.temp); !slices.Equal(acting, placement) {
			up = placement
		}
	}
	if !slices.Equal(acting, curActing) || !slices.Equal(up, s.upSets[latest]) {
		s.curUp = up
		s.newEpoch(acting)
	}
}

// The daemons.

// feed gives o's machine the maps after its epoch, up to epoch upto.
func (s *sim) feed(o *simOSD, upto pg.Epoch) {
	for e := o.m.Epoch() + 1; e <= upto; e++ {
		s.step(o, s.mapAt(e))
	}
}

// mapAt is epoch e's map as a machine gets it: what it gives up is what
// the mon's map then says (placement.Map.GivenUp) of OSDs on new stores
// and of those down and declared lost.
func (s *sim) mapAt(e pg.Epoch) pg.AdvanceMap {
	asOf := func(epochs []pg.Epoch) pg.Epoch {
		var last pg.Epoch
		for _, b := range epochs {
			if b <= e {
				last = b
			}
		}
		return last
	}
	return pg.AdvanceMap{Epoch: e, Acting: s.maps[e], Up: s.upSets[e], Size: simSize, MinSize: simMinSize,
		GivenUp: func(id pg.OSDID, first pg.Epoch) bool {
			return asOf(s.born[id]) > first || !s.ups[e][id] && asOf(s.lost[id]) > first
		}}
}

// boot starts o's machine from its persisted state, fed from its
// LastEpochStarted (or the pool's creation, epoch 1).
func (s *sim) boot(o *simOSD) {
	o.alive = true
	o.inc++
	local := pg.PeerInfo{Last: o.last(), LastEpochStarted: o.les}
	if b := s.born[o.id]; len(b) > 0 {
		local.Born = b[len(b)-1] // what its answers say of its store
	}
	if len(o.log) > 0 {
		local.LogTail = o.log[0]
	}
	o.m = pg.New(pg.Config{Self: o.id, ID: pg.ID{Pool: 1}, Local: local})
	from := max(o.les, 1)
	s.logf("osd.%d: boot (inc %d) last=%v les=%d, maps from %d", o.id, o.inc, local.Last, o.les, from)
	s.step(o, s.mapAt(from))
	s.feed(o, s.latest())
}

func (s *sim) step(o *simOSD, ev pg.Event) {
	s.t.Helper()
	if err := o.m.Step(ev); err != nil {
		s.fatalf("osd.%d: Step(%+v): %v", o.id, ev, err)
	}
	rd := o.m.Ready()
	for _, q := range rd.Queries {
		s.send(simMsg{kind: mQuery, from: o.id, to: q.To, inc: o.inc, epoch: q.Epoch})
	}
	if r := rd.Recover; r != nil {
		s.send(simMsg{kind: mRecoverReq, from: o.id, to: r.From, inc: o.inc, epoch: r.Epoch, rec: *r})
	}
	for _, p := range rd.Push {
		s.send(simMsg{kind: mPush, from: o.id, to: p.To, inc: o.inc, epoch: p.Epoch, last: p.Want})
	}
	for _, p := range rd.Notify {
		s.send(simMsg{kind: mNotify, from: o.id, to: p.To, inc: o.inc, epoch: p.Epoch, last: p.Want})
	}
	if rd.LastEpochStarted != 0 {
		o.les = rd.LastEpochStarted
	}
	if rd.Serving && rd.State&pg.StateActive == 0 {
		s.fatalf("osd.%d serves in state %s", o.id, rd.State)
	}
}

func (s *sim) send(msg simMsg) { s.net = append(s.net, msg) }

// activated steps pg.Activated of push or notice msg at replica r.
func (s *sim) activated(r *simOSD, msg simMsg) {
	was := r.les
	s.step(r, pg.Activated{Epoch: msg.epoch, Version: msg.last})
	if r.les != was {
		s.stats.activatedLES++
	}
}

// fail delivers msg's timeout to whoever waits for it.
func (s *sim) fail(msg simMsg) {
	req, target := msg.requester()
	s.send(simMsg{kind: mFail, from: target, to: req, inc: msg.inc, epoch: msg.epoch})
}

// live reports whether id is alive in incarnation inc: replies to an
// earlier incarnation died with its sessions.
func (s *sim) live(id pg.OSDID, inc int) (*simOSD, bool) {
	o := s.osds[id]
	return o, o.alive && o.inc == inc
}

// admit runs check on o's machine, first fetching newer maps if the
// sender's epoch is ahead, as the daemon does on ErrFutureEpoch.
func (s *sim) admit(o *simOSD, check func() error) error {
	err := check()
	if errors.Is(err, pg.ErrFutureEpoch) {
		s.feed(o, s.latest())
		err = check()
	}
	return err
}

func (s *sim) deliver(i int) {
	msg := s.net[i]
	s.net = slices.Delete(s.net, i, i+1)
	if msg.kind != mFail && s.cut[msg.from][msg.to] {
		s.logf("lost %s osd.%d→osd.%d e%d: link down", kindNames[msg.kind], msg.from, msg.to, msg.epoch)
		s.fail(msg)
		return
	}
	s.logf("deliver %s osd.%d→osd.%d e%d", kindNames[msg.kind], msg.from, msg.to, msg.epoch)
	switch msg.kind {
	case mQuery:
		x := s.osds[msg.to]
		if !x.alive {
			s.fail(msg)
			return
		}
		var info pg.PeerInfo
		if err := s.admit(x, func() (err error) { info, err = x.m.AnswerQuery(msg.from, msg.epoch); return err }); err != nil {
			s.fail(msg)
			return
		}
		s.send(simMsg{kind: mInfo, from: x.id, to: msg.from, inc: msg.inc, epoch: msg.epoch, info: info})
	case mInfo:
		if p, ok := s.live(msg.to, msg.inc); ok {
			s.step(p, pg.Info{From: msg.from, Epoch: msg.epoch, Info: msg.info})
		}
	case mFail:
		if p, ok := s.live(msg.to, msg.inc); ok {
			s.step(p, pg.Unreachable{From: msg.from, Epoch: msg.epoch})
		}
	case mRecoverReq:
		src := s.osds[msg.to]
		if !src.alive {
			s.fail(msg)
			return
		}
		s.send(simMsg{kind: mRecoverRep, from: src.id, to: msg.from, inc: msg.inc, epoch: msg.epoch, rec: msg.rec, snap: slices.Clone(src.log)})
	case mRecoverRep:
		p, ok := s.live(msg.to, msg.inc)
		if !ok {
			return
		}
		if r, ok := p.m.Recovering(); !ok || r != msg.rec {
			return // the interval moved on: the daemon cancelled this pull
		}
		if len(msg.snap) > 0 && p.last().Less(msg.snap[len(msg.snap)-1]) {
			p.log = s.part(msg.snap, p.last())
		}
		s.stats.recovered++
		if msg.rec.Have == (pg.Version{}) {
			s.stats.emptyPrimaryRecovered++
		}
		s.step(p, pg.Recovered{From: msg.from, Last: p.last()})
	case mPush:
		r := s.osds[msg.to]
		if !r.alive || s.admit(r, func() error { return r.m.AcceptRepOp(msg.from, msg.epoch) }) != nil {
			s.fail(msg)
			return
		}
		p, ok := s.live(msg.from, msg.inc)
		if !ok {
			return // the primary is gone: nothing to pull from, nobody to tell
		}
		if r.last() != p.last() {
			// Behind, or ahead with entries the primary never had (written
			// by a primary that failed before it replicated them): either
			// way the replica takes the primary's log.
			r.log = s.part(p.log, r.last())
		}
		s.step(r, pg.Applied{Version: r.last()})
		// The push said the log the primary went active with (or a later
		// one): the daemon steps Activated once the replica's log settles,
		// the machine raises only if it ends exactly there.
		s.activated(r, msg)
		s.send(simMsg{kind: mPushDone, from: r.id, to: p.id, inc: msg.inc, epoch: msg.epoch, last: r.last()})
	case mNotify:
		r := s.osds[msg.to]
		if !r.alive || s.admit(r, func() error { return r.m.AcceptRepOp(msg.from, msg.epoch) }) != nil {
			return // nothing is retried: the replica witnesses the interval at its next write
		}
		s.activated(r, msg)
	case mPushDone:
		if p, ok := s.live(msg.to, msg.inc); ok {
			s.step(p, pg.PeerRecovered{OSD: msg.from, Last: msg.last})
		}
	case mRepOp:
		r := s.osds[msg.to]
		if !r.alive {
			s.fail(msg)
			return
		}
		if err := s.admit(r, func() error { return r.m.AcceptRepOp(msg.from, msg.epoch) }); err != nil {
			s.stats.refusedRepOps++
			s.fail(msg)
			return
		}
		w := s.writes[msg.write]
		switch last := r.last(); {
		case last == msg.prev:
			r.log = append(r.log, w.v)
		case last.Less(w.v): // a gap: pull from the primary first, and say so
			r.log = slices.Clone(msg.snap)
			s.send(simMsg{kind: mPushDone, from: r.id, to: msg.from, inc: msg.inc, epoch: msg.epoch, last: r.last()})
		}
		if !r.has(w.v) {
			// The log moved past it without it: it pulled a newer log (a
			// push of this interval can reach a primary that has since
			// moved on). The write is not applied here, so not acked.
			s.logf("osd.%d skips repop %v: its log is at %v", r.id, w.v, r.last())
			s.fail(msg)
			return
		}
		w.applied = append(w.applied, r.id)
		s.step(r, pg.Applied{Version: r.last()})
	}
}

// part returns a copy of log, or sometimes of a prefix of it that still
// ends after have: a pull or push that the daemon ran in several batches,
// of which only the first finished.
func (s *sim) part(log []pg.Version, have pg.Version) []pg.Version {
	from, _ := slices.BinarySearchFunc(log, have, cmpVersion)
	if from < len(log) && log[from] == have {
		from++
	}
	n := len(log)
	if from < n-1 && s.rng.IntN(3) == 0 {
		n = from + 1 + s.rng.IntN(n-from-1)
	}
	return slices.Clone(log[:n])
}

// write is a client write sent to o: taken only where the machine serves.
func (s *sim) write(o *simOSD) {
	if !o.alive || o.m.CanServe() != nil {
		return
	}
	v, prev := o.m.NextVersion(), o.last()
	if !prev.Less(v) {
		s.fatalf("osd.%d: NextVersion %v not after its log's %v", o.id, v, prev)
	}
	o.log = append(o.log, v)
	s.step(o, pg.Applied{Version: v})
	// The members being filled take the write too, and ack it.
	w := &simWrite{v: v, acting: append(o.m.Acting(), o.m.Filling()...), applied: []pg.OSDID{o.id}}
	s.writes = append(s.writes, w)
	s.logf("osd.%d: write %v to %v", o.id, v, w.acting)
	for _, id := range w.acting[1:] {
		s.send(simMsg{kind: mRepOp, from: o.id, to: id, inc: o.inc, epoch: o.m.Epoch(), write: len(s.writes) - 1, prev: prev, snap: slices.Clone(o.log)})
	}
}

// check asserts the invariants.
func (s *sim) check() {
	s.t.Helper()
	for _, w := range s.writes {
		if !w.acked && !slices.ContainsFunc(w.acting, func(id pg.OSDID) bool { return !slices.Contains(w.applied, id) }) {
			w.acked = true
			s.stats.acked++
			s.logf("write %v acked by %v", w.v, w.acting)
		}
	}
	for _, w := range s.writes {
		if w.acked && !w.lost && !slices.ContainsFunc(s.osds, func(o *simOSD) bool { return o.has(w.v) }) {
			s.fatalf("acked write %v is on no OSD", w.v)
		}
	}
	// last_epoch_started e claims every write acknowledged before e: what
	// lets peering stop asking about the intervals before it.
	for _, o := range s.osds {
		for _, w := range s.writes {
			if w.acked && !w.lost && w.v.Epoch < o.les && !o.has(w.v) {
				s.fatalf("osd.%d: last_epoch_started %d, but it lacks acked write %v (its log ends %v)", o.id, o.les, w.v, o.last())
			}
		}
	}
	serving := map[pg.Epoch]pg.OSDID{}
	for _, o := range s.osds {
		if !o.alive {
			continue
		}
		if got := o.m.Local().Last; got != o.last() {
			s.fatalf("osd.%d: machine's Last %v, log's %v", o.id, got, o.last())
		}
		if !o.m.Serving() {
			continue
		}
		s.stats.servingSteps++
		e := o.m.Epoch()
		if other, dup := serving[e]; dup {
			s.fatalf("osd.%d and osd.%d both serve at epoch %d", other, o.id, e)
		}
		serving[e] = o.id
		if acting := s.maps[e]; len(acting) == 0 || acting[0] != o.id {
			s.fatalf("osd.%d serves at epoch %d, whose acting set is %v", o.id, e, acting)
		}
		// A primary that has not yet heard of a newer map still serves its
		// epoch; writes of later epochs cannot be in its log, and it cannot
		// get one acknowledged (the replicas refuse it). Everything
		// acknowledged up to its epoch must be there.
		for _, w := range s.writes {
			if w.acked && !w.lost && w.v.Epoch <= e && !o.has(w.v) {
				s.fatalf("osd.%d serves at epoch %d without acked write %v (its log ends at %v)", o.id, e, w.v, o.last())
			}
		}
		if slices.ContainsFunc(s.maps[e+1:], func(a []pg.OSDID) bool { return !slices.Equal(a, s.maps[e]) }) {
			s.stats.staleServing++
		}
	}
	for _, o := range s.osds {
		if o.alive && o.m.State() == pg.StateDown {
			s.stats.down++
		}
	}
}

// randomStep does one random thing to the cluster.
func (s *sim) randomStep() {
	pick := func(ok func(*simOSD) bool) *simOSD {
		var c []*simOSD
		for _, o := range s.osds {
			if ok(o) {
				c = append(c, o)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[s.rng.IntN(len(c))]
	}
	alive := func(o *simOSD) bool { return o.alive }
	switch n := s.rng.IntN(100); {
	case n < 45: // deliver a message, any one: reordering
		if len(s.net) > 0 {
			s.deliver(s.rng.IntN(len(s.net)))
		}
	case n < 48: // lose one: its sender times out
		if len(s.net) > 0 {
			i := s.rng.IntN(len(s.net))
			msg := s.net[i]
			if msg.kind == mFail {
				return // a timeout always fires
			}
			s.net = slices.Delete(s.net, i, i+1)
			s.logf("drop %s osd.%d→osd.%d e%d", kindNames[msg.kind], msg.from, msg.to, msg.epoch)
			s.fail(msg)
		}
	case n < 68: // a client write, mostly to the primary of a recent map: clients lag too
		if acting := s.maps[max(1, len(s.maps)-1-s.rng.IntN(3))]; len(acting) > 0 && s.rng.IntN(4) > 0 {
			s.write(s.osds[acting[0]])
		} else if o := pick(alive); o != nil {
			s.write(o)
		}
	case n < 77: // some maps reach an OSD
		if o := pick(alive); o != nil {
			s.feed(o, min(s.latest(), o.m.Epoch()+pg.Epoch(1+s.rng.IntN(3))))
		}
	case n < 84:
		s.monTick()
	case n < 85: // a map that changes nothing for this PG
		s.newEpoch(s.maps[s.latest()])
	case n < 86: // a reweight: the ranking changes, primaries move between live OSDs
		i, j := s.rng.IntN(simOSDs), s.rng.IntN(simOSDs)
		s.rank[i], s.rank[j] = s.rank[j], s.rank[i]
		s.monTick()
	case n < 89: // a link goes down, or comes back
		a, b := s.rng.IntN(simOSDs), s.rng.IntN(simOSDs)
		s.cut[a][b] = !s.cut[a][b] && a != b
		s.cut[b][a] = s.cut[a][b]
		s.logf("link osd.%d-osd.%d down=%v", a, b, s.cut[a][b])
	case n < 92:
		if o := pick(alive); o != nil {
			s.logf("osd.%d: killed", o.id)
			o.alive, o.m = false, nil
		}
	case n < 96:
		if o := pick(func(o *simOSD) bool { return o.in && !o.alive }); o != nil {
			s.boot(o)
		}
	case n < 97:
		if o := pick(func(o *simOSD) bool { return o.in && !o.alive }); o != nil {
			if s.rng.IntN(2) == 0 {
				s.newDisk(o)
			} else if !s.up[o.id] {
				s.declareLost(o)
			}
		}
	default:
		if o := pick(func(o *simOSD) bool { return !o.in }); o != nil {
			s.logf("osd.%d: added", o.id)
			o.in = true
			s.boot(o)
		}
	}
}

// givenUp reports whether the newest map gives up x's copy of write w, as
// placement.Map.GivenUp does for the interval w was written in: x is down
// and was declared lost after w's epoch (a boot since, which the mon has
// not marked, or a death since that it has, changes nothing; Ceph's
// lost_at works so too). A copy x pulled in a later interval may still be
// waited for: the model counts it gone, erring towards a loss.
func (s *sim) givenUp(x *simOSD, w *simWrite) bool {
	l := s.lost[x.id]
	return len(l) > 0 && !s.ups[s.latest()][x.id] && l[len(l)-1] > w.v.Epoch
}

// loseWrites marks lost the writes that no OSD holds any more but those
// the map gave up (and except, a disk being replaced).
func (s *sim) loseWrites(except *simOSD) {
	for _, w := range s.writes {
		if !w.lost && !slices.ContainsFunc(s.osds, func(x *simOSD) bool { return x != except && !s.givenUp(x, w) && x.has(w.v) }) {
			w.lost = true
			s.logf("write %v lost", w.v)
		}
	}
}

// declareLost is `osd lost` of o, which the mon has marked down: what only
// it held is given up (a later boot may bring it back).
func (s *sim) declareLost(o *simOSD) {
	s.stats.declaredLost++
	s.newEpoch(s.maps[s.latest()])
	s.lost[o.id] = append(s.lost[o.id], s.latest())
	s.logf("osd.%d: declared lost at %d", o.id, s.latest())
	s.loseWrites(nil)
}

// newDisk brings dead OSD o back on a new, empty store under its old id, as
// an operator does after a disk died: its boot makes an epoch that records
// the store's birth, as the mon does for a boot that says its store is new.
// Writes whose every copy was on o's old disk are lost for good.
func (s *sim) newDisk(o *simOSD) {
	s.logf("osd.%d: new disk (its log was %v)", o.id, o.log)
	s.loseWrites(o)
	o.log, o.les = nil, 0
	s.stats.newDisks++
	s.newEpoch(s.maps[s.latest()])
	s.born[o.id] = append(s.born[o.id], s.latest())
	s.boot(o)
}

// stabilize restarts every OSD and delivers everything without loss,
// until the primary serves and is clean: a machine that stays down or
// peering with every OSD back is stuck.
func (s *sim) stabilize() {
	s.logf("--- stabilize")
	s.cut = [simOSDs][simOSDs]bool{}
	for range 5 {
		for _, o := range s.osds {
			if o.in && !o.alive {
				s.boot(o)
			}
		}
		s.monTick()
		s.newEpoch(s.maps[s.latest()]) // retries ride on a new epoch
		for _, o := range s.osds {
			if o.alive {
				s.feed(o, s.latest())
			}
		}
		for n := 0; len(s.net) > 0; n++ {
			if n > 10000 {
				s.fatalf("messages never stop")
			}
			s.deliver(0)
			s.check()
		}
		acting := s.maps[s.latest()]
		p := s.osds[acting[0]]
		if p.m.State() != pg.StateActive|pg.StateClean {
			continue
		}
		for _, id := range acting {
			if got := s.osds[id].last(); got != p.last() {
				s.fatalf("clean, but osd.%d is at %v and the primary at %v", id, got, p.last())
			}
		}
		return
	}
	s.fatalf("no clean primary after stabilizing")
}

func TestSimulation(t *testing.T) {
	var (
		mu    sync.Mutex
		total simStats
	)
	seeds := make([]int64, 0, *simSeeds)
	for seed := range int64(*simSeeds) {
		seeds = append(seeds, seed)
	}
	if *simSeed >= 0 {
		seeds = []int64{*simSeed}
	}
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				s := newSim(t, seed)
				for range *simSteps {
					s.randomStep()
					s.check()
				}
				s.stabilize()
				if *simSeed >= 0 {
					t.Log(strings.Join(s.trace, "\n"))
				}
				mu.Lock()
				defer mu.Unlock()
				total.acked += s.stats.acked
				total.down += s.stats.down
				total.recovered += s.stats.recovered
				total.emptyPrimaryRecovered += s.stats.emptyPrimaryRecovered
				total.refusedRepOps += s.stats.refusedRepOps
				total.servingSteps += s.stats.servingSteps
				total.staleServing += s.stats.staleServing
				total.activatedLES += s.stats.activatedLES
				total.newDisks += s.stats.newDisks
				total.declaredLost += s.stats.declaredLost
				total.pgTemps += s.stats.pgTemps
				total.pgTempsFilled += s.stats.pgTempsFilled
			})
		}
	})
	t.Logf("%+v", total)
	// The simulation proves something only if it reaches the cases that
	// matter; a change to the generator that stops it doing so fails here.
	// Floors are about a quarter of what 200 seeds reach.
	if *simSeed < 0 && *simSeeds >= 100 && !t.Failed() {
		for _, c := range []struct {
			name      string
			got, want int
		}{
			{"acked writes", total.acked, 250},
			{"steps with a down PG", total.down, 200},
			{"pulls before serving", total.recovered, 20},
			{"pulls by an empty primary", total.emptyPrimaryRecovered, 15},
			{"refused repops", total.refusedRepOps, 300},
			{"last_epoch_started raised by a push or notice", total.activatedLES, 300},
			{"OSDs back on a new disk", total.newDisks, 50},
			{"OSDs declared lost", total.declaredLost, 20},
			{"old acting sets kept in pg_temp", total.pgTemps, 55},
			{"pg_temp entries dropped once the up set held the PG", total.pgTempsFilled, 40},
		} {
			if want := c.want * *simSeeds / 200; c.got < want {
				t.Errorf("only %d %s over %d seeds, want %d", c.got, c.name, *simSeeds, want)
			}
		}
	}
}
