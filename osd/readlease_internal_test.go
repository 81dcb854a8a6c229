package osd

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestLeaseBookkeeping: a ping answered by a peer that grants renews our
// read lease from it until the ping's send time plus the lease; one it
// answers with no_lease, or a stamp that is not ours, renews nothing. We
// grant only to OSDs up in our map whose map is as new as ours, for the
// lease their ping names. A new primary waits for its predecessor until
// what it granted it runs out (a lease after its own start at least), or
// the predecessor shows it the new map; not for a dead one; for a lease
// from now when the lease was not ours to grant; and for what it granted
// other OSDs the map has down.
func TestLeaseBookkeeping(t *testing.T) {
	const lease = 800 * time.Millisecond
	mp, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: []string{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3", "tcp://127.0.0.1:4"}, PGCount: 16, Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	o := &OSD{id: 1, log: slog.New(slog.NewTextHandler(io.Discard, nil)), peers: map[uint32]*peerState{}, started: time.Now().Add(-time.Minute)}
	o.setReadLease(0)
	if o.lease() != 0 {
		t.Fatalf("lease %v without a mon or Config.ReadLease, want none", o.lease())
	}
	o.setReadLease(time.Second)
	if o.lease() != lease {
		t.Fatalf("lease %v from a mon grace of 1s, want %v", o.lease(), lease)
	}
	o.cfg.ReadLease = 3 * time.Second
	o.setReadLease(time.Second)
	if o.lease() != 3*time.Second {
		t.Fatalf("lease %v, want Config's 3s", o.lease())
	}
	o.cfg.ReadLease = lease
	o.setReadLease(0)
	o.mapv.Store(mp)
	for id := range uint32(4) {
		o.peers[id] = o.newPeerState(time.Now())
	}
	acting := []uint32{1, 0, 2}
	if id, _, lapsed := o.lapsedLease(acting); !lapsed || id != 0 {
		t.Fatalf("before any reply: lapsed %v (osd.%d), want osd.0's", lapsed, id)
	}
	now := o.pingStamp()
	o.noteLease(0, now, true)
	o.noteLease(2, now, false) // it has us down
	if id, _, lapsed := o.lapsedLease(acting); !lapsed || id != 2 {
		t.Fatalf("osd.2 answered with no lease: lapsed %v (osd.%d), want osd.2's", lapsed, id)
	}
	o.noteLease(2, now+int64(time.Hour), true) // not a stamp of ours
	o.noteLease(2, now-int64(2*time.Minute), true)
	if _, _, lapsed := o.lapsedLease(acting); lapsed == false {
		t.Fatal("a stamp from before our start or from the future renewed a lease")
	}
	o.noteLease(2, now, true)
	if id, _, lapsed := o.lapsedLease(acting); lapsed {
		t.Fatalf("every member answered: osd.%d's lease lapsed", id)
	}
	o.noteLease(0, now-int64(lease), true) // an older reply late: no step back
	if _, _, lapsed := o.lapsedLease(acting); lapsed {
		t.Fatal("a late reply to an older ping shortened a lease")
	}
	o.peers[0].leaseUntil = o.mono() - time.Millisecond
	if id, _, lapsed := o.lapsedLease(acting); !lapsed || id != 0 {
		t.Fatalf("osd.0's lease ran out: lapsed %v (osd.%d)", lapsed, id)
	}
	// Stopping (it asked to be marked down, and the map will say dead):
	// no read, whatever its leases.
	for _, ps := range o.peers {
		ps.leaseUntil = o.mono() + time.Minute
	}
	if err := o.readLeaseErr(nil, placement.MetaPG, mp); err != nil {
		t.Fatalf("reads with every lease held: %v", err)
	}
	o.noReads.Store(true)
	if err := o.readLeaseErr(nil, placement.MetaPG, mp); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("a read while stopping: %v", err)
	}
	o.noReads.Store(false)

	// Grants: to an OSD up in our map, pinging at our epoch or newer, for
	// the lease its ping names.
	if o.grantLease(0, mp.Epoch()-1, 0) {
		t.Fatal("a lease granted to an OSD behind our map")
	}
	if !o.grantLease(0, mp.Epoch(), int64(5*time.Second)) {
		t.Fatal("no lease granted to an OSD up in our map")
	}
	if g := o.peers[0].grantedUntil - o.mono(); g < 4*time.Second || g > 5*time.Second {
		t.Fatalf("a grant for a 5s lease runs %v more", g)
	}
	down, _ := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[0].Up = false })
	o.mapv.Store(down)
	granted := o.peers[0].grantedUntil
	if o.grantLease(0, down.Epoch(), 0) || o.peers[0].grantedUntil != granted {
		t.Fatal("a lease granted to an OSD down in our map")
	}
	if o.peers[0].epoch != down.Epoch() {
		t.Fatalf("osd.0 pinged at epoch %d, noted %d", down.Epoch(), o.peers[0].epoch)
	}
	o.peers[0].epoch = 0 // as if it had not: it is cut off

	// A PG osd.0 led, with us next; and one it led without us, which a
	// pg_temp entry hands to us.
	pool, _ := mp.PoolByName(placement.DefaultPoolName)
	var member, stranger uint32
	var haveMember, haveStranger bool
	var strangerNext *placement.Map
	for pg := range pool.PgCount {
		a := mp.ActingSet(pool.Id, pg)
		switch {
		case a[0] == 0 && a[1] == 1 && !haveMember:
			member, haveMember = storePG(pool.Id, pg), true
		case a[0] == 0 && !slices.Contains(a, 1) && !haveStranger:
			stranger, haveStranger = storePG(pool.Id, pg), true
			strangerNext, err = mp.With(func(pb *osdpb.ClusterMap) {
				pb.Epoch++
				pb.Osds[0].Up = false
				pb.PgTemp = []*osdpb.PGTemp{{Pool: pool.Id, Pg: pg, Osds: []uint32{1, a[1]}}}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !haveMember || !haveStranger {
		t.Fatalf("this placement lacks the PGs the test needs (member %v, stranger %v)", haveMember, haveStranger)
	}
	succeed := func(sid uint32, next *placement.Map) (*pgState, time.Duration) {
		p := &pgState{sid: sid}
		o.succeeded(p, mp, next)
		return p, o.leaseWait(p)
	}
	// osd.0 pinged with a 5 s lease, which we granted.
	if _, w := succeed(member, down); w < 4*time.Second || w > 5*time.Second {
		t.Fatalf("new primary after a down predecessor waits %v, want what it granted it (4-5s)", w)
	}
	dead, _ := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[0].Up, pb.Osds[0].Dead = false, true })
	if _, w := succeed(member, dead); w > 0 {
		t.Fatalf("new primary after a dead predecessor waits %v", w)
	}
	o.peers[0].grantedUntil = 0
	if _, w := succeed(stranger, strangerNext); w < 4900*time.Millisecond || w > 5*time.Second {
		t.Fatalf("new primary of a PG it was not a member of waits %v, want the predecessor's lease (5s) from now", w)
	}
	o.peers[0].grantedUntil = o.mono() + 5*time.Second
	// The predecessor shows us the new map: the wait ends.
	p, _ := succeed(member, down)
	o.sawEpoch(0, down.Epoch())
	if w := o.leaseWait(p); w > 0 {
		t.Fatalf("the predecessor showed us the new epoch, yet we wait %v", w)
	}
	o.peers[0].epoch = 0
	// Waits only grow: a later succession with nothing to wait for keeps
	// the earlier one's.
	p, w1 := succeed(member, down)
	o.peers[0].grantedUntil = 0
	later, _ := down.With(func(pb *osdpb.ClusterMap) { pb.Epoch++ })
	o.succeeded(p, down, later) // not a succession: nothing changes
	prevAgain, _ := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch = later.Epoch() + 1 })
	o.succeeded(p, prevAgain, later)
	if w2 := o.leaseWait(p); w2 < w1-100*time.Millisecond {
		t.Fatalf("a second succession shortened the wait from %v to %v", w1, w2)
	}
	// Restarted within a lease: what we granted before is forgotten, so
	// wait until the pinger's lease after our start (ours when unknown).
	o.started = time.Now()
	for id := range uint32(4) {
		o.peers[id] = o.newPeerState(time.Now())
	}
	if _, w := succeed(member, down); w < lease-100*time.Millisecond || w > lease {
		t.Fatalf("a new primary started just now waits %v, want a lease after its start", w)
	}
	o.peers[0].leaseLen = 3 * time.Second
	if _, w := succeed(member, down); w < 2900*time.Millisecond || w > 3*time.Second {
		t.Fatalf("a new primary started just now waits %v, want osd.0's 3s lease after its start", w)
	}
	// Another OSD we granted a lease, which has not shown us the map: it
	// may have led the PG an interval before; wait it out too.
	o.started = time.Now().Add(-time.Minute)
	for id := range uint32(4) {
		o.peers[id] = o.newPeerState(time.Now())
	}
	o.peers[3].grantedUntil = o.mono() + 2*time.Second
	if _, w := succeed(member, down); w < time.Second || w > 2*time.Second {
		t.Fatalf("new primary waits %v, want what it granted osd.3 (2s)", w)
	}
}

