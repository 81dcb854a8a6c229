package placement

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestObjectHashGolden pins the object hash. If this fails, every object in
// every existing cluster would be looked for in the wrong PG: do not update
// the values, restore the hash.
func TestObjectHashGolden(t *testing.T) {
	for _, tc := range []struct {
		bucket, key    string
		hash           uint64
		pg128, pg65536 uint32
	}{
		{"", "", 0x813f0174a2367c13, 19, 31763},
		{"a", "", 0xb2a81edc870f611d, 29, 24861},
		{"", "a", 0x0d38d3c8a628cc82, 2, 52354},
		{"photos", "2024/cat.jpg", 0xd5c66ec97cb08362, 98, 33634},
		{"ab", "c", 0x238402e0c3104247, 71, 16967},
		{"a", "bc", 0xd05db19d777129f7, 119, 10743},
		{"bucket", "key", 0x58f0d9171f8c9e36, 54, 40502},
	} {
		if h := ObjectHash(tc.bucket, tc.key); h != tc.hash {
			t.Errorf("ObjectHash(%q, %q) = %#016x, want %#016x", tc.bucket, tc.key, h, tc.hash)
		}
		if pg := PGOf(&osdpb.Pool{PgCount: 128}, tc.bucket, tc.key); pg != tc.pg128 {
			t.Errorf("PGOf(128 PGs, %q, %q) = %d, want %d", tc.bucket, tc.key, pg, tc.pg128)
		}
		if pg := PGOf(&osdpb.Pool{PgCount: 65536}, tc.bucket, tc.key); pg != tc.pg65536 {
			t.Errorf("PGOf(65536 PGs, %q, %q) = %d, want %d", tc.bucket, tc.key, pg, tc.pg65536)
		}
	}
}

// TestObjectHashIsFNV1a checks ObjectHash against the standard library's
// FNV-1a, so the documented definition is the implemented one.
func TestObjectHashIsFNV1a(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		bucket := randString(r, 70)
		key := randString(r, 300)
		h := fnv.New64a()
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(bucket))))
		h.Write([]byte(bucket))
		h.Write([]byte(key))
		if want := mix64(h.Sum64()); ObjectHash(bucket, key) != want {
			t.Fatalf("ObjectHash(%q, %q) = %#x, FNV-1a+mix64 = %#x", bucket, key, ObjectHash(bucket, key), want)
		}
	}
}

func randString(r *rand.Rand, max int) string {
	b := make([]byte, r.IntN(max))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

func TestPGOfEdgeCases(t *testing.T) {
	// Never a panic, never MetaPG.
	if pg := PGOf(nil, "b", "k"); pg != 0 {
		t.Fatalf("PGOf(nil) = %d", pg)
	}
	if pg := PGOf(&osdpb.Pool{}, "b", "k"); pg != 0 {
		t.Fatalf("PGOf(pg_count 0) = %d", pg)
	}
	if pg := PGOf(&osdpb.Pool{PgCount: 1}, "b", "k"); pg != 0 {
		t.Fatalf("PGOf(pg_count 1) = %d", pg)
	}
	// The bucket is length-prefixed: moving a byte between bucket and key
	// changes the hash.
	if ObjectHash("ab", "c") == ObjectHash("a", "bc") || ObjectHash("", "abc") == ObjectHash("abc", "") {
		t.Fatal("ObjectHash is ambiguous about where the bucket ends")
	}
}

// TestPGOfSpread: objects spread evenly over PGs (chi-square over 64 PGs,
// 64000 keys; 99.9% quantile of chi2(63) is 103.4).
func TestPGOfSpread(t *testing.T) {
	pool := &osdpb.Pool{PgCount: 64}
	var n [64]float64
	const keys = 64000
	for i := range keys {
		n[PGOf(pool, "bucket", "obj-"+strconv.Itoa(i))]++
	}
	chi := 0.0
	for _, o := range n {
		chi += (o - keys/64) * (o - keys/64) / (keys / 64)
	}
	t.Logf("chi-square of %d sequential keys over 64 PGs: %.1f", keys, chi)
	if chi > 103.4 {
		t.Fatalf("chi-square %.1f > 103.4: keys cluster in PGs", chi)
	}
}

// TestLog2Fixed: the fixed-point log is within 2^-36 of math.Log2 (a test
// may use math.Log2: only placement itself must not), and monotone.
func TestLog2Fixed(t *testing.T) {
	golden := []struct{ x, want uint64 }{
		{1, 0},
		{2, 1 << 40},
		{3, 1742684699131},
		{1 << 47, 47 << 40},
		{1<<48 - 1, 48<<40 - 1},
		{1 << 48, 48 << 40},
	}
	for _, g := range golden {
		if got := log2Fixed(g.x); got != g.want {
			t.Errorf("log2Fixed(%d) = %d, want %d", g.x, got, g.want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	prev := uint64(0)
	for i := range 200000 {
		x := r.Uint64N(1<<drawBits) + 1
		if i%2 == 0 {
			x = uint64(i) + 1 // small values, and a monotone run
			if l := log2Fixed(x); l < prev {
				t.Fatalf("log2Fixed(%d) = %d < log2Fixed(%d) = %d", x, l, x-1, prev)
			} else {
				prev = l
			}
		}
		got := float64(log2Fixed(x)) / (1 << logFracBits)
		if d := math.Abs(got - math.Log2(float64(x))); d > 1.0/(1<<36) {
			t.Fatalf("log2Fixed(%d) = %v, math.Log2 = %v (off by %g)", x, got, math.Log2(float64(x)), d)
		}
	}
}

// TestDrawCostGolden pins the straw2 tickets: a change here moves PGs in
// every cluster.
func TestDrawCostGolden(t *testing.T) {
	for _, g := range []struct {
		pool, pg, osd uint32
		hash, cost    uint64
	}{
		{0, 0, 0, 0xe220a8397b1dcdaf, 196820201465},
		{0, 0, 1, 0x6e789e6aa1b965f4, 1333129186636},
		{1, 0, 0, 0x0dfe6a3aa8908e89, 4610563701145},
		{7, 100, 3, 0xc6c508be085c273b, 401372557303},
		{1, MetaPG, 2, 0xa02102d811ef374c, 744270036136},
		{MetaPG, MetaPG, MetaPG, 0x4464051ae4b83206, 2093768863547},
	} {
		if got := drawHash(g.pool, g.pg, g.osd); got != g.hash {
			t.Errorf("drawHash(%d, %d, %d) = %#016x, want %#016x", g.pool, g.pg, g.osd, got, g.hash)
		}
		if got := drawCost(g.pool, g.pg, g.osd); got != g.cost {
			t.Errorf("drawCost(%d, %d, %d) = %d, want %d", g.pool, g.pg, g.osd, got, g.cost)
		}
	}
}
