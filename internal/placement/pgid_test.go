package placement

import (
	"errors"
	"testing"
)

// TestStoreIDNoCollision: the pool-65536 bug. Pool 65536's PG 5 and pool
// 0's PG 5 once shared one store id (and so one PG log); now the first is
// refused, every valid (pool, seed) gets its own id, and PGIDOf inverts it.
func TestStoreIDNoCollision(t *testing.T) {
	if _, err := (PGID{Pool: 65536, Seed: 5}).StoreID(); !errors.Is(err, ErrInvalidMap) {
		t.Fatalf("pool 65536: err %v, want an ErrInvalidMap", err)
	}
	if _, err := (PGID{Pool: 1, Seed: MaxPGCount}).StoreID(); err == nil {
		t.Fatal("seed MaxPGCount accepted")
	}
	seen := map[uint32]PGID{}
	for _, pool := range []uint32{0, 1, 2, 255, 256, MaxPoolID} {
		for _, seed := range []uint32{0, 1, 5, 0xff, 0x100, MaxPGCount - 1} {
			id := PGID{pool, seed}
			sid, err := id.StoreID()
			if err != nil {
				t.Fatalf("%v: %v", id, err)
			}
			if prev, dup := seen[sid]; dup {
				t.Fatalf("%v and %v share store id %#x", prev, id, sid)
			}
			if sid == MetaPG {
				t.Fatalf("%v has MetaPG's store id", id)
			}
			seen[sid] = id
			if back := PGIDOf(sid); back != id {
				t.Fatalf("PGIDOf(%#x) = %v, want %v", sid, back, id)
			}
		}
	}
	if sid, err := (PGID{Pool: 7, Seed: MetaPG}).StoreID(); err != nil || sid != MetaPG {
		t.Fatalf("meta PG: %#x %v", sid, err)
	}
	if s := (PGID{Pool: 1, Seed: 0x1f}).String(); s != "1.1f" {
		t.Fatalf("String %q", s)
	}
}
