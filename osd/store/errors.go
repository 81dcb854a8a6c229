package store

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the Store returns wraps one of these (or an
// I/O error from Pebble) with context, so callers test with errors.Is and map
// the op's answers to osdpb.Status.
var (
	// ErrNoSuchBucket: the bucket record does not exist.
	ErrNoSuchBucket = errors.New("store: no such bucket")
	// ErrNoSuchKey: the object does not exist.
	ErrNoSuchKey = errors.New("store: no such key")
	// ErrBucketExists: OP_CREATE_BUCKET for a bucket that already exists.
	ErrBucketExists = errors.New("store: bucket already exists")
	// ErrInvalidRange: a read range that starts beyond the object.
	ErrInvalidRange = errors.New("store: invalid range")
	// ErrBadDigest: a put's body does not have the size and CRC32C its
	// metadata claims. Nothing is written.
	ErrBadDigest = errors.New("store: bad digest")
	// ErrStaleVersion: a log entry at or below the PG's last version. The
	// caller answers resends from FindRequest; this is never applied twice.
	ErrStaleVersion = errors.New("store: stale version")
	// ErrInvalidKey: an empty bucket or key, or one holding a 0x00 byte,
	// which the key layout reserves as the bucket/key separator.
	ErrInvalidKey = errors.New("store: invalid bucket or key")
	// ErrInvalidArgument: a malformed log entry (no version, unknown kind,
	// a body on a manifest, ...). A caller bug, not an op answer.
	ErrInvalidArgument = errors.New("store: invalid argument")
	// ErrCorrupt: stored bytes failed a checksum or could not be decoded.
	// The concrete error is a *CorruptError.
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrNoSpace: the data disk has no room for the write (see
	// Store.room); deletes still work. IsNoSpace also matches ENOSPC.
	ErrNoSpace = errors.New("store: no space left on the data disk")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("store: closed")
)

// CorruptError reports stored bytes that fail their CRC32C or do not decode.
// The Store returns it instead of the bad bytes, never alongside them.
// errors.Is(err, ErrCorrupt) is true for every *CorruptError.
type CorruptError struct {
	// Bucket and Key name the object, when the damage is in an object.
	Bucket, Key string
	// Chunk is the chunk index, or -1 when the damage is not in a chunk
	// (a head, a log entry, a PG record, or the whole-body digest).
	Chunk int64
	// Detail says what failed.
	Detail string
}

// Error implements error.
func (e *CorruptError) Error() string {
	switch {
	case e.Key != "" && e.Chunk >= 0:
		return fmt.Sprintf("store: corrupt data: %q/%q chunk %d: %s", e.Bucket, e.Key, e.Chunk, e.Detail)
	case e.Key != "" || e.Bucket != "":
		return fmt.Sprintf("store: corrupt data: %q/%q: %s", e.Bucket, e.Key, e.Detail)
	default:
		return "store: corrupt data: " + e.Detail
	}
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// corrupt builds a *CorruptError for record-level damage (not a chunk).
func corrupt(bucket, key, format string, args ...any) *CorruptError {
	return &CorruptError{Bucket: bucket, Key: key, Chunk: -1, Detail: fmt.Sprintf(format, args...)}
}