// TestNewIncarnationGetsAGrace: a peer we hold down for its silence that
// boots again (a newer up_from in our map) is not down to us the moment
// its boot map arrives: it gets a grace of its own, so that we do not
// report it for its last incarnation's silence (which had it marked down
// at each boot until the markdown limit held it down). Its first look at
// a peer's up_from changes nothing.
func TestNewIncarnationGetsAGrace(t *testing.T) {
	mp, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: []string{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, PGCount: 4})
	if err != nil {
		t.Fatal(err)
	}
	at := func(upFrom uint64) *placement.Map {
		m, err := mp.With(func(pb *osdpb.ClusterMap) { pb.Epoch = upFrom; pb.Osds[1].UpFrom = upFrom })
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	o := &OSD{id: 0, cfg: Config{HeartbeatGrace: time.Second}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		peers: map[uint32]*peerState{}, started: time.Now().Add(-time.Minute)}
	o.mapv.Store(at(3))
	o.peers[1] = o.newPeerState(time.Now().Add(-time.Minute)) // silent for a minute
	o.checkPeer(1)
	if !o.peerDown(1) {
		t.Fatal("a peer silent for a minute is not down")
	}
	o.checkPeer(1) // the same incarnation: still down
	if !o.peerDown(1) {
		t.Fatal("a silent peer came back without a heartbeat")
	}
	o.mapv.Store(at(5))
	o.checkPeer(1)
	if o.peerDown(1) {
		t.Fatal("a peer that booted again is down at once, for its last incarnation's silence")
	}
	if silent := time.Since(o.peers[1].lastSeen); silent > time.Second {
		t.Fatalf("its grace starts %v back, want at its boot", silent)
	}
}
