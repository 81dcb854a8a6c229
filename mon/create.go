package mon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pendingAddr is where a created OSD that never booted "listens"
// (placement.PendingAddr). The OSD is down and out until its boot gives
// its real addresses; "osd tree" shows it as never booted (neverBooted),
// not at this address.
const pendingAddr = placement.PendingAddr

// neverBooted: o was created ("osd create") and no daemon has booted as
// it since; its addresses are the placeholder.
func neverBooted(o *osdpb.OSDInfo) bool { return placement.NeverBooted(o) }

// create serves "osd create", Ceph's `ceph osd new UUID`: the id of the
// OSD with this uuid, or a new one, the lowest free, and (unless NoAuth)
// the OSD's keyring. A new OSD names itself osd.N on both networks, so it
// needs its id before it listens and boots. It enters the map down and out
// (auto_out, so its first boot marks it in).
//
// A new OSD and its entity osd.N (caps OSDCaps) are written in one etcd
// transaction, so the map never holds an OSD that got no keyring: as
// Ceph's "osd new" refuses an osd.N that exists with another key
// (EEXIST), an osd.N that an auth command made with other caps, for an id
// no OSD had, fails the create with ENTITY_EXISTS and changes nothing. One
// made with OSDCaps (provisioned ahead) is kept: the new OSD gets its
// keyring. An auth command itself never touches the map.
func (l *leadership) create(ctx context.Context, uuid string) (uint32, []byte, error) {
	if msg := checkLabel(uuid, 128); msg != "" {
		return 0, nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd create: uuid %s", msg)
	}
	m := l.m
	var ca *auth.CA
	if !m.cfg.NoAuth {
		var err error
		if ca, err = m.auth.ca(ctx); err != nil {
			return 0, nil, fmt.Errorf("osd create: %w", err)
		}
	}
	var id uint32
	var keyring []byte
	existing, booted := false, false
	var err error
	// errConflict: osd.N's record changed between our read and our write
	// while the map stayed: read both again.
	for range 3 {
		_, err = l.update(ctx, func(pb *osdpb.ClusterMap) (txnExtra, error) {
			if o := osdByUUID(pb, uuid); o != nil {
				id, existing, booted = o.Id, true, !neverBooted(o)
				return txnExtra{}, errNoChange
			}
			id, existing = lowestFreeID(pb), false
			var x txnExtra
			if ca != nil {
				var err error
				if keyring, x, err = m.newOSDEntity(ctx, ca, id); err != nil {
					return txnExtra{}, err
				}
			}
			pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: id, Uuid: uuid, Weight: 1, AutoOut: true,
				PublicAddr: pendingAddr, ClusterAddr: pendingAddr})
			slices.SortFunc(pb.Osds, func(a, b *osdpb.OSDInfo) int { return cmp.Compare(a.Id, b.Id) })
			return x, nil
		})
		if !errors.Is(err, errConflict) {
			break
		}
	}
	if err != nil {
		return 0, nil, fmt.Errorf("osd create: %w", err)
	}
	switch {
	case ca == nil:
		keyring = nil
	case existing && booted:
		// Its key is its daemon's, in its data directory, since its first
		// boot. A uuid is no secret (the map and the logs show it), so a
		// repeat now is not the OSD's own, which would not ask: handing
		// out the key would let anybody with the bootstrap key become the
		// OSD, and evict it (Ceph's "osd new" refuses an existing osd.N
		// whose key the caller does not have, EEXIST).
		return 0, nil, ops.Errorf(osdpb.Status_ENTITY_EXISTS,
			"osd create: osd.%d (uuid %s) exists and has booted: its key is its own, in its data directory (DATA/keyring), and the mon gives it out only before the first boot; "+
				"an admin restores a lost one with osprey auth get osd.%d -o DATA/keyring, or a new disk starts as a new OSD (a new data directory)", id, uuid, id)
	case existing:
		// A repeat of a create that made the OSD (its daemon crashed
		// before keeping its id): the same keyring.
		if keyring, err = m.osdKeyring(ctx, id); err != nil {
			return 0, nil, err
		}
	default:
		// This mon's checks see the new entity at once, not when its
		// watch catches up: the OSD authenticates with it next.
		if t, err := m.auth.listTable(ctx); err == nil {
			m.adoptAuthTable(t)
		}
	}
	return id, keyring, nil
}

// osdCaps are OSDCaps as records hold them (canonical).
var osdCaps = func() map[string]string {
	c, err := auth.ParseCaps(OSDCaps)
	if err != nil {
		panic(err)
	}
	return c.Strings()
}()

// newOSDEntity is the keyring of osd.id, for a new OSD of that id, and
// what the map's transaction adds so that the entity is written with the
// OSD: a new record with OSDCaps, compared absent; or, if an auth command
// made osd.id with OSDCaps before any OSD had the id, that record,
// compared unchanged. An osd.id with other caps is ENTITY_EXISTS: the OSD
// is not created. It reads, and writes nothing itself (an edit may run
// again).
func (m *Mon) newOSDEntity(ctx context.Context, ca *auth.CA, id uint32) ([]byte, txnExtra, error) {
	entity := ops.OSDName(id)
	key := m.auth.k.auth(entity)
	rec, rev, err := m.auth.get(ctx, entity)
	if err != nil {
		return nil, txnExtra{}, err
	}
	if rec != nil {
		if !maps.Equal(rec.Caps, osdCaps) {
			return nil, txnExtra{}, ops.Errorf(osdpb.Status_ENTITY_EXISTS,
				"the new OSD would be %s, but entity %s exists with caps %s, not an OSD's (%s), and no OSD has that id: "+
					"remove it (osprey auth rm %s) or give it an OSD's caps (osprey auth caps %s %s), then start the OSD again; the map is unchanged",
				entity, entity, auth.FormatCaps(rec.Caps), auth.FormatCaps(osdCaps), entity, entity, auth.FormatCaps(osdCaps))
		}
		return rec.Keyring, txnExtra{cmps: []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}}, nil
	}
	k, err := ca.Issue(entity)
	if err != nil {
		return nil, txnExtra{}, err
	}
	pem, err := k.MarshalPEM()
	if err != nil {
		return nil, txnExtra{}, err
	}
	b, err := marshalRecord(&osdpb.AuthRecord{Entity: entity, Caps: osdCaps, Keyring: pem, Serial: auth.Serial(k.Cert)})
	if err != nil {
		return nil, txnExtra{}, err
	}
	return pem, txnExtra{
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", 0)},
		ops:  []clientv3.Op{clientv3.OpPut(key, string(b))},
	}, nil
}
