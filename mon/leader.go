package mon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// leadership is what the leading mon does and knows while it leads: the
// failure reports, the OSD leases it keeps alive for beacons, and the
// loops that mark OSDs down (lease expiry, aged reports) and out. It ends
// with the etcd session that won the election; a new leader starts a new
// one, rebuilding what it needs from etcd.
type leadership struct {
	ctx    context.Context // ends when the leadership does
	cancel context.CancelFunc
	m      *Mon
	// fence holds while this mon's election key is the one that won: every
	// map write compares it, so a mon that lost the election without
	// noticing yet cannot write.
	fence clientv3.Cmp
	// heldIn are the OSDs the last tick kept in for min_in_ratio (tick's
	// goroutine only): the warning is logged when they change.
	heldIn []uint32

	// since is when this mon took over: for one grace after it, an OSD
	// whose lease expired gets a fresh one (regrant) instead of being
	// marked down, since nobody led to renew it.
	since time.Time

	mu       sync.Mutex
	failures *failureTracker
	leases   map[uint32]clientv3.LeaseID // OSD id -> its liveness lease
	last     map[uint32]*beaconRecord    // the previous beacon, for rates
	stored   map[uint32]statsWrite       // the last beacon record written to etcd, by OSD
	held     map[uint32]int64            // holds noteHeld recorded: until, by OSD
	caughtUp time.Time                   // the last catchUp's map write
	ratelog  guard.RateLog
}

func newLeadership(ctx context.Context, m *Mon, el *concurrency.Election) *leadership {
	ctx, cancel := context.WithCancel(ctx)
	return &leadership{
		ctx: ctx, cancel: cancel, m: m, since: time.Now(),
		fence:    clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev()),
		failures: newFailureTracker(m.cfg.HeartbeatGrace, m.cfg.MinDownReporters),
		leases:   map[uint32]clientv3.LeaseID{},
		last:     map[uint32]*beaconRecord{},
		stored:   map[uint32]statsWrite{},
		held:     map[uint32]int64{},
	}
}

// run watches the OSDs' liveness keys and ticks until the leadership ends.
func (l *leadership) run() {
	defer l.cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(l.watchLiveness)
	wg.Go(l.watchRelays)
	t := time.NewTicker(l.m.cfg.tick())
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
			l.tick()
		}
	}
}

// update writes the next map, fenced, and adopts it at once.
func (l *leadership) update(ctx context.Context, e edit) (*placement.Map, error) {
	next, err := l.m.store.update(ctx, &l.fence, e)
	if err == nil {
		l.m.adopt(next)
	}
	if errors.Is(err, errNotLeader) && l.ctx.Err() == nil {
		// Our election key is gone though our session lives (deleted
		// by hand, or a partition healed oddly): step down and campaign
		// again, rather than lead without the right to write.
		l.m.log.Warn("a fenced map write failed: this mon no longer leads; stepping down")
		l.cancel()
	}
	return next, err
}

// boot serves MSG_MON_BOOT: a fresh lease for the OSD, then one
// transaction that marks it up and puts its liveness key on the lease.
func (l *leadership) boot(ctx context.Context, b *osdpb.MonBoot) (*osdpb.MonBootReply, error) {
	m := l.m
	lease, err := m.cli.Grant(ctx, m.cfg.leaseTTL())
	if err != nil {
		return nil, unavailable("granting the OSD's lease", err)
	}
	var id uint32
	replaced := false // a new store under an id that booted before
	next, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
		var err error
		prev := osdByID(pb, b.Id)
		replaced = b.HasId && b.FreshStore && prev != nil && prev.UpFrom != 0
		if id, err = applyBoot(pb, b); err != nil {
			return txnExtra{}, err
		}
		return txnExtra{ops: []clientv3.Op{clientv3.OpPut(m.k.alive(id), b.Uuid, clientv3.WithLease(lease.ID))}}, nil
	})
	if err != nil {
		l.m.revoke(lease.ID)
		return nil, err
	}
	l.mu.Lock()
	old, hadOld := l.leases[id]
	l.leases[id] = lease.ID
	delete(l.last, id)
	delete(l.held, id)
	l.failures.forget(id)
	l.mu.Unlock()
	if hadOld && old != lease.ID {
		l.m.revoke(old) // it holds nothing now but the old liveness key
	}
	info, _ := next.OSD(id)
	m.log.Info("osd booted", "osd", id, "uuid", b.Uuid, "public", info.PublicAddr, "host", info.Host, "epoch", next.Epoch(), "in", info.In)
	if replaced {
		// As Ceph's osd destroy and a new disk under the id: peering no
		// longer waits for the old store, so writes only it held are gone.
		m.log.Warn("osd booted on a new store under an id that held data: what only its old store held is given up",
			"osd", id, "born", info.Born)
	}
	return &osdpb.MonBootReply{Header: m.header(nil), Id: id, Fsid: m.fsid, Map: next.Proto(), HeartbeatGraceNanos: int64(m.cfg.HeartbeatGrace)}, nil
}

