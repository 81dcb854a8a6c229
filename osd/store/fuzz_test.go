package store

import (
	"bytes"
	"testing"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Fuzz targets for every decoder of stored bytes: none may panic, each must
// reject garbage, and whatever decodes must be self-consistent (a head's
// chunk lengths add up to its size, fixed records re-encode identically).

// sealed wraps a fuzzed payload in a valid seal, so the fuzzer reaches the
// payload decoders behind the CRC check and not only the check itself.
func sealed(p []byte) []byte {
	dst, start := beginSeal(nil)
	return finishSeal(append(dst, p...), start)
}

func sampleHead() *head {
	return &head{dataID: 9, chunks: 3, chunkSize: 1000, pg: 4, version: version{2, 7},
		meta: &osdpb.ObjectMeta{Size: 2500, Crc32C: 0xdeadbeef, Etag: "e", UserMeta: map[string]string{"a": "b"}}}
}

func addMutations(f *testing.F, valid []byte) {
	f.Add(valid)
	f.Add([]byte{})
	f.Add(valid[:len(valid)/2])
	flipped := bytes.Clone(valid)
	flipped[len(flipped)/2] ^= 1
	f.Add(flipped)
}

func FuzzDecodeHead(f *testing.F) {
	valid, err := appendHead(nil, sampleHead())
	if err != nil {
		f.Fatal(err)
	}
	addMutations(f, valid)
	empty, _ := appendHead(nil, &head{meta: &osdpb.ObjectMeta{}})
	f.Add(empty)
	manifest, _ := appendHead(nil, &head{meta: &osdpb.ObjectMeta{Size: 5, Parts: []*osdpb.PartRef{{Number: 1}}}})
	f.Add(manifest)
	f.Fuzz(func(t *testing.T, v []byte) {
		checkHead(t, v)
		checkHead(t, sealed(v))
	})
}

func checkHead(t *testing.T, v []byte) {
	h, err := decodeHead(v)
	if err != nil || isManifest(h.meta) {
		return
	}
	var total uint64
	for n := range h.chunks {
		l := h.chunkLen(n)
		if l <= 0 || l > int(h.chunkSize) {
			t.Fatalf("chunk %d of %d has length %d (size %d, chunk size %d)", n, h.chunks, l, h.meta.GetSize(), h.chunkSize)
		}
		total += uint64(l)
	}
	if total != h.meta.GetSize() {
		t.Fatalf("chunks hold %d bytes, size %d", total, h.meta.GetSize())
	}
}

func FuzzDecodeChunk(f *testing.F) {
	valid := make([]byte, chunkValueLen(5))
	putChunk(valid, []byte("hello"))
	addMutations(f, valid)
	f.Fuzz(func(t *testing.T, v []byte) {
		b, err := decodeChunk(v)
		if err != nil {
			return
		}
		again := make([]byte, chunkValueLen(len(b)))
		putChunk(again, b)
		if !bytes.Equal(again, v) {
			t.Fatalf("chunk %x re-encodes as %x", v, again)
		}
	})
}

func FuzzDecodePGInfo(f *testing.F) {
	addMutations(f, appendPGInfo(nil, pgInfo{last: version{3, 10}, tail: version{2, 4}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		for _, v := range [][]byte{p, sealed(p)} {
			g, err := decodePGInfo(v)
			if err != nil {
				continue
			}
			if g.last.less(g.tail) {
				t.Fatalf("decoded tail %v beyond last %v", g.tail, g.last)
			}
			if again := appendPGInfo(nil, g); !bytes.Equal(again, v) {
				t.Fatalf("pg info %x re-encodes as %x", v, again)
			}
		}
	})
}

func FuzzDecodeReqVersion(f *testing.F) {
	addMutations(f, appendReqVersion(nil, version{1, 2}))
	f.Fuzz(func(t *testing.T, v []byte) {
		ver, err := decodeReqVersion(v)
		if err != nil {
			return
		}
		if again := appendReqVersion(nil, ver); !bytes.Equal(again, v) {
			t.Fatalf("request index %x re-encodes as %x", v, again)
		}
	})
}

func FuzzDecodeIDMark(f *testing.F) {
	addMutations(f, appendSealedUint64(nil, 4096))
	f.Fuzz(func(t *testing.T, v []byte) {
		id, err := decodeSealedUint64(v)
		if err != nil {
			return
		}
		if again := appendSealedUint64(nil, id); !bytes.Equal(again, v) {
			t.Fatalf("id mark %x re-encodes as %x", v, again)
		}
	})
}

func FuzzDecodeLogEntry(f *testing.F) {
	valid, err := appendProto(nil, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 2}, Kind: osdpb.OpKind_OP_PUT,
		Bucket: "b", Key: "k", Meta: sampleHead().meta, Req: &osdpb.ReqID{Client: 1, Tid: 2}, DroppedParts: []string{"u/00001", "u/00002"}})
	if err != nil {
		f.Fatal(err)
	}
	addMutations(f, valid)
	f.Fuzz(func(t *testing.T, v []byte) {
		decodeLogEntry(v) // must not panic; the seal rejects garbage
		decodeLogEntry(sealed(v))
	})
}

