package placement

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// MaxPoolID is the highest pool id a map may hold. A store keys each PG by
// a 32-bit id with the pool in its high 16 bits (PGID.StoreID), and 0xffff
// is left out so that no pool's PG 0xffff can be MetaPG.
const MaxPoolID = 0xfffe

// PGID names a placement group: its pool and its seed, the PG's number
// within the pool (what PGOf returns). MetaPG's seed is MetaPG in every
// pool.
type PGID struct{ Pool, Seed uint32 }

// String is Ceph's form, pool.seed in hex: "1.1f"; MetaPG is "meta".
func (p PGID) String() string {
	if p.Seed == MetaPG {
		return "meta"
	}
	return fmt.Sprintf("%d.%x", p.Pool, p.Seed)
}

// StoreID is the id the store keys PG p by: pool<<16 | seed, or MetaPG for
// the meta PG of any pool. It is the one way to make such an id, and it
// refuses a pool or seed that does not fit, so that two PGs never share a
// log: before it, pool 65536's PG 5 and pool 0's PG 5 were both 5.
func (p PGID) StoreID() (uint32, error) {
	if p.Seed == MetaPG {
		return MetaPG, nil
	}
	if p.Pool > MaxPoolID {
		return 0, &MapError{Field: "pool", Reason: fmt.Sprintf("pool id %d above %d", p.Pool, MaxPoolID)}
	}
	if p.Seed >= MaxPGCount {
		return 0, &MapError{Field: "pg", Reason: fmt.Sprintf("pg %d: want below %d", p.Seed, MaxPGCount)}
	}
	return p.Pool<<16 | p.Seed, nil
}

// PGIDOf is StoreID's inverse. The meta PG comes back with pool 0: the
// store keeps one for the whole cluster.
func PGIDOf(sid uint32) PGID {
	if sid == MetaPG {
		return PGID{Seed: MetaPG}
	}
	return PGID{Pool: sid >> 16, Seed: sid & 0xffff}
}

// MinSize is how many members of a PG's acting set must be up for it to
// take writes: the pool's min_size, or when unset size - size/2 (2 of 3,
// Ceph's default).
func MinSize(p *osdpb.Pool) int {
	if p.GetMinSize() > 0 {
		return int(p.GetMinSize())
	}
	s := int(p.GetSize())
	return s - s/2
}

// ParsePGID parses String's form: "POOL.SEED" with SEED in hex ("1.1f"),
// or "meta" for the meta PG of pool 0.
func ParsePGID(s string) (PGID, error) {
	if s == "meta" {
		return PGID{Seed: MetaPG}, nil
	}
	pool, seed, ok := strings.Cut(s, ".")
	if !ok {
		return PGID{}, fmt.Errorf("pg id %q: want POOL.SEED, the seed in hex (1.1f)", s)
	}
	p, err := strconv.ParseUint(pool, 10, 32)
	if err != nil {
		return PGID{}, fmt.Errorf("pg id %q: pool %q is not a number", s, pool)
	}
	n, err := strconv.ParseUint(seed, 16, 32)
	if errors.Is(err, strconv.ErrRange) {
		return PGID{}, fmt.Errorf("pg id %q is out of range", s)
	}
	if err != nil {
		return PGID{}, fmt.Errorf("pg id %q: seed %q is not hex", s, seed)
	}
	id := PGID{Pool: uint32(p), Seed: uint32(n)}
	if _, err := id.StoreID(); err != nil || id.Seed == MetaPG {
		return PGID{}, fmt.Errorf("pg id %q is out of range", s)
	}
	if id.String() != s {
		return PGID{}, fmt.Errorf("pg id %q: write it %q", s, id)
	}
	return id, nil
}
