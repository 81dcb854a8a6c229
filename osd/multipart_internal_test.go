package osd

import (
	"errors"
	"hash/crc32"
	"testing"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestPieceRecord: the record of a part in pieces names this part's
// pieces 1 to k, in order, whose sizes and CRC32Cs make the part's; any
// other is refused (INVALID_ARGUMENT), and a good one keeps the client's
// ETag and the pieces under the part's number.
func TestPieceRecord(t *testing.T) {
	id, set := ops.NewUploadID(), ops.NewPieceSet()
	tab := crc32.MakeTable(crc32.Castagnoli)
	a, b := []byte("first piece"), []byte("second")
	piece := func(p uint32, data []byte) *osdpb.PartRef {
		return &osdpb.PartRef{Key: ops.PieceKey(id, 3, set, p), Size: uint64(len(data)), Crc32C: crc32.Checksum(data, tab), Etag: "e"}
	}
	good := func() *osdpb.UploadRequest {
		return &osdpb.UploadRequest{UploadId: id, PartNumber: 3, Meta: &osdpb.ObjectMeta{Size: uint64(len(a) + len(b)),
			Crc32C: crc32.Checksum(append(append([]byte(nil), a...), b...), tab), Etag: "0123abcd", Parts: []*osdpb.PartRef{piece(1, a), piece(2, b)}}}
	}
	rec, err := pieceRecord(good(), 0)
	if err != nil || rec.Etag != "0123abcd" || rec.Size != uint64(len(a)+len(b)) || len(rec.Parts) != 2 || rec.Parts[1].Number != 3 || rec.MtimeUnixNano == 0 {
		t.Fatalf("a good record: %v %+v", err, rec)
	}
	for _, tc := range []struct {
		what    string
		mutate  func(*osdpb.UploadRequest)
		dataLen int
	}{
		{"bytes with the record", func(*osdpb.UploadRequest) {}, 1},
		{"pieces out of order", func(r *osdpb.UploadRequest) { r.Meta.Parts[0], r.Meta.Parts[1] = r.Meta.Parts[1], r.Meta.Parts[0] }, 0},
		{"another part's piece", func(r *osdpb.UploadRequest) { r.Meta.Parts[1].Key = ops.PieceKey(id, 4, set, 2) }, 0},
		{"another upload's piece", func(r *osdpb.UploadRequest) { r.Meta.Parts[0].Key = ops.PieceKey(ops.NewUploadID(), 3, set, 1) }, 0},
		{"pieces of two sets", func(r *osdpb.UploadRequest) { r.Meta.Parts[1].Key = ops.PieceKey(id, 3, ops.NewPieceSet(), 2) }, 0},
		{"a first piece of another set", func(r *osdpb.UploadRequest) { r.Meta.Parts[0].Key = ops.PieceKey(id, 3, ops.NewPieceSet(), 1) }, 0},
		{"a key that is no piece's", func(r *osdpb.UploadRequest) { r.Meta.Parts[0].Key = ops.PartKey(id, 3) }, 0},
		{"a piece missing", func(r *osdpb.UploadRequest) { r.Meta.Parts = r.Meta.Parts[1:] }, 0},
		{"a size that does not add up", func(r *osdpb.UploadRequest) { r.Meta.Size++ }, 0},
		{"a CRC32C that does not combine", func(r *osdpb.UploadRequest) { r.Meta.Crc32C ^= 1 }, 0},
		{"an empty piece", func(r *osdpb.UploadRequest) { r.Meta.Parts[1].Size = 0 }, 0},
		{"a piece larger than an op", func(r *osdpb.UploadRequest) { r.Meta.Parts[1].Size = ops.MaxPutSize + 1 }, 0},
		{"no ETag", func(r *osdpb.UploadRequest) { r.Meta.Etag = "" }, 0},
	} {
		req := good()
		tc.mutate(req)
		if _, err := pieceRecord(req, tc.dataLen); !errors.Is(err, ops.ErrInvalidArgument) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", tc.what, err)
		}
	}
}
