package mon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// requestTimeout bounds the work of one request, etcd transactions and
// their retries included; clients retry after their own timeout.
const requestTimeout = 10 * time.Second

// maxHandlers bounds the requests the mon works on at once.
const maxHandlers = 512

// replyTimeout bounds sending one reply or push to a slow peer.
const replyTimeout = 10 * time.Second

// dispatcher serves the mon's messenger: each request is handled on its
// own goroutine, so a slow etcd transaction holds up nobody else.
type dispatcher struct{ m *Mon }

func (d dispatcher) Dispatch(msg *msgr.Message) {
	m := d.m
	t := osdpb.MsgType(msg.Type)
	conn, tid := msg.Conn(), msg.Tid()
	front := bytes.Clone(msg.Front)
	msg.Release()
	// Back-pressure: with maxHandlers requests in progress the conn's
	// dispatch waits, and its peer runs out of credit.
	select {
	case m.slots <- struct{}{}:
	case <-m.ctx.Done():
		return
	}
	m.hmu.Lock()
	defer m.hmu.Unlock()
	if m.closing {
		<-m.slots
		return
	}
	m.handlers.Go(func() {
		defer func() { <-m.slots }()
		// WithRequireLeader: an etcd member cut off from its leader
		// refuses at once ("etcdserver: no leader") instead of holding
		// the request until requestTimeout, so the client hears
		// SERVICE_UNAVAILABLE quickly and tries another mon.
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(m.ctx), requestTimeout)
		defer cancel()
		rt, rep := m.handle(ctx, conn, t, front)
		if rep != nil && (m.cfg.dropReply == nil || !m.cfg.dropReply(rt)) {
			m.send(conn, tid, rt, rep)
		}
	})
}

func (d dispatcher) HandleEvent(ev msgr.Event) {
	if ev.Kind == msgr.EventReset || ev.Kind == msgr.EventRemoteReset {
		d.m.unsubscribe(ev.Conn)
	}
}

// handle serves one request and returns the reply and its type; a nil
// reply means none is sent (a message that is not a request). It never
// panics on what arrives.
func (m *Mon) handle(ctx context.Context, conn *msgr.Conn, t osdpb.MsgType, front []byte) (osdpb.MsgType, proto.Message) {
	if t == osdpb.MsgType_MSG_GET_MAP {
		// What an OSD answers, so a client can use the mons as seeds.
		var req osdpb.GetMap
		if err := proto.Unmarshal(front, &req); err != nil {
			return ops.ReplyType(t), &osdpb.GetMapReply{Header: m.header(ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "malformed %v: %v", t, err))}
		}
		if err := m.allowed(conn, &req); err != nil {
			return ops.ReplyType(t), &osdpb.GetMapReply{Header: m.header(err)}
		}
		mp := m.Map()
		return ops.ReplyType(t), &osdpb.GetMapReply{Header: &osdpb.ReplyHeader{Epoch: mp.Epoch()}, Map: mp.Proto()}
	}
	if !isMonRequest(t) {
		if !ops.IsRequest(t) || t == osdpb.MsgType_MSG_MON_MAP || t >= 1<<16-1 {
			m.log.Info("dropping a message that is not a mon request", "type", t, "conn", conn)
			return 0, nil
		}
		m.log.Info("bad request", "type", t, "conn", conn)
		return ops.ReplyType(t), replyTo(t,
			m.header(ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "message type %v is not a mon request", t)))
	}
	req, err := decodeRequest(t, front)
	if err != nil {
		m.log.Info("bad request", "type", t, "conn", conn, "err", err)
		return ops.ReplyType(t), replyTo(t, m.header(err))
	}
	err = m.allowed(conn, req)
	var rep proto.Message
	if err == nil {
		rep, err = m.serve(ctx, conn, req)
	}
	if err != nil {
		if st, _ := ops.StatusOf(monError(err)); st == osdpb.Status_INTERNAL_ERROR || st == osdpb.Status_SERVICE_UNAVAILABLE {
			m.failLog.Log(m.log, slog.LevelWarn, t.String(), "request failed", "type", t, "conn", conn, "err", err)
		} else {
			m.log.Debug("request refused", "type", t, "conn", conn, "err", err)
		}
		return ops.ReplyType(t), replyTo(t, m.header(err))
	}
	return ops.ReplyType(t), rep
}

