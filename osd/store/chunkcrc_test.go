package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestCheckTakesChunkCRCs: a put to a data file checked with the chunk
// CRCs its messenger computed (CheckOptions.ChunkCRCs) reads no byte of
// its body to check it, and applies and reads back as any other; a list
// that does not match the body is ErrBadDigest; an inline body is
// checked from them too; chunk CRCs of another size are ignored and the
// store checksums the body itself.
func TestCheckTakesChunkCRCs(t *testing.T) {
	const chunk = 64 << 10
	e := newEnv(t, store.Options{ChunkSize: chunk, DataFileThreshold: 256 << 10})
	e.createBucket(1, "b")
	rng := rand.New(rand.NewPCG(5, 6))
	chunkCRCs := func(body []byte, size int) []uint32 {
		var crcs []uint32
		for o := 0; o < len(body); o += size {
			crcs = append(crcs, crc(body[o:min(o+size, len(body))]))
		}
		return crcs
	}
	summedSince := int64(0)
	summed := func() int64 { return e.s.Stats().BodyCRCBytes - summedSince }
	check := func(key string, body []byte, opts store.CheckOptions) (*osdpb.LogEntry, *store.Checked, error) {
		le := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", key), body)
		ck, err := e.s.Check(e.ctx, le, body, opts)
		return le, ck, err
	}

	body := randBytes(rng, 5*chunk+7)
	crcs := chunkCRCs(body, chunk)
	summedSince = e.s.Stats().BodyCRCBytes
	le, ck, err := check("k", body, store.CheckOptions{ChunkCRCs: crcs, ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	if n := summed(); n != 0 {
		t.Fatalf("given its chunk CRCs, the store checksummed %d bytes of the body", n)
	}
	crcs[0] = 0 // the caller's list is its own again once Check returned
	must(t, e.s.ApplyChecked(e.ctx, 1, le, body, ck))
	e.mustRead("b", "k", body)
	e.checkIntegrity()

	for name, bad := range map[string][]uint32{
		"a wrong chunk crc": func() []uint32 { c := chunkCRCs(body, chunk); c[2] ^= 1; return c }(),
		"a chunk too few":   chunkCRCs(body, chunk)[1:],
		"a chunk too many":  append(chunkCRCs(body, chunk), 0),
		"no chunks":         {},
	} {
		if _, _, err := check("bad", body, store.CheckOptions{ChunkCRCs: bad, ChunkSize: chunk}); err == nil {
			t.Fatalf("%s: checked", name)
		} else {
			wantErr(t, err, store.ErrBadDigest)
		}
	}

	for name, tc := range map[string]struct {
		body   []byte
		size   int
		summed int64
	}{
		"another chunk size": {body, 2 * chunk, int64(len(body))},
		"an inline body":     {body[:1000], chunk, 0},
	} {
		summedSince = e.s.Stats().BodyCRCBytes
		le, ck, err := check("other", tc.body, store.CheckOptions{ChunkCRCs: chunkCRCs(tc.body, tc.size), ChunkSize: tc.size})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := summed(); n != tc.summed {
			t.Fatalf("%s: the store checksummed %d bytes of a %d-byte body, want %d", name, n, len(tc.body), tc.summed)
		}
		must(t, e.s.ApplyChecked(e.ctx, 1, le, tc.body, ck))
		e.mustRead("b", "other", slices.Clone(tc.body))
	}
}

// TestChunkCRCsBodyChangedAfterLink: a body that changes after its link
// computed its chunk CRCs (memory trouble between the messenger and the
// store) passes Check, which reads none of it, but never reaches a
// reader: the CRCs the store keeps are the link's, so a read of the
// object fails as corrupt, inline or in a data file, wherever the
// changed byte lies.
func TestChunkCRCsBodyChangedAfterLink(t *testing.T) {
	const chunk = 64 << 10
	e := newEnv(t, store.Options{ChunkSize: chunk, DataFileThreshold: 256 << 10})
	e.createBucket(1, "b")
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		name string
		size int
		at   []int
	}{
		{"inline", 1000, []int{0, 999}},
		{"data file", 5*chunk + 7, []int{0, chunk - 1, 3 * chunk, 5*chunk + 6}},
	} {
		for _, at := range tc.at {
			key := fmt.Sprintf("%s-%d", tc.name, at)
			body := randBytes(rng, tc.size)
			var crcs []uint32
			for o := 0; o < len(body); o += chunk {
				crcs = append(crcs, crc(body[o:min(o+chunk, len(body))]))
			}
			le := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", key), body)
			body[at] ^= 0x20
			ck, err := e.s.Check(e.ctx, le, body, store.CheckOptions{ChunkCRCs: crcs, ChunkSize: chunk})
			if err != nil {
				continue // refused: it never reaches a reader either
			}
			must(t, e.s.ApplyChecked(e.ctx, 1, le, body, ck))
			if _, got, err := e.read("b", key); !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("%s, byte %d changed after the link: read %d bytes, %v; want ErrCorrupt", tc.name, at, len(got), err)
			}
		}
	}
}