// beaconTarget is the map and the up OSD a beacon speaks for, or the
// beacon's refusal: not in the map or marked down (SERVICE_UNAVAILABLE:
// boot again), another daemon's id (WRONG_CLUSTER).
func (m *Mon) beaconTarget(ctx context.Context, b *osdpb.MonBeacon) (*placement.Map, *osdpb.OSDInfo, error) {
	mp := m.Map()
	o, ok := mp.OSD(b.Id)
	if !ok || !o.Up {
		// The map we hold may be behind a boot another mon just wrote.
		if cur, _, err := m.store.current(ctx); err == nil {
			m.adopt(cur)
			mp = m.Map()
			o, ok = mp.OSD(b.Id)
		}
	}
	switch {
	case !ok:
		return nil, nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is not in the map (epoch %d); boot again", b.Id, mp.Epoch())
	case b.Uuid != "" && o.Uuid != "" && b.Uuid != o.Uuid:
		return nil, nil, ops.Errorf(osdpb.Status_WRONG_CLUSTER, "osd.%d belongs to another daemon (uuid %s, not %s)", b.Id, o.Uuid, b.Uuid)
	case !o.Up:
		return nil, nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is marked down (epoch %d); boot again", b.Id, mp.Epoch())
	}
	return mp, o, nil
}

