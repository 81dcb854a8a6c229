package store

// Value encodings. Every record except a chunk is "sealed": a format byte,
// the payload, and a CRC32C of both, so a flipped bit anywhere in a head, a
// log entry or a PG record is reported as corruption instead of being
// decoded into a plausible wrong value. Chunks carry their CRC32C in front
// (crc, bytes) and are checked against it on every read. Decoders never
// panic on any input (see the fuzz targets) and return plain errors that
// the caller wraps into a *CorruptError naming the record.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	crcc "github.com/ospreystore/osprey/internal/crc32c"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// castagnoli is the CRC32C table; hash/crc32 uses the SSE4.2/ARMv8 CRC
// instructions for it, so checking every chunk on every read is cheap.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// formatV1 is the first byte of every sealed value. A new layout gets a new
// byte, so old and new records can coexist during an upgrade.
const formatV1 = 1

// MaxChunkSize is the largest chunk the Store writes. It bounds a single
// Pebble value (and so the memory one chunk read pins) and is the unit of
// CRC checking: a 4 KiB range read verifies at most two chunks.
const MaxChunkSize = 1 << 20

// formatFileHead is the first byte of a head whose object bytes live in a
// data file rather than in 'D' chunks: the payload is a V1 head's fixed
// fields, one CRC32C per chunk of the file, then the ObjectMeta. Only heads
// use it; every other record is formatV1.
const formatFileHead = 2

// beginSeal starts a sealed value in dst; finishSeal appends the CRC32C.
func beginSeal(dst []byte) ([]byte, int) {
	return beginSealFormat(dst, formatV1)
}

func beginSealFormat(dst []byte, format byte) ([]byte, int) {
	start := len(dst)
	return append(dst, format), start
}

func finishSeal(dst []byte, start int) []byte {
	return binary.BigEndian.AppendUint32(dst, crc32c(dst[start:]))
}

// unseal checks the format byte and CRC and returns the payload.
func unseal(v []byte) ([]byte, error) {
	format, p, err := unsealAny(v)
	if err == nil && format != formatV1 {
		err = fmt.Errorf("unknown record format %d", format)
	}
	return p, err
}

// unsealAny checks the CRC and returns the format byte and the payload.
func unsealAny(v []byte) (byte, []byte, error) {
	if len(v) < 5 {
		return 0, nil, fmt.Errorf("sealed value of %d bytes is too short", len(v))
	}
	body, sum := v[:len(v)-4], binary.BigEndian.Uint32(v[len(v)-4:])
	if got := crc32c(body); got != sum {
		return 0, nil, fmt.Errorf("record crc32c %08x, stored %08x", got, sum)
	}
	return v[0], v[1 : len(v)-4], nil
}

// version is a PG log version as a comparable value.
type version struct{ epoch, seq uint64 }

func versionOf(v *osdpb.Version) version { return version{v.GetEpoch(), v.GetSeq()} }

func (v version) proto() *osdpb.Version { return &osdpb.Version{Epoch: v.epoch, Seq: v.seq} }

func (v version) less(w version) bool {
	return v.epoch < w.epoch || (v.epoch == w.epoch && v.seq < w.seq)
}

func (v version) String() string { return fmt.Sprintf("%d.%d", v.epoch, v.seq) }

func appendVersion(dst []byte, v version) []byte {
	dst = binary.BigEndian.AppendUint64(dst, v.epoch)
	return binary.BigEndian.AppendUint64(dst, v.seq)
}

func readVersion(b []byte) version {
	return version{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
}

// head is the decoded value of an 'O' key: where the object's bytes are and
// what they are. The chunk size is recorded per object so that changing
// Options.ChunkSize never misreads objects written before.
type head struct {
	dataID    uint64 // 0: no chunks (empty object or manifest)
	chunks    uint32
	chunkSize uint32
	pg        uint32
	version   version // the PG version that wrote the object
	meta      *osdpb.ObjectMeta
	// inFile: the bytes are in the data file of dataID, and crcs holds the
	// CRC32C of each of its chunks; otherwise they are 'D' chunks in Pebble.
	inFile bool
	crcs   []uint32
}

const headFixedLen = 8 + 4 + 4 + 4 + 16

func isManifest(m *osdpb.ObjectMeta) bool { return len(m.GetParts()) > 0 }

// chunkCount is how many chunks of chunkSize hold size bytes.
func chunkCount(size uint64, chunkSize uint32) uint64 {
	if size == 0 {
		return 0
	}
	return (size-1)/uint64(chunkSize) + 1
}

// chunkLen is the length of chunk n of the object.
func (h *head) chunkLen(n uint32) int {
	if n+1 < h.chunks {
		return int(h.chunkSize)
	}
	return int(h.meta.GetSize() - uint64(n)*uint64(h.chunkSize))
}

func appendHead(dst []byte, h *head) ([]byte, error) {
	format := byte(formatV1)
	if h.inFile {
		if len(h.crcs) != int(h.chunks) {
			return nil, fmt.Errorf("store: encode head: %d chunk crcs for %d chunks", len(h.crcs), h.chunks)
		}
		format = formatFileHead
	}
	dst, start := beginSealFormat(dst, format)
	dst = binary.BigEndian.AppendUint64(dst, h.dataID)
	dst = binary.BigEndian.AppendUint32(dst, h.chunks)
	dst = binary.BigEndian.AppendUint32(dst, h.chunkSize)
	dst = binary.BigEndian.AppendUint32(dst, h.pg)
	dst = appendVersion(dst, h.version)
	if h.inFile {
		for _, c := range h.crcs {
			dst = binary.BigEndian.AppendUint32(dst, c)
		}
	}
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, h.meta)
	if err != nil {
		return nil, fmt.Errorf("store: encode object meta: %w", err)
	}
	return finishSeal(dst, start), nil
}

