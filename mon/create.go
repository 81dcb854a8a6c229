package mon

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// pendingAddr is where a created OSD that never booted "listens": an
// address the map accepts and nobody can dial. The OSD is down and out
// until its boot gives its real addresses.
const pendingAddr = "mem://osd-not-booted"

// create serves "osd create", Ceph's `ceph osd new UUID`: the id of the
// OSD with this uuid, or a new one, the lowest free. A new OSD names itself
// osd.N on both networks, so it needs its id before it listens and boots.
// It enters the map down and out (auto_out, so its first boot marks it in).
func (l *leadership) create(ctx context.Context, uuid string) (uint32, error) {
	if msg := checkLabel(uuid, 128); msg != "" {
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd create: uuid %s", msg)
	}
	var id uint32
	_, err := l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
		if o := osdByUUID(pb, uuid); o != nil {
			id = o.Id
			return txnExtra{}, errNoChange
		}
		id = lowestFreeID(pb)
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: id, Uuid: uuid, Weight: 1, AutoOut: true,
			PublicAddr: pendingAddr, ClusterAddr: pendingAddr})
		slices.SortFunc(pb.Osds, func(a, b *osdpb.OSDInfo) int { return cmp.Compare(a.Id, b.Id) })
		return txnExtra{}, nil
	})
	if err != nil {
		return 0, fmt.Errorf("osd create: %w", err)
	}
	return id, nil
}
