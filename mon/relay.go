package mon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// relayBeacon serves MSG_MON_BEACON on a standby when the OSD says its
// last attempt at the leader failed (leader_unreachable; others are
// redirected), as Ceph's peons forward an OSD's messages to the leader: an
// OSD that reaches this mon but not the leader (the leader's host cut off
// from the OSDs, not from etcd or the other mons) must not be marked down
// for it, nor every OSD with it.
//
// The standby leaves the beacon in etcd for the leader (relay/<id>, on
// the OSD's liveness lease, so that it goes with the OSD), which acts on
// it as on one it took (watchRelays): it renews the lease, stores the
// stats record, and acts on fullness and filled pg_temp entries. The
// standby renews nothing itself: one mon alone decides liveness.
//
// Where it cannot relay (no leader known, etcd trouble) it answers
// NOT_LEADER, so the OSD goes on to the leader as before: a standby's
// trouble with etcd must not read as "you are marked down".
func (m *Mon) relayBeacon(ctx context.Context, b *osdpb.MonBeacon) (*osdpb.MonBeaconReply, error) {
	leader := m.Leader()
	if leader == "" {
		return nil, m.notLeader()
	}
	mp, _, err := m.beaconTarget(ctx, b)
	if err != nil {
		return nil, err
	}
	rec := &osdpb.RelayedBeacon{Beacon: b, Mon: m.cfg.Name, AtUnixNanos: time.Now().UnixNano()}
	h, err := m.relayPut(ctx, leader, "beacon", b.Id, m.k.relay(b.Id), rec)
	if err != nil {
		return nil, err
	}
	if b.Epoch < mp.Epoch() {
		h.Map = mp.Proto()
	}
	return &osdpb.MonBeaconReply{Header: h, RelayedBy: m.cfg.Name}, nil
}

// relayFailure serves MSG_MON_FAILURE on a standby when the reporter says
// it cannot reach the leader, as relayBeacon does beacons: an OSD that
// finds a peer's connection refused during such a cut gets it marked down
// (dead) at once, not after the peer's lease runs out. The report waits
// in etcd under relayfail/<reporter>/<target>, on the reporter's lease; a
// later one (a cancel) replaces it.
func (m *Mon) relayFailure(ctx context.Context, f *osdpb.MonFailure) (*osdpb.MonFailureReply, error) {
	leader := m.Leader()
	if leader == "" {
		return nil, m.notLeader()
	}
	rec := &osdpb.RelayedFailure{Failure: f, Mon: m.cfg.Name, AtUnixNanos: time.Now().UnixNano()}
	h, err := m.relayPut(ctx, leader, "failure report", f.Reporter, m.k.relayFailure(f.Reporter, f.Target), rec)
	if err != nil {
		return nil, err
	}
	return &osdpb.MonFailureReply{Header: h, RelayedBy: m.cfg.Name}, nil
}

// relayMarkMeDown serves MSG_MON_MARK_ME_DOWN on a standby when the OSD
// says it cannot reach the leader, as relayFailure: an OSD that stops, or
// gives up a stuck disk, during such a cut is marked down (dead) as soon
// as the leader reads it, not when its lease runs out.
func (m *Mon) relayMarkMeDown(ctx context.Context, r *osdpb.MonMarkMeDown) (*osdpb.MonMarkMeDownReply, error) {
	leader := m.Leader()
	if leader == "" {
		return nil, m.notLeader()
	}
	rec := &osdpb.RelayedMarkMeDown{Request: r, Mon: m.cfg.Name, AtUnixNanos: time.Now().UnixNano()}
	h, err := m.relayPut(ctx, leader, "mark-me-down", r.Id, m.k.relayMarkMeDown(r.Id), rec)
	if err != nil {
		return nil, err
	}
	return &osdpb.MonMarkMeDownReply{Header: h, RelayedBy: m.cfg.Name}, nil
}