// decodeHead decodes and cross-checks a head: a head whose chunk count does
// not match its size would otherwise make a read slice out of range.
func decodeHead(v []byte) (*head, error) {
	format, p, err := unsealAny(v)
	if err != nil {
		return nil, err
	}
	if format != formatV1 && format != formatFileHead {
		return nil, fmt.Errorf("unknown head format %d", format)
	}
	if len(p) < headFixedLen {
		return nil, fmt.Errorf("head payload of %d bytes is too short", len(p))
	}
	h := &head{
		dataID:    binary.BigEndian.Uint64(p),
		chunks:    binary.BigEndian.Uint32(p[8:]),
		chunkSize: binary.BigEndian.Uint32(p[12:]),
		pg:        binary.BigEndian.Uint32(p[16:]),
		version:   readVersion(p[20:]),
		meta:      new(osdpb.ObjectMeta),
		inFile:    format == formatFileHead,
	}
	p = p[headFixedLen:]
	if h.inFile {
		if uint64(h.chunks) > uint64(len(p)/4) {
			return nil, fmt.Errorf("file head with %d chunks has %d bytes left", h.chunks, len(p))
		}
		h.crcs = make([]uint32, h.chunks)
		for i := range h.crcs {
			h.crcs[i] = binary.BigEndian.Uint32(p[4*i:])
		}
		p = p[4*len(h.crcs):]
	}
	if err := proto.Unmarshal(p, h.meta); err != nil {
		return nil, fmt.Errorf("head meta: %w", err)
	}
	switch {
	case isManifest(h.meta) || h.meta.GetSize() == 0:
		if h.dataID != 0 || h.chunks != 0 || h.inFile {
			return nil, fmt.Errorf("head without data names data id %d with %d chunks (file %v)", h.dataID, h.chunks, h.inFile)
		}
	default:
		if h.chunkSize == 0 || h.chunkSize > MaxChunkSize {
			return nil, fmt.Errorf("head chunk size %d out of range", h.chunkSize)
		}
		if h.dataID == 0 {
			return nil, errors.New("head with data has data id 0")
		}
		if want := chunkCount(h.meta.GetSize(), h.chunkSize); uint64(h.chunks) != want {
			return nil, fmt.Errorf("head has %d chunks, size %d needs %d", h.chunks, h.meta.GetSize(), want)
		}
	}
	return h, nil
}

// chunkValueLen is the stored length of a chunk of n bytes.
func chunkValueLen(n int) int { return 4 + n }

// putChunk encodes a chunk value into dst, which has chunkValueLen(len(b)) bytes.
func putChunk(dst, b []byte) {
	binary.BigEndian.PutUint32(dst, crc32c(b))
	copy(dst[4:], b)
}

// decodeChunk checks a chunk's CRC32C and returns its bytes (aliasing v).
func decodeChunk(v []byte) ([]byte, error) {
	if len(v) < 4 {
		return nil, fmt.Errorf("chunk value of %d bytes is too short", len(v))
	}
	b := v[4:]
	if got, want := crc32c(b), binary.BigEndian.Uint32(v); got != want {
		return nil, fmt.Errorf("chunk crc32c %08x, stored %08x", got, want)
	}
	return b, nil
}

// pgInfo is the value of a 'G' key. The log holds every entry with a
// version in (tail, last]; tail is exclusive, as Ceph's log_tail: entries
// at or below it were trimmed or never logged here (backfill).
type pgInfo struct {
	last, tail version
}

func appendPGInfo(dst []byte, g pgInfo) []byte {
	dst, start := beginSeal(dst)
	dst = appendVersion(dst, g.last)
	dst = appendVersion(dst, g.tail)
	return finishSeal(dst, start)
}

