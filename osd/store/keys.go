package store

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// Key namespaces: the first byte of every key. The byte values are ASCII
// letters only so that a hex dump of the LSM is readable; their relative
// order does not matter, because every scan is bounded to one namespace.
const (
	nsBucket   = 'B' // 'B' bucket                     -> sealed BucketInfo
	nsScrub    = 'C' // 'C' pg(4)                      -> sealed unix nanoseconds of the PG's last deep scrub
	nsData     = 'D' // 'D' dataID(8) chunk(4)         -> crc32c(4) bytes
	nsLES      = 'E' // 'E' pg(4)                      -> sealed last_epoch_started
	nsFresh    = 'F' // 'F'                            -> "": the store is new and the mon not yet told (maps.go)
	nsPG       = 'G' // 'G' pg(4)                      -> sealed pgInfo
	nsLog      = 'L' // 'L' pg(4) epoch(8) seq(8)      -> sealed LogEntry
	nsMap      = 'M' // 'M' epoch(8)                   -> sealed ClusterMap
	nsIDs      = 'N' // 'N'                            -> sealed data-id high-water mark
	nsBackfil  = 'I' // 'I' pg(4)                      -> "": a backfill of the PG is under way, or due (a removed copy)
	nsHead     = 'O' // 'O' bucket 0x00 key            -> sealed head
	nsPGIndex  = 'P' // 'P' pg(4) bucket 0x00 key      -> empty
	nsIncons   = 'Q' // 'Q' pg(4)                      -> sealed PGInconsistent: the PG's last cross-replica scrub
	nsReq      = 'R' // 'R' pg(4) client(8) tid(8)     -> sealed version
	nsStats    = 'S' // 'S' [pg(4)]                    -> counters (merge operands): the store's, a PG's
	nsPending  = 'W' // 'W' dataID(8)                  -> "": chunks written, head not yet; "F": unnamed data file
	nsRemoving = 'X' // 'X' pg(4)                     -> "": the PG's removal is under way (pgremove.go)
)

const (
	dataKeyLen = 1 + 8 + 4
	logKeyLen  = 1 + 4 + 8 + 8
	reqKeyLen  = 1 + 4 + 8 + 8
)

var (
	keyIDs      = []byte{nsIDs}
	keyCounters = []byte{nsStats}
)

// checkName rejects what the key layout cannot hold: an empty name, or a
// 0x00 byte, which separates bucket from key in 'O' and 'P' keys (without
// the check a key "a\x00b" in bucket "x" would alias key "b" in bucket
// "x\x00a"). It also rejects invalid UTF-8, which protobuf string fields
// (LogEntry.Key, ObjectEntry.Key) cannot carry.
func checkName(bucket, key string, needKey bool) error {
	if bucket == "" || strings.IndexByte(bucket, 0) >= 0 || !utf8.ValidString(bucket) {
		return fmt.Errorf("%w: bucket %q: empty, invalid UTF-8 or contains 0x00", ErrInvalidKey, bucket)
	}
	if needKey && (key == "" || strings.IndexByte(key, 0) >= 0 || !utf8.ValidString(key)) {
		return fmt.Errorf("%w: key %q: empty, invalid UTF-8 or contains 0x00", ErrInvalidKey, key)
	}
	return nil
}

func bucketKey(bucket string) []byte {
	return append([]byte{nsBucket}, bucket...)
}

// headPrefix is the prefix of every head key of one bucket.
func headPrefix(bucket string) []byte {
	k := make([]byte, 0, 2+len(bucket))
	k = append(k, nsHead)
	k = append(k, bucket...)
	return append(k, 0)
}

func headKey(bucket, key string) []byte {
	k := make([]byte, 0, 2+len(bucket)+len(key))
	k = append(k, nsHead)
	k = append(k, bucket...)
	k = append(k, 0)
	return append(k, key...)
}

func appendChunkKey(dst []byte, id uint64, chunk uint32) []byte {
	dst = append(dst, nsData)
	dst = binary.BigEndian.AppendUint64(dst, id)
	return binary.BigEndian.AppendUint32(dst, chunk)
}

// putChunkKey writes a chunk key into dst, which has dataKeyLen bytes.
func putChunkKey(dst []byte, id uint64, chunk uint32) {
	dst[0] = nsData
	binary.BigEndian.PutUint64(dst[1:], id)
	binary.BigEndian.PutUint32(dst[9:], chunk)
}

func chunkKey(id uint64, chunk uint32) []byte {
	return appendChunkKey(make([]byte, 0, dataKeyLen), id, chunk)
}

// dataSpan bounds every chunk of one data id: [D id, D id+1).
func dataSpan(id uint64) (lo, hi []byte) {
	lo = append([]byte{nsData}, binary.BigEndian.AppendUint64(nil, id)...)
	return lo, prefixEnd(lo)
}

// pgCountersKey holds PG pg's share of the counters.
func pgCountersKey(pg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsStats}, pg)
}

func pgKey(pg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsPG}, pg)
}

func logPrefix(pg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsLog}, pg)
}

func logKey(pg uint32, v *osdpb.Version) []byte {
	k := make([]byte, 0, logKeyLen)
	k = append(k, nsLog)
	k = binary.BigEndian.AppendUint32(k, pg)
	k = binary.BigEndian.AppendUint64(k, v.GetEpoch())
	return binary.BigEndian.AppendUint64(k, v.GetSeq())
}

// logKeyVersion parses the version out of a log key.
func logKeyVersion(k []byte) (*osdpb.Version, error) {
	if len(k) != logKeyLen || k[0] != nsLog {
		return nil, corrupt("", "", "log key %x: bad shape", k)
	}
	return &osdpb.Version{
		Epoch: binary.BigEndian.Uint64(k[5:13]),
		Seq:   binary.BigEndian.Uint64(k[13:21]),
	}, nil
}

func reqPrefix(pg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsReq}, pg)
}

func reqKey(pg uint32, r *osdpb.ReqID) []byte {
	k := make([]byte, 0, reqKeyLen)
	k = append(k, nsReq)
	k = binary.BigEndian.AppendUint32(k, pg)
	k = binary.BigEndian.AppendUint64(k, r.GetClient())
	return binary.BigEndian.AppendUint64(k, r.GetTid())
}

func pgIndexPrefix(pg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsPGIndex}, pg)
}

func pgIndexKey(pg uint32, bucket, key string) []byte {
	k := make([]byte, 0, 6+len(bucket)+len(key))
	k = append(k, nsPGIndex)
	k = binary.BigEndian.AppendUint32(k, pg)
	k = append(k, bucket...)
	k = append(k, 0)
	return append(k, key...)
}

// splitPGIndexKey returns the bucket and key of a 'P' key.
func splitPGIndexKey(k []byte) (bucket, key string, ok bool) {
	if len(k) < 5 || k[0] != nsPGIndex {
		return "", "", false
	}
	rest := k[5:]
	for i, c := range rest {
		if c == 0 {
			return string(rest[:i]), string(rest[i+1:]), true
		}
	}
	return "", "", false
}

func pendingKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{nsPending}, id)
}

// prefixEnd returns the smallest key greater than every key with prefix p:
// the exclusive upper bound of a prefix scan. Trailing 0xff bytes cannot be
// incremented, so they are dropped first; a prefix of only 0xff bytes has
// no upper bound within its namespace and returns nil (unbounded), which no
// caller reaches because every prefix starts with a namespace letter.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// keyAfter returns the smallest key strictly greater than k.
func keyAfter(k []byte) []byte {
	return append(append(make([]byte, 0, len(k)+1), k...), 0)
}
