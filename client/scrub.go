package client

import (
	"context"
	"fmt"

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
	if pg.Seed == placement.MetaPG {
		pg.Pool = lowestPool(mp).Id
	}
	if _, ok := mp.Pool(pg.Pool); !ok {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no pool %d (map epoch %d)", pg.Pool, mp.Epoch())
	}
	acting := mp.ActingSet(pg.Pool, pg.Seed)
	if len(acting) == 0 {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "pg %s has no OSD up (map epoch %d)", pg, mp.Epoch())
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
	info, ok := mp.OSD(id)
	if !ok || !info.Up {
		return 0, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is not up (map epoch %d)", id, mp.Epoch())
	}
	addr, _ := mp.PublicAddr(id)
	conn, err := c.m.Connect(ctx, addr, msgr.EntityName(ops.OSDName(id)))
	if err != nil {
		return 0, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d: %v", id, err)
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