// beacon serves MSG_MON_BEACON: it keeps the OSD's lease alive and stores
// what it reports for "status". relayedBy names the standby mon that took
// it from the OSD (empty: the OSD sent it to us).
func (l *leadership) beacon(ctx context.Context, b *osdpb.MonBeacon, relayedBy string) (*osdpb.MonBeaconReply, error) {
	m := l.m
	mp, o, err := m.beaconTarget(ctx, b)
	if err != nil {
		// Only the OSD the map has down, not a daemon of another uuid
		// that claims its id, nor one the map lacks.
		if cur, ok := m.Map().OSD(b.Id); b.HeldDown != nil && ok && !cur.Up && (b.Uuid == "" || cur.Uuid == "" || b.Uuid == cur.Uuid) {
			l.noteHeld(ctx, b)
		}
		return nil, err
	}
	if b.Epoch > mp.Epoch() {
		if mp, err = l.catchUp(ctx, b.Id, b.Epoch); err != nil {
			return nil, unavailable("moving the map's epoch past the OSD's", err)
		}
	}
	lease, err := l.renew(ctx, b.Id)
	if err != nil {
		return nil, unavailable("renewing the OSD's lease", err)
	}
	if lease == clientv3.NoLease && l.inTakeoverGrace() && l.regrant(ctx, o) == nil {
		// It expired while no mon led (see watchLiveness); this beacon
		// came before the takeover's own check.
		lease, err = l.leaseOf(ctx, b.Id)
		if err != nil {
			return nil, unavailable("renewing the OSD's lease", err)
		}
	}
	if lease == clientv3.NoLease {
		// The lease expired: the OSD was silent for the grace. It is
		// down (the liveness watch may be marking it so now).
		l.mu.Lock()
		delete(l.leases, b.Id)
		l.mu.Unlock()
		l.markDown(ctx, []uint32{b.Id}, "its lease expired before this beacon", o.UpFrom, downSilent)
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d was silent for longer than %v and is marked down; boot again", b.Id, m.cfg.HeartbeatGrace)
	}
	now := time.Now()
	l.mu.Lock()
	prev := l.last[b.Id]
	rec := newBeaconRecord(b, now, prev)
	rec.RelayedBy = relayedBy
	for i := range rec.PGs {
		p := &rec.PGs[i]
		if p.Epoch == mp.Epoch() {
			p.Acting = mp.ActingSet(p.Pool, p.PG)
		} else if prev != nil {
			// A report of an epoch behind ours (the OSD's map lags):
			// the acting set the last one was taken in under, kept.
			if j := slices.IndexFunc(prev.PGs, func(q pgRecord) bool { return q.Pool == p.Pool && q.PG == p.PG }); j >= 0 {
				p.Acting = prev.PGs[j].Acting
			}
		}
	}
	l.last[b.Id] = rec
	l.mu.Unlock()
	switch was := prev.relayedBy(); {
	case relayedBy != "" && was == "":
		// Once per change, not per beacon: the partition it points at
		// is the operator's to find.
		m.log.Warn("an OSD's beacons reach this mon only through a standby: it cannot reach the leader", "osd", b.Id, "via", relayedBy)
	case relayedBy == "" && was != "":
		m.log.Info("an OSD reaches the leader again", "osd", b.Id, "was_via", was)
	}
	if err := l.storeStats(ctx, rec, now); err != nil {
		return nil, unavailable("storing the OSD's stats", err)
	}
	if b.Fullness != o.Fullness {
		if err := checkFullness(b.Fullness); err != nil {
			return nil, err
		}
		// In the map, so every OSD and client sees it (Ceph's full flags);
		// an OSD's heartbeats tell its peers sooner.
		next, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
			return txnExtra{}, applyFullness(pb, b.Id, b.Fullness)
		})
		if err != nil {
			return nil, unavailable("recording the OSD's fullness", err)
		}
		if next.Epoch() > mp.Epoch() {
			m.log.Warn("osd fullness", "osd", b.Id, "fullness", ops.FullnessWord(b.Fullness), "epoch", next.Epoch())
		}
		mp = next
	}
	if slices.ContainsFunc(b.Pgs, func(st *osdpb.PGStat) bool { return st.GetUpFilled() && st.GetEpoch() <= mp.Epoch() }) {
		var dropped []placement.PGID
		past := map[uint64]*placement.Map{} // the reports' maps, read once
		pastMap := func(epoch uint64) *placement.Map {
			old, ok := past[epoch]
			if !ok {
				old, _ = m.store.get(ctx, epoch) // nil when not kept
				past[epoch] = old
			}
			return old
		}
		next, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
			cur := mp
			if pb.Epoch != mp.Epoch() {
				cur = pastMap(pb.Epoch) // the map moved since: judge against it
				if cur == nil {
					return txnExtra{}, errNoChange
				}
			}
			if dropped = dropFilledPGTemp(pb, cur, b.Id, b.Pgs, pastMap); len(dropped) == 0 {
				return txnExtra{}, errNoChange
			}
			return txnExtra{}, nil
		})
		if err != nil {
			return nil, unavailable("dropping filled pg_temp entries", err)
		}
		if len(dropped) > 0 && next.Epoch() > mp.Epoch() {
			m.log.Info("pg_temp: up sets filled; they act again", "pgs", dropped, "primary", b.Id, "epoch", next.Epoch())
		}
		mp = next
	}
	h := m.header(nil)
	if b.Epoch < mp.Epoch() {
		h.Map = mp.Proto()
	}
	return &osdpb.MonBeaconReply{Header: h}, nil
}

// maxCatchUp bounds the epochs catchUp skips at once: an OSD that
// claims a map epoch millions ahead has no such map (bad or foreign
// state), and jumping there would spend the epochs for nothing.
const maxCatchUp = 1 << 20

// catchUpEvery is the least time between two catch-ups of one leader.
const catchUpEvery = time.Minute

// catchUp writes the map again at the epoch after epoch, which OSD id
// holds a map of, when the leader's map is older: the map's store went
// back (etcd restored from a snapshot). The OSDs hold maps of the epochs
// after the restored one already, other maps than the mon would now
// make under those numbers, and would take none of them: every command
// until the mon's epochs passed theirs would be lost without a word
// (Ceph rebuilds a lost mon store from the OSDs' newer maps). The map
// written is the store's, as it was restored: the OSDs adopt it as any
// newer map.
func (l *leadership) catchUp(ctx context.Context, id uint32, epoch uint64) (*placement.Map, error) {
	m := l.m
	mp := m.Map()
	if epoch-mp.Epoch() > maxCatchUp {
		l.ratelog.Log(m.log, slog.LevelError, "catch up", "an OSD holds a map epoch far past the mons': not a map of this cluster's history; the map stays",
			"osd", id, "osd_epoch", epoch, "epoch", mp.Epoch(), "most", maxCatchUp)
		return mp, nil
	}
	// Once a minute at most: after a restore, the first beacon of the
	// OSD with the newest map moves the map past every OSD's; an OSD that
	// keeps claiming newer epochs (bad state, a stolen key) must not burn
	// the epochs by the million.
	l.mu.Lock()
	recent := !l.caughtUp.IsZero() && time.Since(l.caughtUp) < catchUpEvery
	if !recent {
		l.caughtUp = time.Now()
	}
	l.mu.Unlock()
	if recent {
		l.ratelog.Log(m.log, slog.LevelWarn, "catch up again", "an OSD holds a newer map than the mons' again within a minute of the last catch-up; the map waits",
			"osd", id, "osd_epoch", epoch, "epoch", mp.Epoch())
		return mp, nil
	}
	next, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
		if pb.Epoch >= epoch {
			return txnExtra{}, errNoChange
		}
		return txnExtra{epochAtLeast: epoch + 1}, nil
	})
	if err != nil {
		return nil, err
	}
	if next.Epoch() > epoch && next.Epoch() > mp.Epoch() {
		m.log.Warn("the cluster map's store is behind the OSDs' maps (etcd restored from an older snapshot?): the map moves past their epochs",
			"osd", id, "osd_epoch", epoch, "was", mp.Epoch(), "epoch", next.Epoch())
	}
	return next, nil
}

