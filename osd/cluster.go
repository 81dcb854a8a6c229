package osd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd/pg"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// clusterDispatcher serves the other OSDs: replication, recovery,
// heartbeats, and the replies to our own requests to them.
type clusterDispatcher struct{ o *OSD }

func (d clusterDispatcher) HandleEvent(ev msgr.Event) {
	o := d.o
	id, ok := osdID(ev.Conn)
	o.log.Debug("cluster conn event", "event", ev.Kind, "peer", ev.Conn, "err", ev.Err)
	if ev.Conn.Policy().Lossy {
		// A heartbeat session (heartbeatConn): it carries no requests and
		// no PG state, and its faults only mean a new one at the next beat.
		var refused *msgr.RefusedError
		if ok && ev.Kind == msgr.EventReset && errors.As(ev.Err, &refused) {
			o.sideRefused(id, refused)
		}
		return
	}
	// A request the peer's lost session held gets no reply: its caller
	// hears so now, not at its deadline (a recovery's pull waits minutes).
	o.calls.HandleEvent(ev)
	if ok && (ev.Kind == msgr.EventRemoteReset || ev.Kind == msgr.EventReset) {
		// Another incarnation of the peer, maybe of another build, may
		// take heartbeat side sessions.
		o.sideAgain(id)
	}
	if ok && ev.Kind == msgr.EventRemoteReset {
		// What we sent its previous incarnation is gone with it.
		o.failPeer(id, "restarted")
	}
	if ok && (ev.Kind == msgr.EventRemoteReset || ev.Kind == msgr.EventAccept) {
		// The peer restarted, or dialed us anew: what it missed while
		// away reaches it through a sync of every PG we share.
		if hook := peeringStarted.Load(); hook != nil {
			hook(o.id, id, ev.Kind.String())
		}
		o.wg.Go(func() { o.peerWith(id, ev.Kind.String()) })
	}
}

// peeringStarted, when set (tests), runs as OSD osd starts a sync of every
// PG it shares with OSD peer on a session event (why).
var peeringStarted testHook[func(osd, peer uint32, why string)]

// clusterReceived, when set (tests, through export_test.go), runs as OSD
// osd receives a cluster message of type t from OSD from, and drops it
// when it returns true.
var clusterReceived testHook[func(osd, from uint32, t osdpb.MsgType) bool]

// repOpReceived, when set (tests, through export_test.go), runs as OSD
// osd has decoded a RepOp from OSD from, and drops it when it returns
// true: a push lost to a replica that refused it (an epoch it did not
// have yet) while the primary's next write overtakes its resend.
var repOpReceived testHook[func(osd, from uint32, r *osdpb.RepOp) bool]

// osdID is the id of the OSD at the other end of c.
func osdID(c *msgr.Conn) (uint32, bool) { return ops.ParseOSDName(string(c.Peer())) }

func (d clusterDispatcher) Dispatch(m *msgr.Message) {
	o := d.o
	from, isOSD := osdID(m.Conn())
	t := osdpb.MsgType(m.Type)
	if !isOSD {
		o.badRequest(m, fmt.Errorf("cluster message from %s, which is not an OSD", m.Conn().Peer()))
		return
	}
	if hook := clusterReceived.Load(); hook != nil && hook(o.id, from, t) {
		m.Release() // lost, as to a peer that died before it answered
		return
	}
	switch t {
	case osdpb.MsgType_MSG_REP_OP:
		var r osdpb.RepOp
		if err := m.DecodeFront(&r); err != nil || r.Entry == nil {
			o.log.Warn("malformed rep op", "from", from, "err", err)
			m.Release()
			return
		}
		if hook := repOpReceived.Load(); hook != nil && hook(o.id, from, &r) {
			m.Release()
			return
		}
		sid, err := o.peerPG(r.Pool, r.Pg)
		if err != nil {
			o.ratelog.Log(o.log, slog.LevelWarn, "rep op refused", "rep op refused", "from", from, "err", err)
			o.ackRepOp(m, &r, nil, err)
			return
		}
		o.onShard(m, sid, func() { o.repOp(m, &r, sid, from) })

	case osdpb.MsgType_MSG_REP_OP_REPLY:
		var r osdpb.RepOpReply
		err := m.DecodeFront(&r)
		m.Release()
		if err != nil {
			o.log.Warn("malformed rep op reply", "from", from, "err", err)
			return
		}
		o.learnEpoch(r.Header.GetEpoch(), from)
		o.repReply(&r, from)

	case osdpb.MsgType_MSG_HEARTBEAT:
		var h osdpb.Heartbeat
		err := m.DecodeFront(&h)
		c := m.Conn()
		m.Release()
		if err != nil {
			return
		}
		o.learnEpoch(h.Epoch, from)
		o.sawPeer(from)
		rep, _ := proto.Marshal(&osdpb.HeartbeatReply{From: o.id, Epoch: o.Map().Epoch(), SentUnixNano: h.SentUnixNano,
			Fullness: osdpb.Fullness(o.fullness.Load()), NoLease: !o.grantLease(from, h.Epoch, h.LeaseNanos)})
		c.TrySend(msgr.NewMessage(uint16(osdpb.MsgType_MSG_HEARTBEAT_REPLY), rep, nil))

	case osdpb.MsgType_MSG_HEARTBEAT_REPLY:
		var h osdpb.HeartbeatReply
		err := m.DecodeFront(&h)
		m.Release()
		if err == nil {
			o.learnEpoch(h.Epoch, from)
			o.sawPeer(from)
			o.noteLease(from, h.SentUnixNano, !h.NoLease)
			o.sawEpoch(from, h.Epoch)
			o.notePeerFullness(from, h.Fullness)
		}

	case osdpb.MsgType_MSG_PG_QUERY, osdpb.MsgType_MSG_PG_LOG_PULL, osdpb.MsgType_MSG_PG_BACKFILL, osdpb.MsgType_MSG_PG_STRAY:
		o.onReaders(m, func() { o.serveRecovery(m) })

	case osdpb.MsgType_MSG_PG_SCRUB_MAP:
		o.wg.Go(func() { o.serveScrubMap(m) })

	case osdpb.MsgType_MSG_PG_PUSH:
		o.servePush(m)

	case osdpb.MsgType_MSG_BUCKET_FENCE:
		o.serveFence(m)

	case osdpb.MsgType_MSG_PART_HOLDS:
		o.servePartHolds(m)

	case osdpb.MsgType_MSG_GET_MAP, osdpb.MsgType_MSG_LIST_OBJECTS, osdpb.MsgType_MSG_HEAD_OBJECT, osdpb.MsgType_MSG_DELETE_OBJECT,
		osdpb.MsgType_MSG_DELETE_OBJECT_IF, osdpb.MsgType_MSG_HEAD_BUCKET:
		o.dispatchClient(m, true)

	case osdpb.MsgType_MSG_GET_MAP_REPLY, osdpb.MsgType_MSG_LIST_OBJECTS_REPLY, osdpb.MsgType_MSG_HEAD_OBJECT_REPLY, osdpb.MsgType_MSG_HEAD_BUCKET_REPLY,
		osdpb.MsgType_MSG_DELETE_OBJECT_REPLY, osdpb.MsgType_MSG_DELETE_OBJECT_IF_REPLY, osdpb.MsgType_MSG_PG_QUERY_REPLY,
		osdpb.MsgType_MSG_PG_LOG_PULL_REPLY, osdpb.MsgType_MSG_PG_BACKFILL_REPLY, osdpb.MsgType_MSG_PG_STRAY_REPLY,
		osdpb.MsgType_MSG_PG_SCRUB_MAP_REPLY, osdpb.MsgType_MSG_PG_PUSH_REPLY, osdpb.MsgType_MSG_BUCKET_FENCE_REPLY,
		osdpb.MsgType_MSG_PART_HOLDS_REPLY:
		o.calls.Deliver(m, false) // released when its caller gave up

	default:
		o.badRequest(m, errors.New("unknown cluster op"))
	}
}

