package client

import (
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Location is where an object is placed under one map, as Ceph's `ceph osd
// map POOL OBJECT` says it.
type Location struct {
	Epoch  uint64         // the map's epoch
	Pool   string         // the pool's name
	PoolID uint32         // and its id
	PG     placement.PGID // the PG of the object's head
	Acting []uint32       // the PG's acting set, primary first; empty when no OSD is up and in
	Up     []uint32       // placement's set; another than Acting while the PG is remapped (pg_temp)
}

// Locate computes where the object bucket/key goes under the client's
// current map, the route every op to it takes, asking nobody: the object
// need not exist. An object put in parts keeps its head (its metadata,
// and its data up to the first part) there; each part lives in the PG
// of its own key, in the multipart bucket.
func (c *Client) Locate(bucket, key string) (Location, error) {
	if err := ops.CheckObjectNames(bucket, key); err != nil {
		return Location{}, err
	}
	mp := c.Map()
	pool, pg := c.route(mp, target{bucket: bucket, key: key})
	if pool == nil { // New checked Options.Pool; no command removes a pool
		return Location{}, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "map epoch %d has no pool %q", mp.Epoch(), c.opts.Pool)
	}
	return Location{Epoch: mp.Epoch(), Pool: pool.Name, PoolID: pool.Id, PG: placement.PGID{Pool: pool.Id, Seed: pg},
		Acting: mp.ActingSet(pool.Id, pg), Up: mp.UpSet(pool.Id, pg)}, nil
}