// statsWrite is when the leader last wrote an OSD's beacon record to
// etcd (the monotonic clock: a wall-clock step does not hold writes
// back), the record's own time, and its writeThrough.
type statsWrite struct {
	at    time.Time
	recAt int64
	sig   []byte
}

// storeStats writes rec, an OSD's beacon record taken in at now, to etcd
// (stats/<id>), where every mon's "status" reads it: at once when what
// the health checks and PG states read of it changed
// (beaconRecord.writeThrough), else when the last write is
// Config.statsEvery old; what it held back goes with the OSD's down
// marking (heldStats).
// Counters and rates alone change at every beacon: writing each one
// cost etcd a synced write per OSD per second (Ceph's mgr keeps PG stats
// in memory and reports them every 5 s). The leader's own status reads
// the records it holds (overlayStats).
//
// Not on the OSD's lease: the record outlives the OSD's death, so its
// PGs' last reports stay in the status (stale) while no OSD of theirs is
// up; the up OSDs' records alone count toward space and rates, and "osd
// rm" deletes it.
func (l *leadership) storeStats(ctx context.Context, rec *beaconRecord, now time.Time) error {
	sig := rec.writeThrough()
	l.mu.Lock()
	last, current := l.stored[rec.ID], l.last[rec.ID] == rec
	l.mu.Unlock()
	if !current || !last.at.IsZero() && now.Sub(last.at) < l.m.cfg.statsEvery() && bytes.Equal(sig, last.sig) {
		// Not current: a newer beacon's record goes instead, or the OSD
		// was marked down meanwhile (its last record went with that).
		return nil
	}
	js, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// Only while the OSD is alive (its liveness key there): a write that
	// lands after its down marking (and its last record with it), or
	// after osd rm, would undo them.
	resp, err := l.m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.m.k.alive(rec.ID)), "!=", 0)).
		Then(clientv3.OpPut(l.m.k.stats(rec.ID), string(js))).Commit()
	if err != nil || !resp.Succeeded {
		return err
	}
	l.mu.Lock()
	if l.last[rec.ID] != nil {
		l.stored[rec.ID] = statsWrite{at: now, recAt: rec.AtUnixNano, sig: sig}
	}
	l.mu.Unlock()
	return nil
}

// downTxn is what marking ids down writes beside the map: their liveness
// keys go, their held-back stats records are written (heldStats), and
// onlyIfDead makes the transaction fail if one of them booted again since.
func (l *leadership) downTxn(ids []uint32, onlyIfDead bool) txnExtra {
	var x txnExtra
	for _, id := range ids {
		if onlyIfDead {
			x.cmps = append(x.cmps, clientv3.Compare(clientv3.Version(l.m.k.alive(id)), "=", 0))
		}
		x.ops = append(x.ops, clientv3.OpDelete(l.m.k.alive(id)))
	}
	x.ops = append(x.ops, l.heldStats(ids)...)
	return x
}

// heldStats are the operations that write the beacon records storeStats
// held back of OSDs ids, for the transaction that marks them down: the
// record outlives the OSD (its PGs' last reports), written with its
// marking, before anything (noteHeld) may add to it.
func (l *leadership) heldStats(ids []uint32) []clientv3.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	var puts []clientv3.Op
	for _, id := range ids {
		rec := l.last[id]
		if rec == nil || rec.AtUnixNano <= l.stored[id].recAt {
			continue
		}
		if js, err := json.Marshal(rec); err == nil {
			puts = append(puts, clientv3.OpPut(l.m.k.stats(id), string(js)))
		}
	}
	return puts
}