func FuzzDecodeBucket(f *testing.F) {
	valid, err := appendProto(nil, &osdpb.BucketInfo{Name: "b", CreatedUnixNano: 5})
	if err != nil {
		f.Fatal(err)
	}
	addMutations(f, valid)
	f.Fuzz(func(t *testing.T, v []byte) {
		decodeBucket(v)
		decodeBucket(sealed(v))
	})
}

func FuzzDecodeCounters(f *testing.F) {
	f.Add(appendCounters(nil, counters{3, -7, 1, 5}))
	f.Add(appendCounters(nil, counters{3, -7, 0, 0})[:countersLenV1])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, v []byte) {
		c, err := decodeCounters(v)
		if err != nil {
			if len(v) == countersLen || len(v) == countersLenV1 {
				t.Fatalf("rejected a %d-byte value", len(v))
			}
			return
		}
		// A value from before data files (16 bytes) re-encodes with zero
		// file counters appended.
		want := v
		if len(v) == countersLenV1 {
			want = append(bytes.Clone(v), make([]byte, countersLen-countersLenV1)...)
		}
		if again := appendCounters(nil, c); !bytes.Equal(again, want) {
			t.Fatalf("counters %x re-encode as %x", v, again)
		}
		// The merger must accept anything, counting garbage as zero.
		m := &countersMerger{}
		m.add(v)
		m.MergeOlder([]byte("garbage"))
		if out, _, _ := m.Finish(true); !bytes.Equal(out, want) {
			t.Fatalf("merge of %x and garbage gave %x", v, out)
		}
	})
}

func FuzzKeys(f *testing.F) {
	f.Add([]byte{nsPGIndex, 0, 0, 0, 1, 'b', 0, 'k'})
	f.Add(logKey(1, &osdpb.Version{Epoch: 2, Seq: 3}))
	f.Add([]byte{nsLog})
	f.Fuzz(func(t *testing.T, k []byte) {
		if b, key, ok := splitPGIndexKey(k); ok {
			if got := pgIndexKey(0, b, key); !bytes.Equal(got[5:], k[5:]) {
				t.Fatalf("index key %x splits into %q %q", k, b, key)
			}
		}
		if v, err := logKeyVersion(k); err == nil {
			if got := logKey(0, v); !bytes.Equal(got[5:], k[5:]) {
				t.Fatalf("log key %x parses as %v", k, v)
			}
		}
		if end := prefixEnd(k); end != nil && bytes.Compare(end, k) <= 0 {
			t.Fatalf("prefixEnd(%x) = %x is not above it", k, end)
		}
	})
}

func TestCodecRoundTrip(t *testing.T) {
	h := sampleHead()
	v, err := appendHead(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeHead(v)
	if err != nil {
		t.Fatal(err)
	}
	if got.dataID != h.dataID || got.chunks != h.chunks || got.chunkSize != h.chunkSize || got.pg != h.pg ||
		got.version != h.version || got.meta.GetUserMeta()["a"] != "b" || got.meta.GetCrc32C() != 0xdeadbeef {
		t.Fatalf("head round trip: %+v", got)
	}
	for i := range v {
		bad := bytes.Clone(v)
		bad[i] ^= 0x80
		if _, err := decodeHead(bad); err == nil {
			t.Fatalf("a flipped bit at %d went unnoticed", i)
		}
	}
	// A head whose chunk count disagrees with its size is corrupt even with
	// a valid seal: a read would otherwise index past the object.
	h.chunks = 2
	v, _ = appendHead(nil, h)
	if _, err := decodeHead(v); err == nil {
		t.Fatal("inconsistent chunk count accepted")
	}
}

func FuzzCRC32CCombine(f *testing.F) {
	f.Add([]byte("hello"), []byte("world"))
	f.Add([]byte{}, []byte("x"))
	f.Add(bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 3000))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		whole := crc32c(append(bytes.Clone(a), b...))
		if got := ops.CRC32CCombine(crc32c(a), crc32c(b), int64(len(b))); got != whole {
			t.Fatalf("combine %08x, want %08x", got, whole)
		}
		for _, cs := range []uint32{1, 7, 64} {
			body := append(bytes.Clone(a), b...)
			if got := crc32cOfChunks((&Store{}).chunkCRCs(body, cs), cs, uint64(len(body))); got != whole {
				t.Fatalf("chunk size %d: %08x, want %08x", cs, got, whole)
			}
		}
	})
}

func TestCRC32COfChunks(t *testing.T) {
	body := make([]byte, 3<<20+5)
	for i := range body {
		body[i] = byte(i*31 + i>>9)
	}
	for _, cs := range []uint32{MaxChunkSize, 4096, 1000} {
		if got, want := crc32cOfChunks((&Store{}).chunkCRCs(body, cs), cs, uint64(len(body))), crc32c(body); got != want {
			t.Fatalf("chunk size %d: %08x, want %08x", cs, got, want)
		}
	}
	if got := crc32cOfChunks(nil, MaxChunkSize, 0); got != crc32c(nil) {
		t.Fatalf("empty: %08x", got)
	}
}
