package mon

import (
	"context"
	"errors"
	"fmt"
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
	cannot := func(what string, err error) error {
		return ops.Errorf(osdpb.Status_NOT_LEADER, "mon.%s is a standby and could not relay the beacon (%s: %v); the leader is at %s", m.cfg.Name, what, err, leader)
	}
	expired := ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d's liveness lease expired (silent for longer than %v): the leader marks it down; boot again", b.Id, m.cfg.HeartbeatGrace)
	resp, err := m.cli.Get(ctx, m.k.alive(b.Id))
	if err != nil {
		return nil, cannot("reading the OSD's lease", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return nil, expired
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	rec, err := proto.Marshal(&osdpb.RelayedBeacon{Beacon: b, Mon: m.cfg.Name, AtUnixNanos: time.Now().UnixNano()})
	if err != nil {
		return nil, err
	}
	if _, err := m.cli.Put(ctx, m.k.relay(b.Id), string(rec), clientv3.WithLease(lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, expired
		}
		return nil, cannot("passing the beacon to the leader", err)
	}
	h := m.header(nil)
	h.Leader = leader
	if b.Epoch < mp.Epoch() {
		h.Map = mp.Proto()
	}
	return &osdpb.MonBeaconReply{Header: h, RelayedBy: m.cfg.Name}, nil
}

// watchRelays acts on the beacons standby mons relayed (relayBeacon) as
// on the ones the OSDs send us, each OSD's newest one at a time
// (relayQueue), many OSDs at once. A watch that broke resumes after the
// last revision it saw; the first starts from now.
func (l *leadership) watchRelays() {
	m := l.m
	backoff := newBackoff()
	q := relayQueue{l: l, pending: map[uint32]relayedAt{}, busy: map[uint32]bool{}}
	defer q.wg.Wait()
	var next int64 // revision to resume from (0: now)
	for l.ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterDelete()}
		if next != 0 {
			opts = append(opts, clientv3.WithRev(next))
		}
		for wr := range m.cli.Watch(wctx, m.k.relayPrefix(), opts...) {
			if err := wr.Err(); err != nil {
				if wr.CompactRevision != 0 {
					// The revision we would resume from is gone (relays
					// come seldom; stats writes move revisions on):
					// from now, then, as the first watch.
					m.log.Warn("relayed beacons: resuming the watch from now, its revision was compacted", "revision", next, "err", err)
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

// relayedAt is one OSD's newest relayed beacon, as stored under key.
type relayedAt struct {
	id  uint32
	key string
	v   []byte
}

// relayQueue runs the relayed beacons: one goroutine per OSD while it has
// one waiting, which takes only the newest (a slow map change for one OSD
// holds back neither the others nor its own later beacons).
type relayQueue struct {
	l       *leadership
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending map[uint32]relayedAt
	busy    map[uint32]bool
}

func (q *relayQueue) add(key string, v []byte) {
	id, ok := idOf(key, q.l.m.k.relayPrefix())
	if !ok {
		q.l.m.log.Warn("ignoring a relayed beacon under a key that names no OSD", "key", key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending[id] = relayedAt{id, key, v}
	if q.busy[id] {
		return
	}
	q.busy[id] = true
	q.wg.Go(func() {
		for {
			q.mu.Lock()
			r, ok := q.pending[id]
			delete(q.pending, id)
			if !ok {
				delete(q.busy, id)
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			q.l.relayed(r)
		}
	})
}

// relayed takes one relayed beacon.
func (l *leadership) relayed(r relayedAt) {
	m := l.m
	var rb osdpb.RelayedBeacon
	id, key := r.id, r.key
	if err := proto.Unmarshal(r.v, &rb); err != nil || rb.Beacon == nil || rb.Beacon.Id != id {
		// Only mons write there; say so rather than act on it.
		m.log.Warn("ignoring a relayed beacon that does not parse", "key", key, "err", err)
		return
	}
	if fsid := rb.Beacon.Fsid; fsid != "" && fsid != m.fsid {
		m.log.Warn("ignoring a relayed beacon of another cluster", "key", key, "fsid", fsid)
		return
	}
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(l.ctx), requestTimeout)
	defer cancel()
	if _, err := l.beacon(ctx, rb.Beacon, relayName(rb.Mon)); err != nil && l.ctx.Err() == nil {
		m.log.Debug("a relayed beacon", "osd", id, "via", relayName(rb.Mon), "err", err)
	}
}

// relayName is how a relaying mon is named in records and logs.
func relayName(mon string) string {
	if mon == "" {
		return "a standby mon"
	}
	return fmt.Sprintf("mon.%s", mon)
}