// overlayStats replaces, in records read from etcd, those older than the
// one this leader holds for the OSD (storeStats wrote it later, or not
// yet). An OSD without a record in etcd gets none: "osd rm" deleted it.
func (l *leadership) overlayStats(records map[uint32]*beaconRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, r := range records {
		if x := l.last[id]; x != nil && x.AtUnixNano > r.AtUnixNano {
			c := *x // records held are never changed: a shallow copy serves
			if c.HeldDown == nil {
				c.HeldDown = r.HeldDown // noteHeld's, written to etcd alone
			}
			records[id] = &c
		}
	}
}

// noteHeld records in the stats record of OSD b.Id, down, that it holds
// itself down (b.HeldDown), for the status's OSD_DOWN; the rest of the
// record (its PGs' last reports) stays as its last beacon while up left
// it. Written once per hold, not at each of its beacons; best effort.
func (l *leadership) noteHeld(ctx context.Context, b *osdpb.MonBeacon) {
	m := l.m
	h := heldDownOf(b.HeldDown)
	l.mu.Lock()
	done := l.held[b.Id] == h.UntilUnixNano
	l.mu.Unlock()
	if done {
		return
	}
	rec := &beaconRecord{ID: b.Id}
	resp, err := m.cli.Get(ctx, m.k.stats(b.Id))
	if err != nil {
		return
	}
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, rec); err != nil {
			return
		}
	}
	rec.HeldDown = h
	js, err := json.Marshal(rec)
	if err != nil {
		return
	}
	if _, err := m.cli.Put(ctx, m.k.stats(b.Id), string(js)); err != nil {
		return
	}
	l.mu.Lock()
	l.held[b.Id] = h.UntilUnixNano
	l.mu.Unlock()
	m.log.Warn("an OSD holds itself down: marked down too often while running", "osd", b.Id, "markdowns", h.Markdowns,
		"period", h.Period, "until", time.Unix(0, h.UntilUnixNano).UTC().Format(time.RFC3339))
}

// renew keeps OSD id's liveness lease alive and returns it; NoLease when
// it expired.
func (l *leadership) renew(ctx context.Context, id uint32) (clientv3.LeaseID, error) {
	for range 2 {
		lease, err := l.leaseOf(ctx, id)
		if err != nil || lease == clientv3.NoLease {
			return lease, err
		}
		_, err = l.m.cli.KeepAliveOnce(ctx, lease)
		if err == nil {
			return lease, nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return clientv3.NoLease, err
		}
		// Ours is gone; the key may be on a newer lease (a boot through
		// another leader). Look again, in etcd.
		l.mu.Lock()
		if l.leases[id] == lease {
			delete(l.leases, id)
		}
		l.mu.Unlock()
	}
	return clientv3.NoLease, nil
}

// leaseOf finds OSD id's liveness lease: ours from its boot, or, after a
// failover, the one its liveness key in etcd is on. NoLease when the key
// is gone.
func (l *leadership) leaseOf(ctx context.Context, id uint32) (clientv3.LeaseID, error) {
	l.mu.Lock()
	lease, ok := l.leases[id]
	l.mu.Unlock()
	if ok {
		return lease, nil
	}
	resp, err := l.m.cli.Get(ctx, l.m.k.alive(id))
	if err != nil {
		return clientv3.NoLease, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return clientv3.NoLease, nil
	}
	lease = clientv3.LeaseID(resp.Kvs[0].Lease)
	l.mu.Lock()
	l.leases[id] = lease
	l.mu.Unlock()
	return lease, nil
}

// failure serves MSG_MON_FAILURE.
func (l *leadership) failure(ctx context.Context, f *osdpb.MonFailure) error {
	mp := l.m.Map()
	l.mu.Lock()
	down, why := l.failures.report(mp, f, time.Now())
	l.mu.Unlock()
	if !down {
		return nil
	}
	// f.Epoch >= the target's up_from (the tracker checked): a boot since
	// then is another incarnation, which the report is not about.
	target, _ := mp.OSD(f.Target)
	how := downReported
	if f.Immediate {
		how = downDead
	}
	_, err := l.markDown(ctx, []uint32{f.Target}, why, target.UpFrom, how)
	return err
}