func decodePGInfo(v []byte) (pgInfo, error) {
	p, err := unseal(v)
	if err != nil {
		return pgInfo{}, err
	}
	if len(p) != 32 {
		return pgInfo{}, fmt.Errorf("pg info payload of %d bytes, want 32", len(p))
	}
	g := pgInfo{last: readVersion(p), tail: readVersion(p[16:])}
	if g.last.less(g.tail) {
		return pgInfo{}, fmt.Errorf("pg info tail %v beyond last %v", g.tail, g.last)
	}
	return g, nil
}

// appendReqVersion encodes the value of an 'R' key: the version of the log
// entry that answered the request.
func appendReqVersion(dst []byte, v version) []byte {
	dst, start := beginSeal(dst)
	dst = appendVersion(dst, v)
	return finishSeal(dst, start)
}

func decodeReqVersion(v []byte) (version, error) {
	p, err := unseal(v)
	if err != nil {
		return version{}, err
	}
	if len(p) != 16 {
		return version{}, fmt.Errorf("request index payload of %d bytes, want 16", len(p))
	}
	return readVersion(p), nil
}

// appendSealedUint64 encodes one number: the data-id high-water mark, a
// PG's last_epoch_started.
func appendSealedUint64(dst []byte, id uint64) []byte {
	dst, start := beginSeal(dst)
	dst = binary.BigEndian.AppendUint64(dst, id)
	return finishSeal(dst, start)
}

func decodeSealedUint64(v []byte) (uint64, error) {
	p, err := unseal(v)
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("sealed uint64 of %d bytes, want 8", len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// appendProto seals a protobuf message (log entries, bucket records).
func appendProto(dst []byte, m proto.Message) ([]byte, error) {
	dst, start := beginSeal(dst)
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return nil, fmt.Errorf("store: encode %T: %w", m, err)
	}
	return finishSeal(dst, start), nil
}

func decodeLogEntry(v []byte) (*osdpb.LogEntry, error) {
	return decodeProto[osdpb.LogEntry](v, "log entry")
}

func decodeBucket(v []byte) (*osdpb.BucketInfo, error) {
	return decodeProto[osdpb.BucketInfo](v, "bucket record")
}

// decodeProto opens what appendProto sealed: a message of type T, named
// what in errors.
func decodeProto[T any, P interface {
	*T
	proto.Message
}](v []byte, what string) (P, error) {
	p, err := unseal(v)
	if err != nil {
		return nil, err
	}
	m := P(new(T))
	if err := proto.Unmarshal(p, m); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return m, nil
}

// counters are the Store-wide object and byte totals. They live under one
// key updated with Pebble merge operands (deltas), so concurrent Applies on
// different PGs never read-modify-write the same value. files and fileBytes
// count the objects whose bytes are in data files (included in objects and
// bytes too).
type counters struct{ objects, bytes, files, fileBytes int64 }

// countersLen is the encoded size; countersLenV1 the size before data files
// existed (objects and bytes only), still accepted.
const (
	countersLen   = 32
	countersLenV1 = 16
)

func appendCounters(dst []byte, c counters) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.objects))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.bytes))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.files))
	return binary.BigEndian.AppendUint64(dst, uint64(c.fileBytes))
}

func decodeCounters(v []byte) (counters, error) {
	if len(v) != countersLen && len(v) != countersLenV1 {
		return counters{}, fmt.Errorf("counters value of %d bytes, want %d", len(v), countersLen)
	}
	c := counters{objects: int64(binary.BigEndian.Uint64(v)), bytes: int64(binary.BigEndian.Uint64(v[8:]))}
	if len(v) == countersLen {
		c.files, c.fileBytes = int64(binary.BigEndian.Uint64(v[16:])), int64(binary.BigEndian.Uint64(v[24:]))
	}
	return c, nil
}

func (c *counters) add(d counters) {
	c.objects += d.objects
	c.bytes += d.bytes
	c.files += d.files
	c.fileBytes += d.fileBytes
}

// crc32cOfChunks is the CRC32C of a body of size bytes from the CRC32Cs of
// its chunks of chunkSize bytes (the last one the remainder).
func crc32cOfChunks(crcs []uint32, chunkSize uint32, size uint64) uint32 {
	return crcc.OfChunks(crcs, int64(chunkSize), int64(size))
}

// rangeCRC is the CRC32C of bytes [lo, hi) of an object in a data file,
// combined from its chunks' CRC32Cs with no pass over the bytes: known
// when the range starts on a chunk boundary and ends on one or at the
// object's end (a range cut inside a chunk needs the bytes).
func (h *head) rangeCRC(lo, hi uint64) (crc uint32, known bool) {
	cs, size := uint64(h.chunkSize), h.meta.GetSize()
	if !h.inFile || cs == 0 || lo >= hi || lo%cs != 0 || (hi%cs != 0 && hi != size) {
		return 0, false
	}
	first, last := lo/cs, (hi-1)/cs
	return crc32cOfChunks(h.crcs[first:last+1], h.chunkSize, hi-lo), true
}
