package monclient

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestBeaconsKeepToARelay: with the leader out of reach (a mon that takes
// requests and never answers), a beacon says so to the next mon, which
// relays it; later beacons keep to that relay, even while failure reports
// are sent back toward the leader by the relay's NOT_LEADER. Once every
// LeaderRetry one beacon tries the leader briefly and, failing, still goes
// through the relay; once the leader answers, beacons go to it again. A
// beacon to a standby that does not say the leader is out of reach is
// redirected, as before.
func TestBeaconsKeepToARelay(t *testing.T) {
	var leaderMute atomic.Bool
	var leaderDelay atomic.Int64 // how long the leader takes to answer, once it does
	var atLeader, probes, relayed, redirected atomic.Int64
	var leader string
	leaderMute.Store(true)
	leader = startFakeMon(t, func(m *msgr.Message) {
		if leaderMute.Load() {
			if osdpb.MsgType(m.Type) == osdpb.MsgType_MSG_MON_BEACON {
				probes.Add(1)
			}
			return // cut off: it hears, and never answers
		}
		if osdpb.MsgType(m.Type) == osdpb.MsgType_MSG_MON_BEACON {
			time.Sleep(time.Duration(leaderDelay.Load())) // a slow leader, not a sync point
			atLeader.Add(1)
			sendReply(m, m.Tid(), &osdpb.MonBeaconReply{Header: &osdpb.ReplyHeader{}})
		}
	})
	standby := startFakeMon(t, func(m *msgr.Message) {
		switch osdpb.MsgType(m.Type) {
		case osdpb.MsgType_MSG_MON_BEACON:
			var b osdpb.MonBeacon
			if err := m.DecodeFront(&b); err == nil && b.LeaderUnreachable {
				relayed.Add(1)
				sendReply(m, m.Tid(), &osdpb.MonBeaconReply{Header: &osdpb.ReplyHeader{Leader: leader}, RelayedBy: "b"})
				return
			}
			redirected.Add(1)
			sendReply(m, m.Tid(), &osdpb.MonBeaconReply{Header: &osdpb.ReplyHeader{Status: osdpb.Status_NOT_LEADER, Leader: leader}})
		case osdpb.MsgType_MSG_MON_FAILURE:
			sendReply(m, m.Tid(), &osdpb.MonFailureReply{Header: &osdpb.ReplyHeader{Status: osdpb.Status_NOT_LEADER, Leader: leader}})
		}
	})
	const retry = 1500 * time.Millisecond
	c, err := New(context.Background(), Options{Addrs: []string{leader, standby}, Logger: quiet(), LeaderRetry: retry})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	beaconIn := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return c.Beacon(ctx, &osdpb.MonBeacon{Id: 1})
	}
	beacon := func() error { return beaconIn(time.Second) }

	// The first attempts wait out the mute leader; then the relay.
	deadline := time.Now().Add(10 * time.Second)
	for beacon() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no beacon got through the standby")
		}
	}
	if relayed.Load() == 0 {
		t.Fatalf("a beacon went through, %d relayed", relayed.Load())
	}
	// Failure reports follow the relay's NOT_LEADER to the mute leader,
	// in the background; beacons keep to the relay, past LeaderRetry.
	stop := make(chan struct{})
	reports := make(chan struct{})
	go func() {
		defer close(reports)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			c.ReportFailure(ctx, &osdpb.MonFailure{Reporter: 1, Target: 2})
			cancel()
		}
	}()
	start, probed := time.Now(), probes.Load()
	n := 0
	for time.Since(start) < 2*retry+time.Second {
		bs := time.Now()
		if err := beacon(); err != nil {
			close(stop)
			<-reports
			t.Fatalf("%v after the first relay, a beacon failed: %v", time.Since(start), err)
		}
		if took := time.Since(bs); took > leaderProbe+300*time.Millisecond {
			t.Errorf("a beacon took %v: more than a probe of the leader", took)
		}
		n++
	}
	close(stop)
	<-reports
	// One short probe of the leader per LeaderRetry, not one per beacon.
	if p := probes.Load() - probed; p < 1 || p > 3 {
		t.Fatalf("%d beacons in %v of relays: %d attempts at the leader, want one per %v", n, time.Since(start), p, retry)
	}
	if atLeader.Load() != 0 {
		t.Fatalf("the mute leader answered %d beacons", atLeader.Load())
	}

	// The leader answers again, slowly (700 ms, within the beacons' 2 s
	// but past leaderProbe): within LeaderRetry beacons go to it.
	leaderDelay.Store(int64(700 * time.Millisecond))
	leaderMute.Store(false)
	deadline = time.Now().Add(3 * retry)
	for atLeader.Load() == 0 {
		if err := beaconIn(2 * time.Second); err != nil {
			t.Fatalf("a beacon once the leader answers: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("beacons never went back to the slow leader")
		}
	}
	leaderDelay.Store(0)
	before := relayed.Load()
	for range 5 {
		if err := beacon(); err != nil {
			t.Fatal(err)
		}
	}
	if relayed.Load() != before || atLeader.Load() < 6 {
		t.Fatalf("after the leader answered: %d more relayed, %d at the leader", relayed.Load()-before, atLeader.Load())
	}

	// A client whose leader answers says nothing of it: a standby it
	// happens to ask redirects it.
	fresh, err := New(context.Background(), Options{Addrs: []string{standby, leader}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	was := relayed.Load()
	if err := fresh.Beacon(ctx, &osdpb.MonBeacon{Id: 2}); err != nil || redirected.Load() == 0 || relayed.Load() != was {
		t.Fatalf("a beacon first to the standby: %v; %d redirected, %d relayed", err, redirected.Load(), relayed.Load()-was)
	}
}

// TestFailureReportsFollowTheRelay: while a standby relays our beacons
// (the leader out of reach), a failure report goes to it too, saying the
// leader is out of reach, and is relayed; a standby that answers such a
// report NOT_LEADER (an older build) sends it on toward the leader, and
// the beacons keep to their relay.
func TestFailureReportsFollowTheRelay(t *testing.T) {
	var relayFailures atomic.Bool
	var relayedReports, refusedReports, atLeader atomic.Int64
	var leader string
	leader = startFakeMon(t, func(m *msgr.Message) {
		if osdpb.MsgType(m.Type) == osdpb.MsgType_MSG_MON_FAILURE {
			atLeader.Add(1) // heard, never answered: cut off
		}
	})
	standby := startFakeMon(t, func(m *msgr.Message) {
		switch osdpb.MsgType(m.Type) {
		case osdpb.MsgType_MSG_MON_BEACON:
			sendReply(m, m.Tid(), &osdpb.MonBeaconReply{Header: &osdpb.ReplyHeader{Leader: leader}, RelayedBy: "b"})
		case osdpb.MsgType_MSG_MON_FAILURE:
			var f osdpb.MonFailure
			if err := m.DecodeFront(&f); err == nil && f.LeaderUnreachable && relayFailures.Load() {
				relayedReports.Add(1)
				sendReply(m, m.Tid(), &osdpb.MonFailureReply{Header: &osdpb.ReplyHeader{Leader: leader}, RelayedBy: "b"})
				return
			}
			refusedReports.Add(1)
			sendReply(m, m.Tid(), &osdpb.MonFailureReply{Header: &osdpb.ReplyHeader{Status: osdpb.Status_NOT_LEADER, Leader: leader}})
		}
	})
	c, err := New(context.Background(), Options{Addrs: []string{standby}, Logger: quiet(), LeaderRetry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return f(ctx)
	}
	beacon := func(ctx context.Context) error {
		return c.Beacon(ctx, &osdpb.MonBeacon{Id: 1, LeaderUnreachable: true})
	}
	report := func(ctx context.Context) error {
		return c.ReportFailure(ctx, &osdpb.MonFailure{Reporter: 1, Target: 2})
	}
	if err := call(beacon); err != nil {
		t.Fatalf("a beacon through the relay: %v", err)
	}
	// An older standby: the report goes on to the (mute) leader and fails
	// there; the beacons' relay stays.
	if err := call(report); err == nil {
		t.Fatal("a report answered with the leader mute and the standby refusing it")
	}
	if refusedReports.Load() != 1 || atLeader.Load() == 0 {
		t.Fatalf("the report: %d refused by the standby, %d sent to the leader", refusedReports.Load(), atLeader.Load())
	}
	if err := call(beacon); err != nil {
		t.Fatalf("a beacon after the report: %v", err)
	}
	// A standby that relays reports takes it, at the first attempt.
	relayFailures.Store(true)
	before := atLeader.Load()
	if err := call(report); err != nil {
		t.Fatalf("a report through the relay: %v", err)
	}
	if relayedReports.Load() != 1 || atLeader.Load() != before {
		t.Fatalf("%d reports relayed, %d more sent to the leader; want 1 and 0", relayedReports.Load(), atLeader.Load()-before)
	}
	if err := call(beacon); err != nil {
		t.Fatalf("a beacon after the relayed report: %v", err)
	}
}

// TestBootThroughAStandby: an OSD that starts while the leader is out of
// its reach (a mon that hears and never answers) and knows no relay yet
// boots through a standby: once its attempt at the leader failed, its
// boot says so, and the standby that redirected it before relays it now.
// The standby is not taken for the leader.
func TestBootThroughAStandby(t *testing.T) {
	var redirected, relayed atomic.Int64
	var leader string
	leader = startFakeMon(t, func(*msgr.Message) {}) // cut off
	standby := startFakeMon(t, func(m *msgr.Message) {
		if osdpb.MsgType(m.Type) != osdpb.MsgType_MSG_MON_BOOT {
			return
		}
		var b osdpb.MonBoot
		if err := m.DecodeFront(&b); err == nil && b.LeaderUnreachable {
			relayed.Add(1)
			sendReply(m, m.Tid(), &osdpb.MonBootReply{Header: &osdpb.ReplyHeader{}, Id: 7, Fsid: "f", RelayedBy: "b"})
			return
		}
		redirected.Add(1)
		sendReply(m, m.Tid(), &osdpb.MonBootReply{Header: &osdpb.ReplyHeader{Status: osdpb.Status_NOT_LEADER, Leader: leader}})
	})
	c, err := New(context.Background(), Options{Addrs: []string{leader, standby}, Logger: quiet(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := c.Boot(ctx, &osdpb.MonBoot{Uuid: "u", PublicAddr: "tcp://127.0.0.1:1"})
	if err != nil {
		t.Fatalf("a boot with the leader cut off: %v", err)
	}
	if rep.Id != 7 || rep.RelayedBy != "b" || relayed.Load() != 1 || redirected.Load() != 1 {
		t.Fatalf("boot: id %d relayed by %q; the standby relayed %d and redirected %d (want 1 and 1)",
			rep.Id, rep.RelayedBy, relayed.Load(), redirected.Load())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == standby {
		t.Fatal("the standby that relayed the boot is taken for the leader")
	}
}