// markMeDown serves MSG_MON_MARK_ME_DOWN: an OSD that stops cleanly is
// marked down now, as Ceph's MOSDMarkMeDown, so its PGs re-peer without
// it instead of waiting out the grace (its peers' refused connections
// would say as much only where a stop shows as a refusal, and only to
// peers that had seen it). One sent by an earlier incarnation (the OSD
// booted again after the map the request names) marks nothing down, nor
// does one for an OSD already down.
func (l *leadership) markMeDown(ctx context.Context, r *osdpb.MonMarkMeDown) error {
	if o, ok := l.m.Map().OSD(r.Id); ok && r.Uuid != "" && o.Uuid != "" && r.Uuid != o.Uuid {
		return ops.Errorf(osdpb.Status_WRONG_CLUSTER, "osd.%d belongs to another daemon (uuid %s, not %s)", r.Id, o.Uuid, r.Uuid)
	}
	_, err := l.markDown(ctx, []uint32{r.Id}, fmt.Sprintf("osd.%d asked to be marked down: it is stopping", r.Id), r.Epoch, downDead)
	return err
}

// downHow is the evidence an OSD is marked down on.
type downHow int

const (
	// downReported: failure reports; the OSD may still run.
	downReported downHow = iota
	// downSilent: its liveness lease expired (no beacon for the grace);
	// the markdown also requires its liveness key gone, so a boot that
	// raced us wins. It may still run, cut off from the mons.
	downSilent
	// downDead: its process is gone (it asked, stopping; or a peer's
	// connection to it was refused): OSDInfo.dead.
	downDead
)

// markDown marks ids down in one map change. upFromAtMost (when not 0)
// spares an OSD that booted again since the evidence.
func (l *leadership) markDown(ctx context.Context, ids []uint32, why string, upFromAtMost uint64, how downHow) ([]uint32, error) {
	m := l.m
	now := time.Now()
	var changed []uint32
	onlyIfDead := how == downSilent
	next, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
		changed = markDown(pb, ids, now, upFromAtMost, how == downDead)
		if len(changed) == 0 {
			return txnExtra{}, errNoChange
		}
		return l.downTxn(changed, onlyIfDead), nil
	})
	if errors.Is(err, errConflict) {
		return nil, nil // it booted again meanwhile
	}
	if err != nil {
		if l.ctx.Err() == nil {
			m.log.Warn("marking down failed", "osds", ids, "why", why, "err", err)
		}
		return nil, err
	}
	if len(changed) > 0 {
		m.log.Info("osds marked down", "osds", changed, "why", why, "epoch", next.Epoch())
	}
	l.dropOSDs(changed)
	return changed, nil
}

// dropOSDs forgets what the leader keeps for OSDs that went down and
// revokes their leases, which drops their liveness keys (their stats
// records stay: a stale PG's last report; the transaction that marked
// them down wrote the last, heldStats).
func (l *leadership) dropOSDs(ids []uint32) {
	var leases []clientv3.LeaseID
	l.mu.Lock()
	for _, id := range ids {
		if lease, ok := l.leases[id]; ok {
			leases = append(leases, lease)
		}
		delete(l.leases, id)
		delete(l.last, id)
		delete(l.stored, id)
		l.failures.forget(id)
	}
	l.mu.Unlock()
	for _, lease := range leases {
		l.m.revoke(lease)
	}
}

// revoke drops a lease, best effort: one we fail to revoke expires.
// expired handles OSD id's liveness lease running out: it is marked down,
// unless we took over less than a grace ago. Then the lease ran out (or
// was last renewed) while no mon led, and its beacons had no leader to go
// to: it gets a fresh lease and one grace to beacon to us, as Ceph's new
// leader restarts its OSD report timers. A dead one is still marked down
// by its peers' reports, or when that lease expires.
func (l *leadership) expired(id uint32, why string) {
	if o, ok := l.m.Map().OSD(id); ok && o.Up && l.inTakeoverGrace() && l.regrant(l.ctx, o) == nil {
		return
	}
	l.markDown(l.ctx, []uint32{id}, why, 0, downSilent)
}

func (l *leadership) inTakeoverGrace() bool { return time.Since(l.since) < l.m.cfg.HeartbeatGrace }

// regrant gives up OSD o, whose liveness key is gone, a fresh lease and
// key, unless its key came back meanwhile (a boot) or it is no longer up.
func (l *leadership) regrant(ctx context.Context, o *osdpb.OSDInfo) error {
	m := l.m
	l.mu.Lock()
	before := l.leases[o.Id]
	l.mu.Unlock()
	lease, err := m.cli.Grant(ctx, m.cfg.leaseTTL())
	if err != nil {
		return err
	}
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.k.alive(o.Id)), "=", 0)).
		Then(clientv3.OpPut(m.k.alive(o.Id), o.Uuid, clientv3.WithLease(lease.ID))).Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("its liveness key came back")
	}
	if err != nil {
		l.m.revoke(lease.ID)
		return err
	}
	l.mu.Lock()
	raced := l.leases[o.Id] != before
	if !raced {
		l.leases[o.Id] = lease.ID
	}
	l.mu.Unlock()
	if raced {
		// A boot put the key on its own lease meanwhile: ours holds nothing.
		l.m.revoke(lease.ID)
		return nil
	}
	m.log.Info("osd lease renewed at takeover: it gets one grace to beacon", "osd", o.Id, "grace", m.cfg.HeartbeatGrace)
	return nil
}

