package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// DeepScrubPG asks every OSD of PG pg's acting set to deep-scrub its copy
// now, ahead of its schedule (Ceph's "ceph pg deep-scrub"), and returns the
// OSDs that queued it. The scrubs run in the background; what they find
// shows in each OSD's log and metrics, and damage no member could repair
// in the mon's health (docs/osd.md, "Damaged objects"). Admins only.
func (c *Client) DeepScrubPG(ctx context.Context, pg placement.PGID) ([]uint32, error) {
	mp := c.Map()
	pg, err := checkPG(mp, pg)
	if err != nil {
		return nil, err
	}
	acting := mp.ActingSet(pg.Pool, pg.Seed)
	if len(acting) == 0 {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "pg %s has no OSD up and in (map epoch %d)", pg, mp.Epoch())
	}
	for _, id := range acting {
		if _, err := c.scrubRequest(ctx, mp, id, &osdpb.PGScrub{Header: &osdpb.Header{Epoch: mp.Epoch(), Pool: pg.Pool, Pg: pg.Seed}}); err != nil {
			return nil, err
		}
	}
	return acting, nil
}

// DeepScrubOSD asks OSD id to deep-scrub every PG copy it holds now (Ceph's
// "ceph osd deep-scrub"), and returns how many it queued. Admins only.
func (c *Client) DeepScrubOSD(ctx context.Context, id uint32) (int, error) {
	mp := c.Map()
	return c.scrubRequest(ctx, mp, id, &osdpb.PGScrub{Header: &osdpb.Header{Epoch: mp.Epoch()}, All: true})
}

// scrubRequest sends req to OSD id, once.
func (c *Client) scrubRequest(ctx context.Context, mp *Map, id uint32, req *osdpb.PGScrub) (int, error) {
	conn, err := c.adminConn(ctx, mp, id)
	if err != nil {
		return 0, err
	}
	var rep osdpb.PGScrubReply
	if _, err := c.roundTrip(ctx, conn, osdpb.MsgType_MSG_PG_SCRUB, req, nil, &rep, false); err != nil {
		return 0, err
	}
	if err := ops.FromReply(rep.Header); err != nil {
		return 0, fmt.Errorf("osd.%d: %w", id, err)
	}
	return int(rep.Queued), nil
}

// InconsistentPG is what a PG's last deep scrub compare recorded: the
// objects whose copies differ (Ceph's "rados list-inconsistent-obj").
type InconsistentPG struct {
	Scrubbed time.Time
	Epoch    uint64 // the map epoch the scrub compared under
	Objects  []*osdpb.InconsistentObject
}

// ListInconsistent asks PG pg's primary for the objects its last deep
// scrub found inconsistent: per object, each copy's version, size and
// CRC32C and what is wrong with it. Admins only.
func (c *Client) ListInconsistent(ctx context.Context, pg placement.PGID) (*InconsistentPG, error) {
	var rep osdpb.PGListInconsistentReply
	if err := c.toPrimary(ctx, pg, osdpb.MsgType_MSG_PG_LIST_INCONSISTENT, func(h *osdpb.Header) proto.Message {
		return &osdpb.PGListInconsistent{Header: h}
	}, &rep, func() *osdpb.ReplyHeader { return rep.Header }); err != nil {
		return nil, err
	}
	r := &InconsistentPG{Epoch: rep.Result.GetEpoch(), Objects: rep.Result.GetObjects()}
	if n := rep.Result.GetScrubbedUnixNano(); n != 0 {
		r.Scrubbed = time.Unix(0, n)
	}
	return r, nil
}

// RepairPG asks PG pg's primary to deep-scrub it now and install the
// authoritative copy of each inconsistent object on the copies that
// differ (Ceph's "ceph pg repair"). It returns when the repair is done:
// how many objects were inconsistent and how many were repaired. Admins
// only.
func (c *Client) RepairPG(ctx context.Context, pg placement.PGID) (inconsistent, repaired int, err error) {
	var rep osdpb.PGRepairReply
	if err := c.toPrimary(ctx, pg, osdpb.MsgType_MSG_PG_REPAIR, func(h *osdpb.Header) proto.Message {
		return &osdpb.PGRepair{Header: h}
	}, &rep, func() *osdpb.ReplyHeader { return rep.Header }); err != nil {
		return 0, 0, err
	}
	return int(rep.Inconsistent), int(rep.Repaired), nil
}

// QueryPG asks PG pg's primary for its view of the PG (Ceph's "ceph pg
// PGID query"): its state, interval, log and where each replica stands,
// as JSON (osd.PGQuery). Admins only.
func (c *Client) QueryPG(ctx context.Context, pg placement.PGID) (string, error) {
	var rep osdpb.PGInspectReply
	if err := c.toPrimary(ctx, pg, osdpb.MsgType_MSG_PG_INSPECT, func(h *osdpb.Header) proto.Message {
		return &osdpb.PGInspect{Header: h}
	}, &rep, func() *osdpb.ReplyHeader { return rep.Header }); err != nil {
		return "", err
	}
	return rep.Output, nil
}

// toPrimary sends an admin request about PG pg to its primary, once.
func (c *Client) toPrimary(ctx context.Context, pg placement.PGID, t osdpb.MsgType, req func(*osdpb.Header) proto.Message, rep proto.Message, hdr func() *osdpb.ReplyHeader) error {
	mp := c.Map()
	pg, err := checkPG(mp, pg)
	if err != nil {
		return err
	}
	id, ok := mp.Primary(pg.Pool, pg.Seed)
	if !ok {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s has no OSD up and in (map epoch %d)", pg, mp.Epoch())
	}
	conn, err := c.adminConn(ctx, mp, id)
	if err != nil {
		return err
	}
	if _, err := c.roundTrip(ctx, conn, t, req(&osdpb.Header{Epoch: mp.Epoch(), Pool: pg.Pool, Pg: pg.Seed}), nil, rep, false); err != nil {
		return err
	}
	if err := ops.FromReply(hdr()); err != nil {
		return fmt.Errorf("osd.%d: %w", id, err)
	}
	return nil
}

// checkPG resolves the bucket records' PG (MetaPG) to its pool and checks
// that pg is in the map: a PG or pool that does not exist is the caller's
// mistake (INVALID_ARGUMENT), not an outage.
func checkPG(mp *Map, pg placement.PGID) (placement.PGID, error) {
	if pg.Seed == placement.MetaPG {
		pg.Pool = mp.MetaPool().Id
	}
	pool, ok := mp.Pool(pg.Pool)
	if !ok {
		return pg, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no pool %d (map epoch %d)", pg.Pool, mp.Epoch())
	}
	if pg.Seed != placement.MetaPG && pg.Seed >= pool.PgCount {
		return pg, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no pg %s: pool %d has %d PGs, %d.0 to %d.%x (map epoch %d)",
			pg, pg.Pool, pool.PgCount, pg.Pool, pg.Pool, pool.PgCount-1, mp.Epoch())
	}
	return pg, nil
}

// adminConn is the session to OSD id for an admin request.
func (c *Client) adminConn(ctx context.Context, mp *Map, id uint32) (*msgr.Conn, error) {
	info, ok := mp.OSD(id)
	if !ok {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no osd.%d in the map (epoch %d)", id, mp.Epoch())
	}
	if !info.Up {
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is not up (map epoch %d)", id, mp.Epoch())
	}
	addr, _ := mp.PublicAddr(id)
	conn, err := c.m.Connect(ctx, addr, msgr.EntityName(ops.OSDName(id)))
	if err != nil {
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d: %v", id, err)
	}
	return conn, nil
}