// serve routes a decoded, validated request.
func (m *Mon) serve(ctx context.Context, conn *msgr.Conn, req proto.Message) (proto.Message, error) {
	switch r := req.(type) {
	case *osdpb.MonSubscribe:
		rep := &osdpb.MonSubscribeReply{Header: m.header(nil), Mons: m.upMons()}
		if r.Auth {
			t, err := m.currentAuthTable(ctx)
			if err != nil {
				return nil, err
			}
			rep.Auth = m.authTableFor(conn, t)
		}
		m.subscribe(conn, r.Auth)
		if mp := m.Map(); mp.Epoch() > r.HaveEpoch {
			rep.Map = mp.Proto()
		}
		return rep, nil
	case *osdpb.MonCommand:
		return m.command(ctx, r)
	}
	fsid := ""
	switch r := req.(type) {
	case *osdpb.MonBoot:
		fsid = r.Fsid
	case *osdpb.MonBeacon:
		fsid = r.Fsid
	case *osdpb.MonFailure:
		fsid = r.Fsid
	case *osdpb.MonMarkMeDown:
		fsid = r.Fsid
	}
	if fsid != "" && fsid != m.fsid {
		return nil, ops.Errorf(osdpb.Status_WRONG_CLUSTER, "fsid %s is not this cluster's (%s)", fsid, m.fsid)
	}
	l := m.lead.Load()
	if l == nil {
		// A standby relays what an OSD that cannot reach the leader
		// sends (relay.go); the rest goes to the leader.
		switch r := req.(type) {
		case *osdpb.MonBeacon:
			if m.relays(r.LeaderUnreachable, r.UnreachableLeader) {
				return m.relayBeacon(ctx, r)
			}
		case *osdpb.MonFailure:
			if m.relays(r.LeaderUnreachable, r.UnreachableLeader) {
				return m.relayFailure(ctx, r)
			}
		case *osdpb.MonMarkMeDown:
			if m.relays(r.LeaderUnreachable, r.UnreachableLeader) {
				return m.relayMarkMeDown(ctx, r)
			}
		case *osdpb.MonBoot:
			if m.relays(r.LeaderUnreachable, r.UnreachableLeader) {
				return m.relayBoot(ctx, r)
			}
		}
		return nil, m.notLeader()
	}
	switch r := req.(type) {
	case *osdpb.MonBoot:
		return l.boot(ctx, r)
	case *osdpb.MonBeacon:
		return l.beacon(ctx, r, "")
	case *osdpb.MonFailure:
		if err := l.failure(ctx, r); err != nil {
			return nil, err
		}
		return &osdpb.MonFailureReply{Header: m.header(nil)}, nil
	case *osdpb.MonMarkMeDown:
		if err := l.markMeDown(ctx, r); err != nil {
			return nil, err
		}
		return &osdpb.MonMarkMeDownReply{Header: m.header(nil)}, nil
	}
	return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "unhandled request %T", req)
}

// relays reports whether this standby relays a request that says the
// leader failed its sender (unreachable; failed: which leader, "" from an
// older build): not when it knows another leader than the one that
// failed. That one is gone (a failover): NOT_LEADER sends the request to
// the new leader, where a relay would be taken for a cut between the
// sender and a leader it never tried (MON_LEADER_UNREACHABLE).
func (m *Mon) relays(unreachable bool, failed string) bool {
	if !unreachable {
		return false
	}
	lead := m.Leader()
	return failed == "" || lead == "" || failed == lead
}

func (m *Mon) notLeader() error {
	if lead := m.Leader(); lead != "" {
		return ops.Errorf(osdpb.Status_NOT_LEADER, "mon.%s is a standby; the leader is at %s", m.cfg.Name, lead)
	}
	return ops.Errorf(osdpb.Status_NOT_LEADER, "mon.%s is a standby and knows no leader yet", m.cfg.Name)
}