// revoke ends a lease and the keys on it, best effort: one left expires.
func (m *Mon) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	m.cli.Revoke(ctx, lease)
}

// commandResult is the JSON output of a map-changing command.
type commandResult struct {
	Command string   `json:"command"`
	IDs     []uint32 `json:"ids"`
	Changed []uint32 `json:"changed"`
	Epoch   uint64   `json:"epoch"`
	Message string   `json:"message"`
}

// command runs a map-changing command as one map change, which records
// its reply under g's request id (g nil: none).
func (l *leadership) command(ctx context.Context, c osdCommand, g *requestGuard) (*commandResult, error) {
	m := l.m
	now := time.Now()
	if c.prefix == "osd rm" && !c.sure {
		if err := m.refuseRmWhileBlocked(ctx, c.ids); err != nil {
			return nil, err
		}
	}
	var changed []uint32
	next, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
		var err error
		changed = nil
		if changed, err = c.apply(pb, now); err != nil {
			return txnExtra{}, err
		}
		var x txnExtra
		switch c.prefix {
		case "osd down":
			x = l.downTxn(changed, false)
		case "osd rm":
			// The OSD's entity goes with it, as Ceph's "osd purge": the
			// removed disk's key must not authenticate as the next OSD
			// that gets its id (osd create hands an existing osd.N's key
			// to the new OSD).
			for _, id := range changed {
				x.ops = append(x.ops, clientv3.OpDelete(m.k.alive(id)), clientv3.OpDelete(m.k.stats(id)),
					clientv3.OpDelete(m.auth.k.auth(ops.OSDName(id))))
			}
		}
		if g == nil {
			return x, nil
		}
		epoch := pb.Epoch + 1 // the epoch this edit makes
		rep, err := commandReply(c.result(changed, epoch), nil)
		if err != nil {
			return txnExtra{}, err
		}
		rep.Epoch = epoch
		gx, err := g.extra(rep)
		return x.join(gx), err
	})
	if err != nil {
		return nil, err
	}
	if changed == nil {
		g.wroteNothing()
	}
	res := c.result(changed, next.Epoch())
	switch {
	case changed == nil:
	case slices.Contains(ratioCommands, c.prefix):
		m.log.Info("command", "command", c.prefix, "ratio", c.ratio, "epoch", next.Epoch())
	case c.prefix == "osd pool set":
		m.log.Info("command", "command", c.prefix, "pool", c.pool, "var", c.variable, "val", c.value, "epoch", next.Epoch())
	case slices.Contains(flagCommands, c.prefix):
		m.log.Info("command", "command", c.prefix, "flag", c.variable, "epoch", next.Epoch())
	default:
		m.log.Info("command", "command", c.prefix, "osds", changed, "epoch", next.Epoch())
	}
	if c.prefix == "osd down" || c.prefix == "osd rm" {
		l.dropOSDs(changed)
	}
	if c.prefix == "osd rm" && len(changed) > 0 && !m.cfg.NoAuth {
		// This mon refuses the removed OSDs' sessions from now on, not
		// when its watch of the auth records catches up.
		if t, err := m.auth.listTable(ctx); err == nil {
			m.adoptAuthTable(t)
		}
	}
	return res, nil
}

// refuseRmWhileBlocked refuses "osd rm" of ids while a PG is down or
// incomplete: such a PG may be waiting for one of them (osprey pg query
// says which it waits for), and peering gives up on an OSD the map no
// longer has, with what only it held, as on one declared lost.
func (m *Mon) refuseRmWhileBlocked(ctx context.Context, ids []uint32) error {
	in, err := m.statusInput(ctx)
	if err != nil {
		return err
	}
	var blocked []string
	for v := range pgViews(in) {
		if v.broken {
			blocked = append(blocked, v.PGID)
		}
	}
	if len(blocked) == 0 {
		return nil
	}
	return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd rm %v: pgs %s are down or incomplete and may be waiting for these OSDs (osprey pg query PGID names whom each waits for); "+
		"removing them gives up what only they hold, as osd lost does: say --yes-i-really-mean-it", ids, strings.Join(blocked, ", "))
}