// peerConn is the lossless session to OSD id's cluster address.
func (o *OSD) peerConn(id uint32) (*msgr.Conn, error) {
	addr, name, err := o.clusterPeer(id)
	if err != nil {
		return nil, err
	}
	return o.clu.Connect(o.ctx, addr, name)
}

// heartbeatConn is the lossy side session to OSD id's cluster address that
// carries heartbeats only, so that they never wait behind the lossless
// session's replays, replies and recovery (msgr.Messenger.ConnectPolicy),
// as Ceph's heartbeat messengers. One that faulted is gone; this makes a
// new one. A peer that refuses side sessions (a build without them) gets
// its heartbeats on the lossless session, as before side sessions.
func (o *OSD) heartbeatConn(id uint32) (*msgr.Conn, error) {
	o.peerMu.Lock()
	lossless := o.noSide[id] || !o.sideSessions
	o.peerMu.Unlock()
	if lossless {
		return o.peerConn(id)
	}
	addr, name, err := o.clusterPeer(id)
	if err != nil {
		return nil, err
	}
	return o.clu.ConnectPolicy(o.ctx, addr, name, msgr.LossyClient)
}

// withoutSideSessions, when set (tests), makes each OSD it returns true
// for start as a build without heartbeat side sessions: it refuses its
// peers' and sends its heartbeats on the lossless session.
var withoutSideSessions testHook[func(osd uint32) bool]

func takesSideSessions(id uint32) bool {
	f := withoutSideSessions.Load()
	return f == nil || !f(id)
}

// sideRefused notes that OSD id refused a heartbeat side session: the
// only refusal at the session step is of the policy, by a peer without
// msgr.Options.AcceptLossySide, which refuses every one. Redialing it at
// each beat would cost a handshake and lose the beat.
func (o *OSD) sideRefused(id uint32, err *msgr.RefusedError) {
	o.peerMu.Lock()
	was := o.noSide[id]
	o.noSide[id] = true
	o.peerMu.Unlock()
	if !was {
		o.log.Warn("peer refuses heartbeat side sessions (a build without them?): its heartbeats go on the cluster session, behind its backlog", "peer", id, "reason", err.Reason)
	}
}

// sideAgain forgets that OSD id refused side sessions, once the session
// with that incarnation of it is gone.
func (o *OSD) sideAgain(id uint32) {
	o.peerMu.Lock()
	delete(o.noSide, id)
	o.peerMu.Unlock()
}

// clusterPeer is OSD id's cluster address and entity name.
func (o *OSD) clusterPeer(id uint32) (string, msgr.EntityName, error) {
	addr, ok := o.Map().ClusterAddr(id)
	if !ok {
		return "", "", fmt.Errorf("osd.%d is not in the map", id)
	}
	return addr, msgr.EntityName(ops.OSDName(id)), nil
}

// call sends req to OSD id with a tid of its own in the envelope, and
// decodes the reply that echoes the tid into rep; with data non-nil, the
// reply's message is handed to it (it must Release it) instead of being
// released. When ctx ends first, req is withdrawn if no link had it yet.
func (o *OSD) call(ctx context.Context, id uint32, t osdpb.MsgType, req proto.Message, rep proto.Message, data func(*msgr.Message)) error {
	return o.callWith(ctx, id, t, req, nil, rep, data)
}

// callWith is call with payload as the request's data segment.
func (o *OSD) callWith(ctx context.Context, id uint32, t osdpb.MsgType, req proto.Message, payload []byte, rep proto.Message, data func(*msgr.Message)) error {
	c, err := o.peerConn(id)
	if err != nil {
		return err
	}
	tid, call := o.calls.Add(c)
	defer o.calls.End(tid)
	m, err := msgr.NewProtoMessage(uint16(t), req, payload)
	if err != nil {
		return err
	}
	m.SetTid(tid)
	tk, err := c.SendTicket(ctx, m)
	if err != nil {
		m.Release()
		return fmt.Errorf("osd.%d: %w", id, err)
	}
	select {
	case r, ok := <-call.Reply:
		if !ok {
			return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d: no reply to %v: the session was lost, or osd.%d is shutting down", id, t, o.id)
		}
		err := r.DecodeFront(rep)
		if err != nil || data == nil {
			r.Release()
		} else {
			data(r)
		}
		return err
	case <-ctx.Done():
		// A request still queued behind a link that is down is taken
		// back: the peer would do work nobody waits for, and everything
		// sent after it would wait behind it.
		c.Withdraw(tk)
		return fmt.Errorf("osd.%d: no reply to %v: %w", id, t, ctx.Err())
	}
}

// ---------------------------------------------------------------------------
// Heartbeats and peer liveness.

type peerState struct {
	lastSeen time.Time
	down     bool
	fullness osdpb.Fullness // as its last heartbeat reply said
	// leaseUntil is when (mono) the read lease its replies gave us runs
	// out; grantedUntil when the last one we granted it does, and
	// leaseLen how long its pings say its leases run; epoch the newest
	// map it showed us (readlease.go).
	leaseUntil, grantedUntil, leaseLen time.Duration
	epoch                              uint64
	// upFrom is its up_from in our map when we last looked: a newer one
	// is a new incarnation (checkPeer).
	upFrom uint64
}

// every runs f every d until the OSD closes.
func (o *OSD) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// heartbeatLoop pings at once, then every interval: a primary serves
// reads once its peers answered (read leases).
func (o *OSD) heartbeatLoop() {
	o.heartbeat()
	o.every(o.cfg.HeartbeatInterval, o.heartbeat)
}

func (o *OSD) heartbeat() {
	now := time.Now()
	if last := o.lastBeat.Swap(now.UnixNano()); last != 0 {
		if late := now.Sub(time.Unix(0, last)) - o.cfg.HeartbeatInterval; late > o.cfg.HeartbeatGrace/2 {
			o.stalled(now, late)
		}
	}
	o.ping(true)
}

// stalled is a heartbeat that ran late by late: this process was stopped
// (SIGSTOP, a VM paused, swapping, a starved CPU), not its peers, whose
// heartbeats went unread meanwhile. Each peer not already down gets a new
// grace from now, as Ceph's heartbeat_map keeps an OSD whose own threads
// stalled from reporting its peers: else it woke to call every peer down
// and report them all to the mon. Its peers may have had it marked down
// meanwhile; it then boots again as on any such map.
func (o *OSD) stalled(now time.Time, late time.Duration) {
	o.log.Warn("this OSD was stalled: its heartbeat ran late (a SIGSTOP, a paused VM, swapping or a starved CPU); its peers' silence was its own, so each gets a new grace",
		"late", late.Round(time.Millisecond), "grace", o.cfg.HeartbeatGrace)
	o.stalls.Add(1)
	o.peerMu.Lock()
	for _, ps := range o.peers {
		if !ps.down {
			ps.lastSeen = now
		}
	}
	o.peerMu.Unlock()
}