// relayPut leaves rec in etcd under key for the leader, on the liveness
// lease of OSD id (so that it goes with the OSD), and returns the header
// of the reply that says so, naming the leader. Where it cannot (etcd
// trouble) it answers NOT_LEADER, so the OSD goes on to the leader as
// before: a standby's trouble with etcd must not read as "you are marked
// down"; an OSD whose lease expired is told so.
func (m *Mon) relayPut(ctx context.Context, leader, what string, id uint32, key string, rec proto.Message) (*osdpb.ReplyHeader, error) {
	cannot := func(step string, err error) error { return m.cannotRelay(leader, what, step, err) }
	expired := ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d's liveness lease expired (silent for longer than %v): the leader marks it down; boot again", id, m.cfg.HeartbeatGrace)
	resp, err := m.cli.Get(ctx, m.k.alive(id))
	if err != nil {
		return nil, cannot("reading the OSD's lease", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return nil, expired
	}
	v, err := proto.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if _, err := m.cli.Put(ctx, key, string(v), clientv3.WithLease(clientv3.LeaseID(resp.Kvs[0].Lease))); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, expired
		}
		return nil, cannot("passing it to the leader", err)
	}
	h := m.header(nil)
	h.Leader = leader
	return h, nil
}

// cannotRelay is a standby's answer when it could not relay a request to
// the leader: NOT_LEADER, so the OSD goes on to the leader as before.
func (m *Mon) cannotRelay(leader, what, step string, err error) error {
	return ops.Errorf(osdpb.Status_NOT_LEADER, "mon.%s is a standby and could not relay the %s (%s: %v); the leader is at %s", m.cfg.Name, what, step, err, leader)
}

// relayBoot serves MSG_MON_BOOT on a standby when the OSD says its last
// attempt at the leader failed, as relayBeacon: an OSD that restarts while
// the leader's host is cut off from the OSDs boots through a standby, as
// Ceph's peons forward MOSDBoot, rather than wait for the cut to heal.
//
// A boot's reply carries what only the leader decides (the OSD's id, the
// map that marks it up), so the standby waits for it: the request under
// relayboot/<nonce>, the leader's reply under relaybootrep/<nonce>, both on
// a lease of the standby's (the OSD has none yet) that it revokes once it
// answered, and that expires soon after if the standby dies first.
func (m *Mon) relayBoot(ctx context.Context, b *osdpb.MonBoot) (*osdpb.MonBootReply, error) {
	leader := m.Leader()
	if leader == "" {
		return nil, m.notLeader()
	}
	lease, err := m.cli.Grant(ctx, int64(2*requestTimeout/time.Second))
	if err != nil {
		return nil, m.cannotRelay(leader, "boot", "granting its lease", err)
	}
	defer m.revoke(lease.ID)
	var n [8]byte
	rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	v, err := proto.Marshal(&osdpb.RelayedBoot{Boot: b, Mon: m.cfg.Name, AtUnixNanos: time.Now().UnixNano(), Lease: int64(lease.ID)})
	if err != nil {
		return nil, err
	}
	put, err := m.cli.Put(ctx, m.k.relayBoot(nonce), string(v), clientv3.WithLease(lease.ID))
	if err != nil {
		return nil, m.cannotRelay(leader, "boot", "passing it to the leader", err)
	}
	// Within the mon client's attempt (5 s by default), so that the OSD
	// does not retry while the leader still works on this one.
	wctx, cancel := context.WithTimeout(ctx, relayBootWait)
	defer cancel()
	// From the request's revision on: a reply put before the watch began
	// is seen too.
	for wr := range m.cli.Watch(wctx, m.k.relayBootReply(nonce), clientv3.WithRev(put.Header.Revision+1), clientv3.WithFilterDelete()) {
		if wr.Err() != nil {
			break
		}
		for _, ev := range wr.Events {
			var rep osdpb.MonBootReply
			if err := proto.Unmarshal(ev.Kv.Value, &rep); err != nil || rep.Header == nil {
				return nil, ops.Errorf(osdpb.Status_INTERNAL_ERROR, "mon.%s: the leader's reply to a relayed boot does not parse (%v)", m.cfg.Name, err)
			}
			rep.RelayedBy = m.cfg.Name
			return &rep, nil
		}
	}
	// The OSD boots again: a boot the leader did take meanwhile is done
	// again, as one whose reply was lost.
	return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "mon.%s relayed the boot to the leader at %s, which did not answer in time", m.cfg.Name, leader)
}

// relayBootWait bounds how long a standby waits for the leader's answer
// to a boot it relayed; the request then goes with the standby's lease,
// unclaimed.
const relayBootWait = 4 * time.Second