// command serves a MonCommand: the read-only ones on any mon, the ones
// that change the map on the leader. One that changes something and
// carries a request id is applied once however often it comes
// (commandOnce).
func (m *Mon) command(ctx context.Context, c *osdpb.MonCommand) (*osdpb.MonCommandReply, error) {
	if len(c.RequestId) > 0 && monclient.Mutating(c.Prefix) {
		return m.commandOnce(ctx, c)
	}
	return m.runCommand(ctx, c, nil)
}

// runCommand serves c; its change, if any, also records its reply under
// g's request id (g nil: none).
func (m *Mon) runCommand(ctx context.Context, c *osdpb.MonCommand, g *requestGuard) (*osdpb.MonCommandReply, error) {
	rep := &osdpb.MonCommandReply{}
	var out any
	switch c.Prefix {
	case "status":
		st, err := m.Status(ctx)
		if err != nil {
			return nil, err
		}
		out = st
	case "health detail":
		in, err := m.statusInput(ctx)
		if err != nil {
			return nil, err
		}
		in.detail = true
		out = computeStatus(in).Health
	case "osd tree":
		out = osdTree(m.Map())
	case "df":
		in, err := m.statusInput(ctx)
		if err != nil {
			return nil, err
		}
		out = computeDF(in)
	case "osd pool ls":
		out = poolInfos(m.Map())
	case "osd df":
		r, err := m.Report(ctx)
		if err != nil {
			return nil, err
		}
		out = r.OSDs
	case "pg ls":
		in, err := m.statusInput(ctx)
		if err != nil {
			return nil, err
		}
		out = pgList(in)
	case "osd ok-to-stop", "osd safe-to-destroy":
		in, err := m.statusInput(ctx)
		if err != nil {
			return nil, err
		}
		if c.Prefix == "osd ok-to-stop" {
			out, err = okToStop(in, c.Ids)
		} else {
			out, err = safeToDestroy(in, c.Ids)
		}
		if err != nil {
			return nil, err
		}
	case "osd create":
		if c.Fsid != "" && c.Fsid != m.fsid {
			// A data directory of another cluster, its keyring lost: an
			// id here would be written over its own.
			return nil, ops.Errorf(osdpb.Status_WRONG_CLUSTER, "osd create: the OSD's data belongs to cluster %s; this is cluster %s", c.Fsid, m.fsid)
		}
		l := m.lead.Load()
		if l == nil {
			return nil, m.notLeader()
		}
		id, keyring, err := l.create(ctx, c.Uuid)
		if err != nil {
			return nil, err
		}
		rep.Keyring = keyring
		rep.Ids = []uint32{id}
		out = map[string]any{"id": id}
	case "auth add", "auth get-or-create", "auth get", "auth ls", "auth rm", "auth caps", "auth rotate", "auth s3-key add", "auth s3-key rm": // authCommands
		res, err := m.authCommand(ctx, c, rep, g)
		if err != nil {
			return nil, err
		}
		out = res
	case "mon rm":
		res, err := m.forgetMon(ctx, c.Var)
		if err != nil {
			return nil, err
		}
		out = res
	case "get map":
		mp, err := m.store.get(ctx, c.Epoch)
		if err != nil {
			return nil, err
		}
		rep.Map = mp.Proto()
		out = map[string]any{"epoch": mp.Epoch(), "fsid": mp.FSID()}
	default:
		l := m.lead.Load()
		if l == nil {
			return nil, m.notLeader()
		}
		res, err := l.command(ctx, commandOf(c), g)
		if err != nil {
			return nil, err
		}
		out = res
	}
	r, err := commandReply(out, rep.Keyring)
	if err != nil {
		return nil, err
	}
	rep.Output = r.Output
	rep.Header = m.header(nil)
	rep.Epoch = m.Map().Epoch()
	return rep, nil
}

// header is a reply header with err's status and our epoch; NOT_LEADER
// says where the leader is.
func (m *Mon) header(err error) *osdpb.ReplyHeader {
	st, msg := ops.StatusOf(monError(err))
	h := &osdpb.ReplyHeader{Status: st, Message: msg, Epoch: m.Map().Epoch()}
	if st == osdpb.Status_NOT_LEADER {
		h.Leader = m.Leader()
	}
	return h
}