// ping sends every peer a heartbeat; check: and looks at each for its
// silence (checkPeer), which the round a new map starts (adoptMap) does
// not: a peer that just booted has not had the time to answer.
func (o *OSD) ping(check bool) {
	mp := o.Map()
	front, _ := proto.Marshal(&osdpb.Heartbeat{From: o.id, Epoch: mp.Epoch(), SentUnixNano: o.pingStamp(), LeaseNanos: int64(o.lease())})
	for info := range mp.OSDs() {
		if info.Id == o.id {
			continue
		}
		// The lossless session is kept dialed all the same: its refused
		// dials fail a dead peer at once (onDialError).
		o.peerConn(info.Id)
		if c, err := o.heartbeatConn(info.Id); err == nil {
			c.TrySend(msgr.NewMessage(uint16(osdpb.MsgType_MSG_HEARTBEAT), front, nil))
		}
		if check {
			o.checkPeer(info.Id)
		}
	}
}

// sawPeer records a sign of life from OSD id; one that was down and is
// back gets a sync of every PG we share, and the mon hears it answers.
func (o *OSD) sawPeer(id uint32) {
	o.peerMu.Lock()
	ps := o.peers[id]
	if ps == nil {
		ps = o.newPeerState(time.Now())
		o.peers[id] = ps
	}
	ps.lastSeen = time.Now()
	back := ps.down
	ps.down = false
	o.peerMu.Unlock()
	if back {
		o.log.Info("peer is up again", "peer", id)
		o.reportFailure(id, 0, false, true)
		o.wg.Go(func() { o.peerWith(id, "heartbeat") })
	}
}

// checkPeer marks OSD id down when it has been silent for the grace time,
// and while it stays silent, reports it to the mon on every check (the mon
// wants reports from several OSDs, each silent for its own grace).
func (o *OSD) checkPeer(id uint32) {
	info, inMap := o.Map().OSD(id)
	o.peerMu.Lock()
	ps := o.peers[id]
	if ps == nil {
		// Its grace starts when we first look for it: a peer that joined
		// the map a minute after we started is not a minute silent.
		ps = o.newPeerState(time.Now())
		o.peers[id] = ps
	}
	if inMap && info.UpFrom > ps.upFrom {
		// A new incarnation (it booted since we last looked) gets a
		// grace of its own: reporting it for the silence of the last
		// one, the moment it boots, would have it marked down again and
		// again (and held down, max-markdown-count).
		if ps.upFrom != 0 && ps.down {
			ps.lastSeen, ps.down = time.Now(), false
		}
		ps.upFrom = info.UpFrom
	}
	silent := time.Since(ps.lastSeen)
	if !ps.down && silent > o.cfg.HeartbeatGrace {
		ps.down = true
		o.log.Warn("peer is down: no heartbeat", "peer", id, "silent", silent.Round(time.Millisecond))
	}
	down := ps.down
	o.peerMu.Unlock()
	if down && inMap && info.Up {
		o.reportFailure(id, silent, false, false)
	}
}

// markPeerDown marks OSD id down here at once (its connections are
// refused), until a heartbeat shows it again.
func (o *OSD) markPeerDown(id uint32, why string) {
	o.peerMu.Lock()
	ps := o.peers[id]
	if ps == nil {
		ps = o.newPeerState(o.started)
		o.peers[id] = ps
	}
	was := ps.down
	ps.down = true
	o.peerMu.Unlock()
	if !was {
		o.log.Warn("peer is down", "peer", id, "why", why)
	}
}

// peerDown reports whether OSD id missed its heartbeats.
func (o *OSD) peerDown(id uint32) bool {
	o.peerMu.Lock()
	defer o.peerMu.Unlock()
	ps := o.peers[id]
	return ps != nil && ps.down
}

// peerAll syncs every peer: each replica that missed writes (at start:
// before we went down; after a map change: a new member) recovers.
func (o *OSD) peerAll(why string) {
	for info := range o.Map().OSDs() {
		if info.Id != o.id {
			o.peerWith(info.Id, why)
		}
	}
}

// peerWith sends OSD id a sync RepOp ("be at least at version v") for every
// PG we are primary of and it serves, so it recovers what it missed. The
// replies are not waited for.
func (o *OSD) peerWith(id uint32, why string) {
	mp := o.Map()
	n := 0
	sync := func(pool, pg uint32) {
		last, _, err := o.st.PGInfo(o.ctx, storePG(pool, pg))
		if err == nil && last.GetSeq() > 0 && o.sendSync(mp.Epoch(), id, pool, pg, last) {
			n++
		}
	}
	meta := metaPool(mp)
	if set := mp.ActingSet(meta, placement.MetaPG); len(set) > 0 && set[0] == o.id {
		sync(meta, placement.MetaPG)
	}
	for p := range mp.Pools() {
		for pg, role := range mp.PGsOf(p.Id, o.id) {
			if role.IsPrimary() {
				if mp.IsMember(p.Id, pg, id) {
					sync(p.Id, pg)
				}
			}
		}
	}
	o.log.Debug("peering", "peer", id, "why", why, "pgs", n)
}

// sendSync sends replica id a sync RepOp of PG (pool, pg): "be at least at
// last". It recovers what it lacks, then answers with where its log ends.
func (o *OSD) sendSync(epoch uint64, id, pool, pg uint32, last *osdpb.Version) bool {
	return o.sendSyncOp(&osdpb.RepOp{Epoch: epoch, Pool: pool, Pg: pg, Entry: &osdpb.LogEntry{Kind: osdpb.OpKind_OP_NONE, Version: last}}, id)
}

// sendSyncOp sends replica id the sync RepOp r.
func (o *OSD) sendSyncOp(r *osdpb.RepOp, id uint32) bool {
	front, _ := proto.Marshal(r)
	c, err := o.peerConn(id)
	return err == nil && c.TrySend(msgr.NewMessage(uint16(osdpb.MsgType_MSG_REP_OP), front, nil)) == nil
}

// ---------------------------------------------------------------------------
// Maps.

// learnEpoch fetches the map from OSD from when it has a newer epoch.
func (o *OSD) learnEpoch(epoch uint64, from uint32) {
	if epoch <= o.Map().Epoch() {
		return
	}
	// One fetch at a time: every op of a newer peer says so, and a burst
	// of them must not become a burst of fetches.
	if !o.fetchingMap.CompareAndSwap(false, true) {
		return
	}
	o.wg.Go(func() {
		defer o.fetchingMap.Store(false)
		ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
		defer cancel()
		var rep osdpb.GetMapReply
		err := o.call(ctx, from, osdpb.MsgType_MSG_GET_MAP, &osdpb.GetMap{HaveEpoch: o.Map().Epoch()}, &rep, nil)
		if err == nil {
			err = o.adoptMap(rep.Map)
		}
		if err != nil {
			o.log.Warn("fetching a newer map", "from", from, "epoch", epoch, "err", err)
		}
	})
}

// ReloadMap reads the map file (Config.MapPath) again and adopts it if it
// is newer: `osprey osd` does this on SIGHUP, after an operator edited the
// file.
func (o *OSD) ReloadMap() (*placement.Map, error) {
	if o.cfg.MapPath == "" {
		return o.Map(), errors.New("osd: no map file to reload")
	}
	m, err := placement.Load(o.cfg.MapPath)
	if err == nil {
		err = o.adoptMap(m.Proto())
	}
	return o.Map(), err
}

// refreshMap reads MapPath again, if set, and adopts a newer map.
func (o *OSD) refreshMap() *placement.Map {
	if o.cfg.MapPath != "" {
		if m, err := placement.Load(o.cfg.MapPath); err == nil {
			o.adoptMap(m.Proto())
		} else {
			o.log.Warn("reloading the map", "path", o.cfg.MapPath, "err", err)
		}
	}
	return o.Map()
}