// watchRelays acts on what standby mons relayed (relayBeacon,
// relayFailure, relayMarkMeDown, relayBoot) as on what the OSDs send us.
func (l *leadership) watchRelays() {
	var wg sync.WaitGroup
	wg.Go(func() { l.watchRelayed("beacons", l.m.k.relayPrefix(), false, l.relayedBeacon) })
	wg.Go(func() { l.watchRelayed("failure reports", l.m.k.relayFailurePrefix(), false, l.relayedFailure) })
	// A mark-me-down is sent once (beacons and reports come again): one
	// relayed while no mon led is taken too. One already acted on, or
	// from an earlier incarnation, changes nothing (markMeDown).
	wg.Go(func() { l.watchRelayed("mark-me-downs", l.m.k.relayMarkMeDownPrefix(), true, l.relayedMarkMeDown) })
	// A boot waits for its reply: one relayed while no mon led is taken
	// as soon as one does, if its standby still waits.
	wg.Go(func() { l.watchRelayed("boots", l.m.k.relayBootPrefix(), true, l.relayedBoot) })
	wg.Wait()
}

// watchRelayed runs take on each record put under prefix, the newest of
// each key at a time (relayQueue), many keys at once. A watch that broke
// resumes after the last revision it saw; the first starts from now, or,
// with existing, takes the records already there first.
func (l *leadership) watchRelayed(what, prefix string, existing bool, take func(key string, v []byte)) {
	m := l.m
	backoff := newBackoff()
	q := relayQueue{take: take, pending: map[string][]byte{}, busy: map[string]bool{}}
	defer q.wg.Wait()
	var next int64 // revision to resume from (0: now)
	for existing && l.ctx.Err() == nil {
		resp, err := m.cli.Get(clientv3.WithRequireLeader(l.ctx), prefix, clientv3.WithPrefix())
		if err != nil {
			backoff.wait(l.ctx)
			continue
		}
		for _, kv := range resp.Kvs {
			q.add(string(kv.Key), kv.Value)
		}
		next = resp.Header.Revision + 1
		break
	}
	for l.ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterDelete()}
		if next != 0 {
			opts = append(opts, clientv3.WithRev(next))
		}
		for wr := range m.cli.Watch(wctx, prefix, opts...) {
			if err := wr.Err(); err != nil {
				if wr.CompactRevision != 0 {
					// The revision we would resume from is gone (relays
					// come seldom; stats writes move revisions on):
					// from now, then, as the first watch.
					m.log.Warn("relayed "+what+": resuming the watch from now, its revision was compacted", "revision", next, "err", err)
					next = 0
				}
				break
			}
			for _, ev := range wr.Events {
				q.add(string(ev.Kv.Key), ev.Kv.Value)
			}
			next = wr.Header.Revision + 1
			backoff.reset()
		}
		cancel()
		backoff.wait(l.ctx)
	}
}

// relayQueue runs relayed records: one goroutine per key while it has one
// waiting, which takes only the newest (a slow map change for one OSD
// holds back neither the others nor its own later beacons).
type relayQueue struct {
	take    func(key string, v []byte)
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending map[string][]byte
	busy    map[string]bool
}

func (q *relayQueue) add(key string, v []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending[key] = v
	if q.busy[key] {
		return
	}
	q.busy[key] = true
	q.wg.Go(func() {
		for {
			q.mu.Lock()
			v, ok := q.pending[key]
			delete(q.pending, key)
			if !ok {
				delete(q.busy, key)
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			q.take(key, v)
		}
	})
}

// relayedBeacon takes one relayed beacon.
func (l *leadership) relayedBeacon(key string, v []byte) {
	m := l.m
	id, ok := idOf(key, m.k.relayPrefix())
	var rb osdpb.RelayedBeacon
	if err := proto.Unmarshal(v, &rb); !ok || err != nil || rb.Beacon == nil || rb.Beacon.Id != id {
		// Only mons write there; say so rather than act on it.
		m.log.Warn("ignoring a relayed beacon that does not parse", "key", key, "err", err)
		return
	}
	if !l.relayOfOurs(key, rb.Beacon.Fsid) {
		return
	}
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(l.ctx), requestTimeout)
	defer cancel()
	if _, err := l.beacon(ctx, rb.Beacon, relayName(rb.Mon)); err != nil && l.ctx.Err() == nil {
		m.log.Debug("a relayed beacon", "osd", id, "via", relayName(rb.Mon), "err", err)
	}
}

