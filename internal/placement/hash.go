package placement

import (
	"math/bits"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// The hashes below decide where every object lives. Changing any constant or
// step moves (nearly) every object in every cluster, so the golden tests in
// hash_test.go pin them; a change there is a data migration, not a refactor.

const (
	fnvOffset64 = 0xcbf29ce484222325
	fnvPrime64  = 0x100000001b3
	// golden64 is 2^64/phi, the usual odd constant for spreading small
	// integers (OSD ids) across 64 bits before a mix.
	golden64 = 0x9e3779b97f4a7c15
)

// mix64 is the splitmix64 finalizer (Stafford's "Mix13"): a bijection on
// uint64 with full avalanche. FNV-1a alone mixes its last bytes poorly into
// the low bits that `mod pg_count` keeps, so every hash ends with it.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// ObjectHash is the stable 64-bit hash of an object's name: FNV-1a 64 over
// the bucket's length (8 bytes, little-endian), the bucket, then the key,
// followed by the splitmix64 finalizer. The length prefix makes the
// encoding unambiguous ("ab"+"c" and "a"+"bc" differ); the key needs none
// because it comes last.
// It allocates nothing and is the same on every platform and in every
// process (unlike hash/maphash, which is seeded per process).
func ObjectHash(bucket, key string) uint64 {
	h := uint64(fnvOffset64)
	n := uint64(len(bucket))
	for range 8 {
		h ^= n & 0xff
		h *= fnvPrime64
		n >>= 8
	}
	for i := 0; i < len(bucket); i++ {
		h ^= uint64(bucket[i])
		h *= fnvPrime64
	}
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	return mix64(h)
}

// PGOf returns the placement group of the object (bucket, key) in pool:
// ObjectHash(bucket, key) mod pool.pg_count, as DESIGN.md fixes it. Clients
// and OSDs compute it alike, so a client goes straight to the PG's primary.
// The result is below pg_count, so it is never MetaPG.
//
// REQUIRES: pool comes from a validated Map (pg_count >= 1). A nil pool or a
// pg_count of 0 yields PG 0 rather than a panic.
func PGOf(pool *osdpb.Pool, bucket, key string) uint32 {
	n := uint64(pool.GetPgCount())
	if n == 0 {
		return 0
	}
	return uint32(ObjectHash(bucket, key) % n)
}

// drawHash is the straw2 lottery ticket of OSD osd for PG pg of pool. The
// pool takes part so that two pools with the same PG count do not put their
// PGs on the same OSDs. The two mix64 rounds keep tickets of one PG
// independent across OSD ids, and distinct (mix64 is a bijection).
func drawHash(pool, pg, osd uint32) uint64 {
	h := mix64(uint64(pool)<<32 | uint64(pg))
	return mix64(h ^ (uint64(osd)+1)*golden64)
}

// Straw2 draws are ln(u)/weight with u uniform in (0, 1]. u has drawBits
// bits: u = x / 2^drawBits with x in [1, 2^drawBits].
//
// NB: the logarithm is computed in fixed point with integer arithmetic, not
// with math.Log. math.Log is assembly on amd64 and pure Go elsewhere, and Go
// may fuse multiply-adds on arm64, ppc64 and s390x, so float logarithms can
// differ in the last bit between a client and an OSD on different hardware;
// two OSDs whose draws straddle that bit would then be ranked differently.
// Integer log2 is bit-identical everywhere, and the only float step left,
// one IEEE division by the weight, is correctly rounded on every platform.
const (
	drawBits    = 48
	logFracBits = 40 // fraction bits of log2Fixed; 48<<40 < 2^53, exact in a float64
)

// log2Fixed returns log2(x) in fixed point with logFracBits fraction bits,
// rounded down (up to a unit or two in the last place), by the classic
// bit-by-bit squaring method.
//
// REQUIRES: x >= 1.
func log2Fixed(x uint64) uint64 {
	n := bits.Len64(x) - 1
	y := x << (63 - n) // x / 2^n in Q1.63, in [1, 2)
	r := uint64(n) << logFracBits
	// Each step squares y; if y^2 >= 2 the next bit is 1 and y^2 is halved.
	// Branch-free, since the bits are random and a mispredicted branch per
	// bit would cost more than the multiply.
	for i := logFracBits - 1; i >= 0; i-- {
		hi, lo := bits.Mul64(y, y) // y^2 in Q2.126
		b := hi >> 63              // y^2 >= 2
		s := (b ^ 1) & 1           // shift back to Q1.63 unless halving
		y = hi<<s | lo>>63&s
		r |= b << uint(i)
	}
	return r
}

// drawCost is -log2(u) in fixed point for OSD osd in PG pg of pool: the
// straw2 draw before dividing by the weight, negated so that smaller wins.
// Its scale (log2 instead of ln, the fixed-point unit) is a positive
// constant factor, which does not change the ranking.
func drawCost(pool, pg, osd uint32) uint64 {
	x := drawHash(pool, pg, osd)>>(64-drawBits) + 1 // [1, 2^drawBits]
	return drawBits<<logFracBits - log2Fixed(x)
}