// adoptMap installs pb if it is newer and of our cluster, fills the map
// history up to it, brings every PG's machine to it, then syncs every
// peer, since primaries may have moved.
func (o *OSD) adoptMap(pb *osdpb.ClusterMap) error {
	m, err := placement.FromProto(pb)
	if err != nil {
		return err
	}
	if cur := o.Map(); m.FSID() != cur.FSID() {
		return fmt.Errorf("map of cluster %s, we are %s", m.FSID(), cur.FSID())
	} else if m.Epoch() > cur.Epoch()+1 {
		// Peering replays every epoch: get the ones we skipped first.
		ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
		o.fillHistory(ctx, cur.Epoch()+1, m.Epoch(), m)
		cancel()
	}
	o.mapMu.Lock()
	cur := o.Map()
	if m.Epoch() <= cur.Epoch() {
		o.mapMu.Unlock()
		return nil
	}
	o.remember(m)
	// PGs whose primary we become, or whose members change, wait before
	// anyone can send us their ops under the new map, until their machine
	// has peered.
	o.markPeering(cur, m)
	o.mapv.Store(m)
	o.mapMu.Unlock()
	o.log.Info("new map", "epoch", m.Epoch(), "was", cur.Epoch())
	// Writes waiting for an OSD the map now marks down fail at once (the
	// client's retry goes to the new acting set) instead of waiting out
	// RepTimeout: a hung OSD's connections stay open, so nothing else
	// tells them.
	for info := range cur.OSDs() {
		if now, ok := m.OSD(info.Id); info.Up && (!ok || !now.Up) {
			o.failPeer(info.Id, "is marked down in the map")
		}
	}
	// A ping round at once: our peers see the new map in it, and their
	// replies show us theirs, which ends a new primary's wait for them
	// (readlease.go) a round trip after they have it, not a beat later.
	o.ping(false)
	o.advanceAll(m)
	o.wg.Go(func() { o.peerAll("new map") })
	return nil
}

// markPeering marks the PGs we lead in m whose acting set differs from
// cur's (all of them when cur is nil) as peering; their machine clears
// the mark once they may serve.
func (o *OSD) markPeering(cur, m *placement.Map) {
	mark := func(pool, pgn uint32) {
		if p, err := o.pgOf(storePG(pool, pgn)); err == nil {
			p.peeringUntil.Store(m.Epoch()) // first: publish keeps the mark while its machine is behind it
			p.peering.Store(true)
		}
	}
	var a, b []uint32
	for pool := range m.Pools() {
		for pgn, role := range m.PGsOf(pool.Id, o.id) {
			if !role.IsPrimary() {
				continue
			}
			if cur != nil {
				a, b = cur.AppendActingSet(a[:0], pool.Id, pgn), m.AppendActingSet(b[:0], pool.Id, pgn)
				if slices.Equal(a, b) && slices.Equal(cur.UpSet(pool.Id, pgn), m.UpSet(pool.Id, pgn)) {
					continue
				}
			}
			mark(pool.Id, pgn)
		}
	}
	if meta := metaPool(m); m.IsPrimary(meta, placement.MetaPG, o.id) &&
		(cur == nil || !slices.Equal(cur.ActingSet(metaPool(cur), placement.MetaPG), m.ActingSet(meta, placement.MetaPG))) {
		mark(meta, placement.MetaPG)
	}
}

// AdoptMap installs m if it is newer than the OSD's map and of the same
// cluster (tools and tests; OSDs also learn maps from each other and from
// their map file).
func (o *OSD) AdoptMap(m *placement.Map) error { return o.adoptMap(m.Proto()) }

// ---------------------------------------------------------------------------
// Recovery: a replica that is behind pulls from the primary.

// serveRecovery answers a peer's PG query, log pull or backfill step.
func (o *OSD) serveRecovery(m *msgr.Message) {
	defer m.Release()
	c, to := m.Conn(), replyTo(m)
	t := osdpb.MsgType(m.Type)
	hdr := func(err error) *osdpb.ReplyHeader { return o.header(nil, err) }
	switch t {
	case osdpb.MsgType_MSG_PG_QUERY:
		var q osdpb.PGQuery
		if err := m.DecodeFront(&q); err != nil {
			return
		}
		sid, from, err := o.fromPeerOSD(c, q.Pool, q.Pg, "pg query")
		if err != nil {
			o.send(to, ops.ReplyType(t), &osdpb.PGQueryReply{Header: hdr(err)}, nil)
			return
		}
		o.enqueue(o.shardOf(sid), func() {
			info, err := o.answerQuery(&q, sid, from)
			o.send(to, ops.ReplyType(t), &osdpb.PGQueryReply{Header: hdr(err), Info: info}, nil)
		})

	case osdpb.MsgType_MSG_PG_LOG_PULL:
		var q osdpb.PGLogPull
		if err := m.DecodeFront(&q); err != nil {
			return
		}
		max := int(q.MaxEntries)
		if max <= 0 || max > 1000 {
			max = 1000
		}
		var entries []*osdpb.LogEntry
		var tooOld, diverged bool
		var floor *osdpb.Version
		var rd copyRead
		sid, err := o.peerPG(q.Pool, q.Pg)
		if err == nil {
			rd, err = o.readCopy(sid)
		}
		if err == nil {
			floor, diverged, err = o.st.Diverged(o.ctx, sid, q.After)
		}
		if err == nil {
			after := q.After
			if diverged {
				after = floor
			}
			entries, tooOld, err = o.st.LogAfter(o.ctx, sid, after, max)
		}
		if err == nil && tooOld {
			// floor is where our log starts: a backfill copies the log
			// from there (backfillLog).
			_, floor, err = o.st.PGInfo(o.ctx, sid)
		}
		if err == nil {
			err = rd.done()
		}
		if err != nil {
			entries, tooOld, diverged, floor = nil, false, false, nil
		}
		o.send(to, ops.ReplyType(t), &osdpb.PGLogPullReply{Header: hdr(err),
			Entries: entries, TooOld: tooOld, Complete: len(entries) < max, Diverged: diverged, Floor: floor}, nil)

	case osdpb.MsgType_MSG_PG_BACKFILL:
		var q osdpb.PGBackfill
		if err := m.DecodeFront(&q); err != nil {
			return
		}
		rep, body, err := o.backfillStep(c, &q)
		rep.Header = hdr(err)
		o.send(to, ops.ReplyType(t), rep, body)

	case osdpb.MsgType_MSG_PG_STRAY:
		var q osdpb.PGStray
		if err := m.DecodeFront(&q); err != nil {
			return
		}
		sid, from, err := o.fromPeerOSD(c, q.Pool, q.Pg, "pg stray")
		if err != nil {
			o.send(to, ops.ReplyType(t), &osdpb.PGStrayReply{Header: hdr(err)}, nil)
			return
		}
		o.enqueue(o.shardOf(sid), func() {
			remove, err := o.answerStray(&q, sid, from)
			if remove {
				o.strayAllowed.Add(1)
			} else {
				o.strayKept.Add(1)
			}
			o.send(to, ops.ReplyType(t), &osdpb.PGStrayReply{Header: hdr(err), Remove: remove}, nil)
		})
	}
}

// fromPeerOSD checks a PG request that only an OSD may make: the PG's
// store id (peerPG) and the asking OSD's id.
func (o *OSD) fromPeerOSD(c *msgr.Conn, pool, pg uint32, what string) (sid, from uint32, err error) {
	sid, err = o.peerPG(pool, pg)
	from, ok := osdID(c)
	if err == nil && !ok {
		err = ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s from %s, not an OSD", what, c.Peer())
	}
	return sid, from, err
}