// relayedFailure takes one relayed failure report.
func (l *leadership) relayedFailure(key string, v []byte) {
	m := l.m
	reporter, target, ok := m.k.parseRelayFailure(key)
	var rf osdpb.RelayedFailure
	if err := proto.Unmarshal(v, &rf); !ok || err != nil || rf.Failure == nil || rf.Failure.Reporter != reporter || rf.Failure.Target != target {
		m.log.Warn("ignoring a relayed failure report that does not parse", "key", key, "err", err)
		return
	}
	if !l.relayOfOurs(key, rf.Failure.Fsid) {
		return
	}
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(l.ctx), requestTimeout)
	defer cancel()
	if err := l.failure(ctx, rf.Failure); err != nil && l.ctx.Err() == nil {
		m.log.Debug("a relayed failure report", "reporter", reporter, "target", target, "via", relayName(rf.Mon), "err", err)
	}
}

// relayedMarkMeDown takes one relayed mark-me-down.
func (l *leadership) relayedMarkMeDown(key string, v []byte) {
	m := l.m
	id, ok := idOf(key, m.k.relayMarkMeDownPrefix())
	var rd osdpb.RelayedMarkMeDown
	if err := proto.Unmarshal(v, &rd); !ok || err != nil || rd.Request == nil || rd.Request.Id != id {
		m.log.Warn("ignoring a relayed mark-me-down that does not parse", "key", key, "err", err)
		return
	}
	if !l.relayOfOurs(key, rd.Request.Fsid) {
		return
	}
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(l.ctx), requestTimeout)
	defer cancel()
	if err := l.markMeDown(ctx, rd.Request); err != nil && l.ctx.Err() == nil {
		m.log.Debug("a relayed mark-me-down", "osd", id, "via", relayName(rd.Mon), "err", err)
	}
}

// relayedBoot boots an OSD a standby relayed, and leaves the reply for
// the standby to answer with (relayBoot), on the standby's lease.
func (l *leadership) relayedBoot(key string, v []byte) {
	m := l.m
	nonce, _ := strings.CutPrefix(key, m.k.relayBootPrefix())
	var rb osdpb.RelayedBoot
	if err := proto.Unmarshal(v, &rb); err != nil || rb.Boot == nil || rb.Lease == 0 || nonce == "" {
		m.log.Warn("ignoring a relayed boot that does not parse", "key", key, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(l.ctx), requestTimeout)
	defer cancel()
	// Claim the request: it is taken once, by one leader. Left in etcd, a
	// new leader would boot it again from its watch's existing records,
	// perhaps long after the OSD booted otherwise (the standby's lease
	// outlives it by up to 20 s if the standby dies).
	claim, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), ">", 0)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil || !claim.Succeeded {
		if err != nil && l.ctx.Err() == nil {
			m.log.Debug("claiming a relayed boot", "key", key, "err", err)
		}
		return
	}
	var rep *osdpb.MonBootReply
	if rb.Boot.Fsid != "" && rb.Boot.Fsid != m.fsid {
		err = ops.Errorf(osdpb.Status_WRONG_CLUSTER, "fsid %s is not this cluster's (%s)", rb.Boot.Fsid, m.fsid)
	} else if err = validateBoot(rb.Boot); err == nil {
		rep, err = l.boot(ctx, rb.Boot)
	}
	if err != nil {
		m.log.Debug("a relayed boot", "via", relayName(rb.Mon), "err", err)
		rep = &osdpb.MonBootReply{Header: m.header(err)}
	}
	out, err := proto.Marshal(rep)
	if err == nil {
		_, err = m.cli.Put(ctx, m.k.relayBootReply(nonce), string(out), clientv3.WithLease(clientv3.LeaseID(rb.Lease)))
	}
	if err != nil && l.ctx.Err() == nil {
		// The standby gave up (its lease ended) or etcd failed: the OSD
		// boots again.
		m.log.Debug("answering a relayed boot", "via", relayName(rb.Mon), "err", err)
	}
}

// relayOfOurs: a relayed record names this cluster (or none).
func (l *leadership) relayOfOurs(key, fsid string) bool {
	if fsid != "" && fsid != l.m.fsid {
		l.m.log.Warn("ignoring a relayed record of another cluster", "key", key, "fsid", fsid)
		return false
	}
	return true
}

// relayName is how a relaying mon is named in records and logs.
func relayName(mon string) string {
	if mon == "" {
		return "a standby mon"
	}
	return fmt.Sprintf("mon.%s", mon)
}