// monError maps errors that are not *ops.Error to statuses: etcd and
// context trouble is SERVICE_UNAVAILABLE (retry later), an invalid map
// INVALID_ARGUMENT.
func monError(err error) error {
	var oe *ops.Error
	switch {
	case err == nil, errors.As(err, &oe):
		return err
	case errors.Is(err, placement.ErrInvalidMap):
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err)
	case errors.Is(err, errConflict):
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%v; try again", err)
	}
	return unavailable("etcd", err)
}

// unavailable wraps err, a failure to reach etcd, as SERVICE_UNAVAILABLE.
func unavailable(what string, err error) error {
	var oe *ops.Error
	if errors.As(err, &oe) {
		return err
	}
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%s: %v", what, err)
}

// send sends pb as a message of type t with tid in its envelope (a
// reply's is its request's, 0 for a push) on c without blocking the caller
// for long: a full send queue hands it to a goroutine that waits up to
// replyTimeout. Errors are the peer's problem: it is gone or not reading.
func (m *Mon) send(c *msgr.Conn, tid uint64, t osdpb.MsgType, pb proto.Message) {
	front, err := proto.Marshal(pb)
	if err != nil {
		m.log.Error("marshal reply", "type", t, "err", err)
		return
	}
	m.sendFront(c, tid, t, front)
}

func (m *Mon) sendFront(c *msgr.Conn, tid uint64, t osdpb.MsgType, front []byte) {
	if c == nil {
		return
	}
	msg := msgr.NewMessage(uint16(t), front, nil)
	msg.SetTid(tid)
	err := c.TrySend(msg)
	if errors.Is(err, msgr.ErrWouldBlock) {
		go func() {
			ctx, cancel := context.WithTimeout(m.ctx, replyTimeout)
			defer cancel()
			if err := c.Send(ctx, msg); err != nil {
				msg.Release()
				m.log.Debug("send failed", "type", t, "conn", c, "err", err)
			}
		}()
		return
	}
	if err != nil {
		msg.Release()
		m.log.Debug("send failed", "type", t, "conn", c, "err", err)
	}
}

// subscribe adds c to the conns that get every new map, and with auth
// every new auth table.
func (m *Mon) subscribe(c *msgr.Conn, auth bool) {
	if c == nil {
		return
	}
	m.subMu.Lock()
	m.subs[c] = m.subs[c] || auth
	m.subMu.Unlock()
}

func (m *Mon) unsubscribe(c *msgr.Conn) {
	m.subMu.Lock()
	delete(m.subs, c)
	m.subMu.Unlock()
}

// push sends mp to every subscriber as MSG_MON_MAP. REQUIRES: m.mapMu,
// so pushes leave in epoch order.
func (m *Mon) push(mp *placement.Map) {
	mm := &osdpb.MonMap{Map: mp.Proto(), Mons: m.upMons()}
	m.pushTo(false, osdpb.MsgType_MSG_MON_MAP, func(*msgr.Conn) proto.Message { return mm })
}

// pushTo sends pbFor(conn) to every subscriber (onlyAuth: every auth
// subscriber) as a one-way message of type t. Subscribers given the same
// message share its encoding.
func (m *Mon) pushTo(onlyAuth bool, t osdpb.MsgType, pbFor func(*msgr.Conn) proto.Message) {
	m.subMu.Lock()
	conns := make([]*msgr.Conn, 0, len(m.subs))
	for c, auth := range m.subs {
		if auth || !onlyAuth {
			conns = append(conns, c)
		}
	}
	m.subMu.Unlock()
	fronts := map[proto.Message][]byte{}
	for _, c := range conns {
		select {
		case <-c.Done():
			m.unsubscribe(c)
			continue
		default:
		}
		pb := pbFor(c)
		front, ok := fronts[pb]
		if !ok {
			var err error
			if front, err = proto.Marshal(pb); err != nil {
				m.log.Error("marshal push", "type", t, "err", err)
				return
			}
			fronts[pb] = front
		}
		// The messenger only reads a front, so all pushes share one.
		m.sendFront(c, 0, t, front)
	}
}