// backfillStep finds the object (or bucket record) a backfill asks for:
// the one at the position with exact, else the next after it.
func (o *OSD) backfillStep(c *msgr.Conn, q *osdpb.PGBackfill) (*osdpb.PGBackfillReply, *wire.Buffer, error) {
	sid, err := o.peerPG(q.Pool, q.Pg)
	var rd copyRead
	if err == nil {
		rd, err = o.readCopy(sid)
	}
	if err != nil {
		return &osdpb.PGBackfillReply{}, nil, err
	}
	rep, buf, err := o.backfillRead(c, q, sid)
	if err == nil {
		err = rd.done()
	}
	if err != nil {
		if buf != nil {
			buf.Release()
		}
		return &osdpb.PGBackfillReply{}, nil, err
	}
	return rep, buf, nil
}

// backfillRead reads for backfillStep.
func (o *OSD) backfillRead(c *msgr.Conn, q *osdpb.PGBackfill, sid uint32) (*osdpb.PGBackfillReply, *wire.Buffer, error) {
	rep := &osdpb.PGBackfillReply{}
	last, _, err := o.st.PGInfo(o.ctx, sid)
	if err != nil {
		return rep, nil, err
	}
	rep.Last = last
	if q.Buckets {
		if q.Exact {
			info, err := o.st.HeadBucket(o.ctx, q.AfterBucket)
			if err != nil {
				rep.Entry = &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE_BUCKET, Bucket: q.AfterBucket}
				return rep, nil, nil
			}
			rep.Entry = bucketEntry(info)
			return rep, nil, nil
		}
		for b, err := range o.st.Buckets(o.ctx) {
			if err != nil {
				return rep, nil, err
			}
			if b.Name > q.AfterBucket {
				rep.Entry = bucketEntry(b)
				return rep, nil, nil
			}
		}
		rep.Done = true
		return rep, nil, nil
	}
	bucket, key := q.AfterBucket, q.AfterKey
	if !q.Exact {
		found := false
		for e, err := range o.st.PGObjects(o.ctx, sid, q.AfterBucket, q.AfterKey) {
			if err != nil {
				return rep, nil, err
			}
			bucket, key, found = e.Bucket, e.Key, true
			break
		}
		if !found {
			rep.Done = true
			return rep, nil, nil
		}
	}
	meta, version, err := o.st.HeadVersion(o.ctx, bucket, key)
	if err != nil {
		rep.Entry = &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: bucket, Key: key}
		return rep, nil, nil
	}
	read, buf, err := o.readInto(c, bucket, key, meta, 0, -1)
	if err != nil {
		if errors.Is(opError(err), ops.ErrNoSuchKey) {
			rep.Entry = &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: bucket, Key: key}
			return rep, nil, nil
		}
		return rep, nil, err
	}
	if !proto.Equal(read, meta) {
		version = nil // rewritten between the two reads: its version is unknown
	}
	meta = read
	// The version goes along, so that the copy installed from it is as
	// new as ours to a later scrub's compare (scrubcmp.go).
	rep.Entry = &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: bucket, Key: key, Meta: meta, Version: version}
	return rep, buf, nil
}

func bucketEntry(b *osdpb.BucketInfo) *osdpb.LogEntry {
	return &osdpb.LogEntry{Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: b.Name,
		Meta: &osdpb.ObjectMeta{MtimeUnixNano: b.CreatedUnixNano}}
}

// startRecovery marks p recovering and pulls what it lacks from OSD from
// (its primary) in the background; the queued RepOps run when it is done.
// Runs on p's shard.
func (o *OSD) startRecovery(p *pgState, from uint32) {
	if p.recovering {
		return
	}
	if wait := time.Until(p.retryAt); wait > 0 {
		// A recovery failed (a full disk, an unreachable source): the
		// next waits out its backoff, then resumes what the machine wants.
		// (A RepOp that would start one is refused meanwhile: applyRepOp.)
		if !p.retryPending {
			p.retryPending = true
			time.AfterFunc(wait, func() {
				o.enqueue(o.shardOf(p.sid), func() {
					p.retryPending = false
					o.resumePull(p)
				})
			})
		}
		return
	}
	p.recovering = true
	have := p.last
	o.wg.Go(func() {
		var last *osdpb.Version
		var err error
		if hook := recoveryStarting.Load(); hook != nil {
			err = hook(o.id, p.sid)
		}
		if err == nil {
			last, err = o.recover(p, from, have)
		}
		if err == nil {
			// The copied log (CopyLog) can outgrow LogKeep, as a
			// primary's log between its trims does.
			if err := o.st.TrimLog(o.ctx, p.sid); err != nil {
				o.log.Warn("trim pg log after recovery", "pg", placement.PGIDOf(p.sid), "err", err)
			} else {
				o.noteTrim(p.sid)
			}
		}
		if o.ctx.Err() != nil {
			return // closing
		}
		o.enqueue(o.shardOf(p.sid), func() { o.endRecovery(p, from, last, err) })
	})
}

// recoveryStarting, when set (tests, through export_test.go), runs on the
// recovery goroutine of OSD osd's store PG sid before it copies anything:
// a test holds a catch-up there, or fails it with the hook's error, as a
// source that cannot serve it yet would.
var recoveryStarting testHook[func(osd, sid uint32) error]

// recoverySlot waits for one of the RecoveryMaxActive recovery slots,
// except for a new primary that must catch up before it serves: throttling
// it would stall its PG's client I/O, which the throttle is there to
// protect.
func (o *OSD) recoverySlot(p *pgState) (release func(), err error) {
	if p.peering.Load() {
		return func() {}, nil
	}
	select {
	case o.recoverySlots <- struct{}{}:
		return func() { <-o.recoverySlots }, nil
	case <-o.ctx.Done():
		return nil, o.ctx.Err()
	}
}

// recovered counts n bytes copied for p's recovery, and waits as
// RecoveryBytesPerSec asks, while p's writes go on: in a backfill's walk,
// or a replica's log catch-up copied as one (catchUpWalk). A plain log
// catch-up holds the PG's writes, and a new primary's catch-up all of its
// I/O, so neither waits here: slowing them would stall the client I/O the
// throttle is there to protect. A replica's plain catch-up took its
// tokens before it began (paceCatchUp).
func (o *OSD) recovered(ctx context.Context, p *pgState, n int) error {
	o.recoveredBytes.Add(uint64(n))
	if o.recoveryRate == nil || p.peering.Load() || p.bf.Load() == nil {
		return nil
	}
	for burst := o.recoveryRate.Burst(); n > 0; n -= burst {
		step := min(n, burst)
		if err := o.recoveryRate.WaitN(ctx, step); err != nil {
			return err
		}
		o.recoveryPaced.Add(uint64(step))
	}
	return nil
}

// paceCatchUp decides how replica PG p copies the objects that log page
// rep names under RecoveryBytesPerSec: false, as a plain catch-up (its
// writes held), when the limiter grants their bytes at once, which it
// takes; true, as a walk that waits for the limiter while the writes go
// on (catchUpWalk), when it does not, or the page is not the whole gap.
// Exempt, as in recovered: no cap, a new primary, the meta PG (bucket
// records, tiny, and no walk keeps its writes going), a diverged log.
func (o *OSD) paceCatchUp(p *pgState, rep *osdpb.PGLogPullReply) bool {
	if o.recoveryRate == nil || p.peering.Load() || p.pg == placement.MetaPG || rep.Diverged {
		return false
	}
	if !rep.Complete {
		return true
	}
	n := catchUpBytes(rep.Entries)
	if n == 0 {
		return false
	}
	// AllowN is false past the burst, whatever the tokens: a walk then.
	if !o.recoveryRate.AllowN(time.Now(), n) {
		return true
	}
	o.recoveryPaced.Add(uint64(n))
	return false
}

