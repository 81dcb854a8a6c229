package placement

import (
	"crypto/rand"
	"fmt"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// Defaults of NewLocal.
const (
	// DefaultPoolName is the pool NewLocal creates.
	DefaultPoolName = "default"
	// DefaultPoolID is its id. It is not 0, the proto default, so that a
	// request whose header forgot the pool does not land in it.
	DefaultPoolID = 1
	// DefaultPGCount is its PG count: about 40 PGs per OSD on a ten-OSD
	// cluster at three replicas, enough for an even spread, few enough for
	// cheap peering.
	DefaultPGCount = 128
)

// LocalOptions describe a local cluster for NewLocal.
type LocalOptions struct {
	// PublicAddrs has one address per OSD; OSD i gets id i and
	// PublicAddrs[i]. It must not be empty.
	PublicAddrs []string
	// ClusterAddrs, if not nil, has one replication address per OSD;
	// nil means each OSD replicates over its public address.
	ClusterAddrs []string
	// PGCount of the pool; 0 means DefaultPGCount.
	PGCount uint32
	// Size is the pool's replica count; 0 means min(3, number of OSDs).
	Size uint32
	// FSID names the cluster; empty means a fresh random UUID.
	FSID string
}

// NewLocal returns the epoch-1 map of a local cluster, as `osprey up`
// starts it: the given OSDs, all up and in with weight 1, and one pool,
// DefaultPoolName, with min_size unset (size - size/2, see MinSize).
func NewLocal(opts LocalOptions) (*Map, error) {
	n := len(opts.PublicAddrs)
	if n == 0 {
		return nil, &MapError{Field: "osds", Reason: "NewLocal needs at least one public address"}
	}
	if opts.ClusterAddrs != nil && len(opts.ClusterAddrs) != n {
		return nil, &MapError{Field: "osds", Reason: fmt.Sprintf("%d cluster addresses for %d OSDs", len(opts.ClusterAddrs), n)}
	}
	fsid := opts.FSID
	if fsid == "" {
		fsid = newUUID()
	}
	size := opts.Size
	if size == 0 {
		size = uint32(min(3, n))
	}
	pgs := opts.PGCount
	if pgs == 0 {
		pgs = DefaultPGCount
	}
	pb := &osdpb.ClusterMap{
		Epoch: 1,
		Fsid:  fsid,
		Pools: []*osdpb.Pool{{Id: DefaultPoolID, Name: DefaultPoolName, Size: size, PgCount: pgs}},
	}
	for i, pub := range opts.PublicAddrs {
		cl := pub
		if opts.ClusterAddrs != nil {
			cl = opts.ClusterAddrs[i]
		}
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: uint32(i), PublicAddr: pub, ClusterAddr: cl, Weight: 1, Up: true, In: true})
	}
	return build(pb)
}

// newUUID returns a random (version 4) UUID in its text form.
func newUUID() string {
	var u [16]byte
	rand.Read(u[:]) // never fails (crypto/rand panics rather than return short)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