// result is c's output when it changed the OSDs changed (nil: nothing)
// and the map is at epoch.
func (c osdCommand) result(changed []uint32, epoch uint64) *commandResult {
	res := &commandResult{Command: c.prefix, IDs: c.ids, Changed: changed, Epoch: epoch}
	if slices.Contains(ratioCommands, c.prefix) || c.prefix == "osd pool set" || slices.Contains(flagCommands, c.prefix) {
		res.IDs = []uint32{}
	}
	switch {
	case changed == nil:
		res.Changed, res.Message = []uint32{}, "nothing to change"
	case slices.Contains(ratioCommands, c.prefix):
		res.Message = fmt.Sprintf("%s %g at epoch %d", c.prefix, c.ratio, epoch)
	case slices.Contains(flagCommands, c.prefix):
		res.Message = fmt.Sprintf("%s is %s at epoch %d", c.variable, strings.TrimPrefix(c.prefix, "osd "), epoch)
	case c.prefix == "osd pool set":
		res.Message = fmt.Sprintf("set pool %s %s to %s at epoch %d", c.pool, c.variable, c.value, epoch)
		if c.variable == "size" {
			n, _ := c.validatePoolSet()
			res.Message += fmt.Sprintf(" (min_size %d)", placement.MinSize(&osdpb.Pool{Size: n}))
		}
	default:
		res.Message = fmt.Sprintf("%s: %v at epoch %d", c.prefix, changed, epoch)
	}
	return res
}

// watchLiveness marks down the OSDs whose liveness keys vanish (their
// leases expired: no beacon for the grace; see expired for the grace
// after a takeover). On start, and whenever the watch breaks, it first
// checks every up OSD for its key, so an expiry while no mon led, or that
// the watch did not see, is noticed too.
func (l *leadership) watchLiveness() {
	m := l.m
	backoff := newBackoff()
	for l.ctx.Err() == nil {
		resp, err := m.cli.Get(l.ctx, m.k.alivePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			backoff.wait(l.ctx)
			continue
		}
		alive := map[uint32]bool{}
		for _, kv := range resp.Kvs {
			if id, ok := idOf(string(kv.Key), m.k.alivePrefix()); ok {
				alive[id] = true
			}
		}
		for o := range m.Map().OSDs() {
			if o.Up && !alive[o.Id] {
				l.expired(o.Id, "it has no liveness lease (expired)")
			}
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
		wch := m.cli.Watch(wctx, m.k.alivePrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut())
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				if id, ok := idOf(string(ev.Kv.Key), m.k.alivePrefix()); ok {
					l.expired(id, fmt.Sprintf("no beacon for %v: its lease expired", m.cfg.HeartbeatGrace))
				}
			}
			backoff.reset()
		}
		cancel()
		backoff.wait(l.ctx)
	}
}

// tick marks down the OSDs whose failure reports have aged enough, and
// out the ones down for longer than the down-out interval.
func (l *leadership) tick() {
	m := l.m
	now := time.Now()
	mp := m.Map()
	l.mu.Lock()
	ids, whys := l.failures.due(mp, now)
	l.mu.Unlock()
	for i, id := range ids {
		o, _ := mp.OSD(id)
		l.markDown(l.ctx, []uint32{id}, whys[i], o.UpFrom, downReported)
	}
	// Only write when something is due; the edit checks again.
	due, held := downOut(mp.Proto(), now, m.cfg.DownOutInterval, m.cfg.MinInRatio)
	if !slices.Equal(held, l.heldIn) {
		l.heldIn = held
		if len(held) > 0 {
			m.log.Warn("osds down for longer than the down-out interval kept in: fewer than min_in_ratio of the OSDs are in",
				"osds", held, "min_in_ratio", m.cfg.MinInRatio)
		}
	}
	if len(due) == 0 {
		return
	}
	var out []uint32
	next, err := l.update(l.ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
		if out, _ = downOut(pb, now, m.cfg.DownOutInterval, m.cfg.MinInRatio); len(out) == 0 {
			return txnExtra{}, errNoChange
		}
		return txnExtra{}, nil
	})
	if err != nil {
		if l.ctx.Err() == nil {
			m.log.Warn("marking out failed", "err", err)
		}
		return
	}
	if len(out) > 0 {
		m.log.Info("osds marked out: down for longer than the down-out interval", "osds", out, "interval", m.cfg.DownOutInterval, "epoch", next.Epoch())
	}
}