// catchUpBytes estimates the bytes a log catch-up of entries copies: the
// size each named object had at its newest put among them (it is copied
// as it is now, which may differ a little).
func catchUpBytes(entries []*osdpb.LogEntry) int {
	sizes := map[[2]string]uint64{}
	for _, e := range entries {
		k := [2]string{e.Bucket, e.Key}
		switch e.Kind {
		case osdpb.OpKind_OP_PUT:
			sizes[k] = e.GetMeta().GetSize()
		case osdpb.OpKind_OP_DELETE:
			sizes[k] = 0
		}
	}
	var n uint64
	for _, s := range sizes {
		n += s
	}
	return int(min(n, math.MaxInt32))
}

// endRecovery, on p's shard, applies the RepOps that waited and tells the
// PG's machine: a new primary's pull of the authoritative log is done (or
// failed, and the machine looks elsewhere or waits, down).
func (o *OSD) endRecovery(p *pgState, from uint32, last *osdpb.Version, err error) {
	p.recovering = false
	queued := p.queued
	p.queued = nil
	var pull *pg.Recover
	if p.m != nil {
		if r, ok := p.m.Recovering(); ok && r.From == pg.OSDID(from) {
			pull = &r
		}
	}
	if err != nil {
		o.recoveryFailed(p, fmt.Errorf("from osd.%d: %w", from, err))
		for _, q := range queued {
			o.ackRepOp(q.m, q.op, nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "recovering: %v", err))
		}
		if pull != nil {
			p.m.Step(pg.Unreachable{From: pull.From, Epoch: pull.Epoch})
		}
		o.resumePull(p)
		return
	}
	o.setLast(p, last)
	p.recoveryFailures, p.retryAt = 0, time.Time{}
	o.log.Info("pg recovered", "pg", pgName(p.pool, p.pg), "from", from, "version", last)
	if pull != nil {
		p.m.Step(pg.Recovered{From: pull.From, Last: pgVersion(last)})
	}
	for i, q := range queued {
		if p.recovering {
			p.queued = append(p.queued, queued[i:]...)
			break
		}
		o.applyRepOp(p, q.m, q.op, q.from) // the primary may have changed since we pulled from `from`
	}
	o.resumePull(p)
}

// resumePull starts the machine's pull when another recovery held the PG
// when the machine asked for it, and carries out what the machine wants
// now. On p's shard.
func (o *OSD) resumePull(p *pgState) {
	if p.m == nil {
		return
	}
	if r, ok := p.m.Recovering(); ok && !p.recovering {
		o.startRecovery(p, uint32(r.From))
	}
	o.drive(p)
}

// recover brings store PG p up to date with OSD from: the objects named by
// the log entries after our version, or every object when the log no longer
// reaches back that far (backfill). Each object is copied in its current
// state, so replaying an older RepOp afterwards is harmless: the version
// check skips it.
//
// A backfill holds one of the RecoveryMaxActive slots while it copies,
// taken once its RepOps flow again (backfill.go), so that a PG waiting for
// a slot does not hold its writes.
func (o *OSD) recover(p *pgState, from uint32, have *osdpb.Version) (*osdpb.Version, error) {
	ctx, cancel := context.WithTimeout(o.ctx, recoveryTimeout)
	defer cancel()
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	slot := func() (err error) {
		if release == nil {
			release, err = o.recoverySlot(p)
		}
		return err
	}
	incomplete, err := o.st.PGBackfilling(ctx, p.sid)
	if err != nil {
		return nil, err
	}
	if (have.GetEpoch() == 0 && have.GetSeq() == 0) || incomplete {
		// A copy with nothing (an OSD that just came into the acting
		// set) backfills, as in Ceph, even while the primary's log still
		// reaches back to the start: the walk lets the PG's writes go on,
		// a log catch-up of every object would hold them all along. A copy
		// whose backfill was cut short (a restart) lacks objects its
		// version does not show: it walks again.
		return o.backfill(ctx, p, from, slot, nil)
	}
	for {
		rep, err := o.pullLog(ctx, p, from, have)
		if err != nil {
			return nil, err
		}
		if rep.TooOld {
			return o.backfill(ctx, p, from, slot, nil)
		}
		if o.paceCatchUp(p, rep) {
			return o.backfill(ctx, p, from, slot, have)
		}
		// No slot for a log catch-up: it holds the PG's writes (see
		// recovered).
		seen := map[[2]string]bool{}
		entries := rep.Entries
		if rep.Diverged {
			// Our entries after the floor were never acknowledged (an old
			// primary's, which no member that serves has): their objects
			// go back to what the source has, and CopyLog below drops
			// them from our log and request index.
			ours, _, err := o.st.LogAfter(ctx, p.sid, rep.Floor, 0)
			if err != nil {
				return nil, err
			}
			o.log.Info("recovery: rolling back log entries the source does not have", "pg", placement.PGIDOf(p.sid),
				"from", from, "entries", len(ours), "after", rep.Floor)
			entries = append(ours, entries...)
			have = rep.Floor
		}
		if len(entries) == 0 {
			return have, nil
		}
		for _, e := range entries {
			k := [2]string{e.Bucket, e.Key}
			if e.Kind == osdpb.OpKind_OP_NONE || seen[k] {
				continue
			}
			seen[k] = true
			if err := o.copyOne(ctx, p, from, e.Bucket, e.Key, e.Kind == osdpb.OpKind_OP_CREATE_BUCKET || e.Kind == osdpb.OpKind_OP_DELETE_BUCKET); err != nil {
				return nil, err
			}
		}
		// The entries themselves, with their request ids: were we to lead
		// the PG, a resend of one of their ops is answered from our log.
		if err := o.st.CopyLog(ctx, p.sid, store.LogCopy{After: have, Entries: rep.Entries}); err != nil {
			return nil, err
		}
		if len(rep.Entries) > 0 {
			have = rep.Entries[len(rep.Entries)-1].Version
		}
		if rep.Complete {
			return have, nil
		}
	}
}

