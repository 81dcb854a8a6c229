package client

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, cut := range [][2]int{{0, 0}, {0, 10}, {10, 10}, {1, 2}, {3, 1 << 16}, {1 << 15, 1 << 16}, {12345, 54321}} {
		a, b := data[:cut[0]], data[cut[0]:cut[1]]
		want := crc32.Checksum(data[:cut[1]], castagnoli)
		if got := ops.CRC32CCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), int64(len(b))); got != want {
			t.Errorf("combine of %d and %d bytes: %08x, want %08x", len(a), len(b), got, want)
		}
	}
	// A manifest's parts combine to the CRC32C of the whole object; a
	// plain object's metadata holds it.
	meta := &osdpb.ObjectMeta{Size: uint64(len(data))}
	for off, n := 0, 0; off < len(data); off += n {
		n = min(len(data)-off, 1+rng.IntN(20000))
		meta.Parts = append(meta.Parts, &osdpb.PartRef{Size: uint64(n), Crc32C: crc32.Checksum(data[off:off+n], castagnoli)})
	}
	if got, want := wholeCRC32C(meta), crc32.Checksum(data, castagnoli); got != want || len(meta.Parts) < 3 {
		t.Errorf("%d parts combine to %08x, want %08x", len(meta.Parts), got, want)
	}
	if got := wholeCRC32C(&osdpb.ObjectMeta{Crc32C: 0x1234}); got != 0x1234 {
		t.Errorf("plain object: %08x", got)
	}
}