// pullLog asks OSD from for p's log entries after `after`, 500 at a time.
func (o *OSD) pullLog(ctx context.Context, p *pgState, from uint32, after *osdpb.Version) (*osdpb.PGLogPullReply, error) {
	var rep osdpb.PGLogPullReply
	err := o.call(ctx, from, osdpb.MsgType_MSG_PG_LOG_PULL, &osdpb.PGLogPull{Epoch: o.Map().Epoch(), Pool: p.pool, Pg: p.pg, After: after, MaxEntries: 500}, &rep, nil)
	if err == nil {
		err = ops.FromReply(rep.Header)
	}
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

// copyOne copies one object (or bucket record) from OSD from as it is now.
func (o *OSD) copyOne(ctx context.Context, p *pgState, from uint32, bucket, key string, isBucket bool) error {
	e, body, err := o.fetch(ctx, p, from, &osdpb.PGBackfill{AfterBucket: bucket, AfterKey: key, Buckets: isBucket, Exact: true})
	if err != nil {
		return err
	}
	defer body()
	return o.install(ctx, p, from, e.Entry, e.data)
}

type fetched struct {
	*osdpb.PGBackfillReply
	data []byte
}

// fetch runs one backfill step against OSD from; release frees the data.
func (o *OSD) fetch(ctx context.Context, p *pgState, from uint32, q *osdpb.PGBackfill) (fetched, func(), error) {
	q.Epoch, q.Pool, q.Pg = o.Map().Epoch(), p.pool, p.pg
	var rep osdpb.PGBackfillReply
	var msg *msgr.Message
	err := o.call(ctx, from, osdpb.MsgType_MSG_PG_BACKFILL, q, &rep, func(m *msgr.Message) { msg = m })
	release := func() {
		if msg != nil {
			msg.Release()
		}
	}
	if err == nil {
		err = ops.FromReply(rep.Header)
	}
	if err != nil {
		release()
		return fetched{}, func() {}, err
	}
	f := fetched{PGBackfillReply: &rep}
	if msg != nil {
		f.data = msg.Data
	}
	if err := o.recovered(ctx, p, len(f.data)); err != nil {
		release()
		return fetched{}, func() {}, err
	}
	return f, release, nil
}

// install applies one entry copied from OSD from to our store, outside the
// PG log. An object whose bucket record has not reached us yet (the meta
// PG recovers on its own, maybe later: an OSD that just came in has none)
// gets the record first, rather than failing the whole recovery until the
// meta PG happens to finish first. The record comes from the meta PG's
// primary, never from the object's source: a source back from being out
// may still hold a bucket deleted meanwhile, and its copy of the record
// would bring that bucket back here, outside the meta PG's log, for good.
// An object of a bucket the meta PG's primary no longer has goes, as the
// bucket's delete removes it wherever it lands.
func (o *OSD) install(ctx context.Context, p *pgState, from uint32, e *osdpb.LogEntry, data []byte) error {
	if e == nil {
		return nil
	}
	if e.Kind == osdpb.OpKind_OP_DELETE {
		return o.st.RemoveObject(ctx, p.sid, e.Bucket, e.Key)
	}
	if e.Kind == osdpb.OpKind_OP_DELETE_BUCKET {
		return o.dropBuckets(func() error { return o.st.InstallObject(ctx, p.sid, e, data) })
	}
	err := o.st.InstallObject(ctx, p.sid, e, data)
	if !errors.Is(err, store.ErrNoSuchBucket) || e.Key == "" {
		return err
	}
	// A delete of the bucket applied here after the answer must not be
	// undone by installing the record after it: the record goes in only
	// if no bucket was dropped since the question, else we ask again.
	for range 3 {
		drops := o.bucketDrops.Load()
		info, err := o.metaBucket(ctx, e.Bucket)
		if hook := bucketAnswered.Load(); hook != nil {
			hook(o.id, e.Bucket)
		}
		if errors.Is(opError(err), ops.ErrNoSuchBucket) {
			return o.st.RemoveObject(ctx, p.sid, e.Bucket, e.Key)
		}
		if err != nil {
			return fmt.Errorf("bucket %s of %s: %w", e.Bucket, e.Key, err)
		}
		if done, err := o.installWithRecord(ctx, p, e, data, info, drops); done || err != nil {
			return err
		}
	}
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "bucket %s of %s: buckets kept being deleted while osd.%d asked about it", e.Bucket, e.Key, o.id)
}

// installWithRecord installs bucket record info and then entry e of p,
// unless a bucket record was dropped here since bucketDrops was drops
// (done false).
func (o *OSD) installWithRecord(ctx context.Context, p *pgState, e *osdpb.LogEntry, data []byte, info *osdpb.BucketInfo, drops uint64) (done bool, err error) {
	o.bucketGate.RLock()
	defer o.bucketGate.RUnlock()
	if o.bucketDrops.Load() != drops {
		return false, nil
	}
	if err := o.st.InstallObject(ctx, placement.MetaPG, bucketEntry(info), nil); err != nil {
		return true, err
	}
	return true, o.st.InstallObject(ctx, p.sid, e, data)
}

// waitBackfillRoom waits until the data disk has room for replica PG p's
// backfill from OSD from (backfillRoom), checking every backfillRoomPoll;
// waited says whether it had to. It gives up (an error: the recovery is
// retried later) when from no longer leads the PG or we are no longer in
// its acting set, the map having moved the backfill elsewhere.
func (o *OSD) waitBackfillRoom(p *pgState, from uint32) (waited bool, err error) {
	for {
		err := o.backfillRoom()
		if err == nil {
			return waited, nil
		}
		mp := o.Map()
		if primary, ok := mp.Primary(p.pool, p.pg); !ok || primary != from || !mp.IsMember(p.pool, p.pg, o.id) {
			return waited, err
		}
		if !waited {
			waited = true
			o.log.Warn("backfill waits for room on the data disk; the pg's writes go on meanwhile (backfill_toofull)",
				"pg", placement.PGIDOf(p.sid), "from", from, "err", err)
		}
		select {
		case <-o.ctx.Done():
			return waited, o.ctx.Err()
		case <-time.After(backfillRoomPoll):
		}
	}
}

// backfillRoomPoll is how often a backfill waiting for room looks again
// (beacons update fullness about as often); recoveryTimeout bounds a
// recovery, from its start or from the room its backfill waited for.
const (
	backfillRoomPoll = time.Second
	recoveryTimeout  = 10 * time.Minute
)

// bucketAnswered, when set (tests, through export_test.go), runs on OSD
// osd's recovery once the meta PG's primary answered whether bucket, the
// bucket of an object it copies, exists: a test holds the install there.
var bucketAnswered testHook[func(osd uint32, bucket string)]

// backfill copies every object of the PG from OSD from and removes the
// local ones it no longer has. Writes to the PG go on meanwhile
// (backfill.go), except to the meta PG, whose records are few. slot takes
// a recovery slot.
//
// With catchUp set it is a catch-up walk instead: a replica's log
// catch-up from version catchUp paced by RecoveryBytesPerSec
// (paceCatchUp). Held for the limiter, a plain catch-up would hold the
// PG's writes as long; so it walks, as a backfill, only the objects the
// log after catchUp names (the others are as the source's are), in key
// order, with the backfill's handling of the writes meanwhile, and ends
// as one, with a copy of the source's log. It removes nothing else and,
// needing no room for a whole copy, does not wait for any.
func (o *OSD) backfill(ctx context.Context, p *pgState, from uint32, slot func() error, catchUp *osdpb.Version) (*osdpb.Version, error) {
	isMeta := p.pg == placement.MetaPG
	if catchUp != nil {
		o.log.Info("catching up pg as a walk, paced by the recovery throttle", "pg", pgName(p.pool, p.pg), "from", from, "version", catchUp)
	} else {
		o.log.Info("backfilling pg", "pg", pgName(p.pool, p.pg), "from", from)
	}
	var bf *backfillState
	if !isMeta {
		if err := o.st.SetPGBackfilling(ctx, p.sid); err != nil {
			return nil, err
		}
		bf = newBackfillState()
		defer p.bf.Store(nil) // also when startBackfill's task runs late
		if !o.startBackfill(ctx, p, bf) {
			return nil, cmp.Or(ctx.Err(), errors.New("osd: closing"))
		}
		if !p.peering.Load() && catchUp == nil {
			// A replica's whole copy needs room a log catch-up does not
			// (Ceph's backfill_toofull); the bucket records of the meta PG
			// are tiny. A new primary's copy is not held back: its PG
			// serves nothing until it has one (there is no pg_temp to keep
			// the old primary serving meanwhile); the store's floor still
			// holds. The wait comes after startBackfill, as the slot's
			// does: the PG's writes go on meanwhile, acked here unapplied
			// (the walk copies their objects), as a Ceph PG in
			// backfill_toofull goes on serving.
			waited, err := o.waitBackfillRoom(p, from)
			if err != nil {
				return nil, err
			}
			if waited {
				// A recovery's usual bound, from the moment there is room.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(o.ctx, recoveryTimeout)
				defer cancel()
			}
		}
	}
	if err := slot(); err != nil {
		return nil, err
	}
	local := map[[2]string]bool{} // what the walk did not copy goes; none in a catch-up walk
	if catchUp != nil {
		// Nothing to list.
	} else if isMeta {
		for b, err := range o.st.Buckets(ctx) {
			if err != nil {
				return nil, err
			}
			local[[2]string{b.Name, ""}] = true
		}
	} else {
		for e, err := range o.st.PGObjects(ctx, p.sid, "", "") {
			if err != nil {
				return nil, err
			}
			local[[2]string{e.Bucket, e.Key}] = true
		}
	}
	settle := func(upTo *bfKey) error {
		if bf == nil {
			return nil
		}
		copied, err := o.settle(ctx, p, from, bf, upTo)
		for _, k := range copied {
			delete(local, k)
		}
		return err
	}
	if bf != nil {
		bf.mu.Lock()
		bf.walking = true // from here on RepOps may be newer than the walk's start
		bf.mu.Unlock()
	}
	var last *osdpb.Version
	next := func(after [2]string) (fetched, func(), error) {
		return o.fetch(ctx, p, from, &osdpb.PGBackfill{AfterBucket: after[0], AfterKey: after[1], Buckets: isMeta})
	}
	if catchUp != nil {
		// The log is pulled with the walk's RepOps already seen, so that
		// every write after its end reaches bf.seen: the walk ends at
		// the log's end and the writes taken since (bf.end).
		keys, end, err := o.catchUpKeys(ctx, p, from, catchUp)
		if err != nil {
			return nil, err
		}
		last = end
		next = func([2]string) (fetched, func(), error) {
			if len(keys) == 0 {
				return fetched{PGBackfillReply: &osdpb.PGBackfillReply{Done: true}}, func() {}, nil
			}
			k := keys[0]
			keys = keys[1:]
			return o.fetch(ctx, p, from, &osdpb.PGBackfill{AfterBucket: k[0], AfterKey: k[1], Exact: true})
		}
	}
	after := [2]string{}
	for {
		f, release, err := next(after)
		if err != nil {
			return nil, err
		}
		if last == nil {
			last = f.Last
		}
		if f.Done || f.Entry == nil {
			release()
			break
		}
		if hook := backfillFetched.Load(); hook != nil && bf != nil {
			hook(f.Entry.Bucket, f.Entry.Key)
		}
		err = o.install(ctx, p, from, f.Entry, f.data)
		release()
		if err != nil {
			return nil, err
		}
		after = [2]string{f.Entry.Bucket, f.Entry.Key}
		delete(local, after)
		if bf != nil {
			k := bfKey(after)
			bf.mu.Lock()
			bf.copied[k] = f.Last
			bf.mu.Unlock()
			if err := settle(&k); err != nil {
				return nil, err
			}
		}
	}
	if err := settle(nil); err != nil {
		return nil, err
	}
	for k := range local {
		if bf != nil {
			bf.mu.Lock()
			keep := bf.applied[k]
			bf.mu.Unlock()
			if keep {
				continue // a write behind the walk put it there
			}
		}
		var err error
		if isMeta {
			err = o.dropBuckets(func() error {
				return o.st.InstallObject(ctx, p.sid, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE_BUCKET, Bucket: k[0]}, nil)
			})
		} else {
			err = o.st.RemoveObject(ctx, p.sid, k[0], k[1])
		}
		if err != nil {
			return nil, err
		}
	}
	if last == nil {
		last = &osdpb.Version{}
	}
	if bf != nil {
		bf.mu.Lock()
		last = bf.end(last) // the writes acked during the walk, up to a hole
		bf.mu.Unlock()
	}
	if err := o.backfillLog(ctx, p, from, last); err != nil {
		return nil, err
	}
	return last, nil
}

// catchUpKeys pulls p's log after version have from OSD from to its end,
// for a catch-up walk: the objects its entries name, in key order, and
// the version it ends at. A log that no longer reaches have, or diverged
// since the first pull (another primary), fails the recovery: the next one
// starts over.
func (o *OSD) catchUpKeys(ctx context.Context, p *pgState, from uint32, have *osdpb.Version) ([]bfKey, *osdpb.Version, error) {
	seen := map[bfKey]bool{}
	for {
		rep, err := o.pullLog(ctx, p, from, have)
		if err != nil {
			return nil, nil, err
		}
		if rep.TooOld || rep.Diverged {
			return nil, nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: osd.%d's log changed under the catch-up (too old %v, diverged %v)",
				placement.PGIDOf(p.sid), from, rep.TooOld, rep.Diverged)
		}
		for _, e := range rep.Entries {
			if e.Kind != osdpb.OpKind_OP_NONE {
				seen[bfKey{e.Bucket, e.Key}] = true
			}
		}
		if len(rep.Entries) > 0 {
			have = rep.Entries[len(rep.Entries)-1].Version
		}
		if rep.Complete || len(rep.Entries) == 0 {
			keys := slices.SortedFunc(maps.Keys(seen), func(a, b bfKey) int {
				return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
			})
			return keys, have, nil
		}
	}
}

// backfillLog ends p's backfill at version last with a copy of the log of
// OSD from up to last: its entries and their request ids (a Ceph backfill
// target gets the primary's log and its dups too), so that were we to lead
// the PG, a resend of one of their ops is answered from our log. The source's
// log goes from its tail, which its too_old answer to a pull of the whole
// log names (floor), in pages of 500 entries, each one synced batch; the
// first drops our own log. The last page ends the backfill. A source
// that names no tail (an older OSD), or whose log no longer reaches last,
// leaves our log empty, starting at last.
func (o *OSD) backfillLog(ctx context.Context, p *pgState, from uint32, last *osdpb.Version) error {
	after, reset := &osdpb.Version{}, true
	for starts := 0; ; {
		rep, err := o.pullLog(ctx, p, from, after)
		if err != nil {
			return err
		}
		if rep.TooOld {
			// Its log starts later: at its tail, or (a trim since our
			// last page) there again.
			if starts++; rep.Floor == nil || !versionLE(rep.Floor, last) || starts > 3 {
				break
			}
			after, reset = rep.Floor, true
			continue
		}
		if rep.Diverged {
			break // its log no longer holds our last page's end: not the log we copied
		}
		n := 0
		for n < len(rep.Entries) && versionLE(rep.Entries[n].GetVersion(), last) {
			n++
		}
		end := after
		if n > 0 {
			end = rep.Entries[n-1].Version
		}
		done := versionLE(last, end)
		if !done && (n < len(rep.Entries) || rep.Complete || n == 0) {
			break // the source's log skips or lacks last
		}
		if err := o.st.CopyLog(ctx, p.sid, store.LogCopy{After: after, Entries: rep.Entries[:n], Reset: reset, Backfilled: done}); err != nil {
			return err
		}
		if done {
			return nil
		}
		after, reset = end, false
	}
	o.log.Info("backfill: no copy of the source's log (it names no tail, or does not reach our version); our log starts at our version",
		"pg", placement.PGIDOf(p.sid), "from", from, "version", last)
	return o.st.SetPGLast(ctx, p.sid, last)
}
