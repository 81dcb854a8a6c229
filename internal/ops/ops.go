// Package ops is the vocabulary OSDs and clients share: which msgr message
// type carries which op, how a reply status becomes a typed error and back,
// and the rules for bucket names, keys and sizes. It holds no state and does
// no I/O; it must never import the OSD or its store, so the client SDK can
// use it without pulling in Pebble.
package ops

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// ReplyType is the message type of the reply to a request of type t.
func ReplyType(t osdpb.MsgType) osdpb.MsgType { return t + 1 }

// IsRequest reports whether t is a request type (odd).
func IsRequest(t osdpb.MsgType) bool { return t%2 == 1 }

// Limits on what one op may carry.
const (
	// MaxPutSize is the largest body of one PutObject or UploadPart; a
	// larger object goes by multipart upload. It leaves room under the
	// messenger's MaxMessageSize (MaxMessageSize below) for the front.
	MaxPutSize = 64 << 20
	// MaxMessageSize is what OSD and client messengers accept.
	MaxMessageSize = MaxPutSize + 1<<20
	// MaxKeyLen is S3's limit on a key, in bytes of UTF-8.
	MaxKeyLen = 1024
	// MaxListKeys caps ListObjects' max_keys, as S3 does.
	MaxListKeys = 1000
	// MinPartSize is S3's smallest part but the last of a multipart upload.
	MinPartSize = 5 << 20
	// MaxParts is S3's limit on parts per upload.
	MaxParts = 10000
)

// Error is a non-OK reply status as a Go error. errors.Is matches it
// against the sentinel of its status (ErrNoSuchKey, ...).
type Error struct {
	Status  osdpb.Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return Code(e.Status)
	}
	return Code(e.Status) + ": " + e.Message
}

// Is matches the sentinel error of the same status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Status == e.Status
}

// Retriable reports whether the op may succeed if sent again unchanged.
func (e *Error) Retriable() bool { return Retriable(e.Status) }

// Sentinels for errors.Is.
var (
	ErrNoSuchBucket        = &Error{Status: osdpb.Status_NO_SUCH_BUCKET}
	ErrNoSuchKey           = &Error{Status: osdpb.Status_NO_SUCH_KEY}
	ErrBucketNotEmpty      = &Error{Status: osdpb.Status_BUCKET_NOT_EMPTY}
	ErrBucketAlreadyExists = &Error{Status: osdpb.Status_BUCKET_ALREADY_EXISTS}
	ErrInvalidRange        = &Error{Status: osdpb.Status_INVALID_RANGE}
	ErrInvalidBucketName   = &Error{Status: osdpb.Status_INVALID_BUCKET_NAME}
	ErrKeyTooLong          = &Error{Status: osdpb.Status_KEY_TOO_LONG}
	ErrInvalidKey          = &Error{Status: osdpb.Status_INVALID_KEY}
	ErrEntityTooLarge      = &Error{Status: osdpb.Status_ENTITY_TOO_LARGE}
	ErrEntityTooSmall      = &Error{Status: osdpb.Status_ENTITY_TOO_SMALL}
	ErrInvalidPart         = &Error{Status: osdpb.Status_INVALID_PART}
	ErrInvalidPartOrder    = &Error{Status: osdpb.Status_INVALID_PART_ORDER}
	ErrNoSuchUpload        = &Error{Status: osdpb.Status_NO_SUCH_UPLOAD}
	ErrBadDigest           = &Error{Status: osdpb.Status_BAD_DIGEST}
	ErrInvalidArgument     = &Error{Status: osdpb.Status_INVALID_ARGUMENT}
	ErrInternal            = &Error{Status: osdpb.Status_INTERNAL_ERROR}
	ErrServiceUnavailable  = &Error{Status: osdpb.Status_SERVICE_UNAVAILABLE}
	ErrWrongPrimary        = &Error{Status: osdpb.Status_WRONG_PRIMARY}
	ErrStaleEpoch          = &Error{Status: osdpb.Status_STALE_EPOCH}
	// ErrStorageFull: a write to a PG one of whose OSDs is full. Not
	// Retriable: space comes back only when something is deleted or added,
	// so resending at once would only repeat the answer.
	ErrStorageFull  = &Error{Status: osdpb.Status_STORAGE_FULL}
	ErrNoSuchEntity = &Error{Status: osdpb.Status_NO_SUCH_ENTITY}
	ErrAccessDenied = &Error{Status: osdpb.Status_ACCESS_DENIED}
	ErrEntityExists = &Error{Status: osdpb.Status_ENTITY_EXISTS}
	// ErrPreconditionFailed: a conditional write's condition is false.
	ErrPreconditionFailed = &Error{Status: osdpb.Status_PRECONDITION_FAILED}
	// ErrRequestIDReused: a mon command's request id names another,
	// earlier command (MonCommand.request_id).
	ErrRequestIDReused = &Error{Status: osdpb.Status_REQUEST_ID_REUSED}
)

// Errorf returns an *Error with status s.
func Errorf(s osdpb.Status, format string, args ...any) *Error {
	return &Error{Status: s, Message: fmt.Sprintf(format, args...)}
}

// FromReply returns nil for an OK header, else its *Error.
func FromReply(h *osdpb.ReplyHeader) error {
	if h == nil {
		return &Error{Status: osdpb.Status_INTERNAL_ERROR, Message: "reply without a header"}
	}
	if h.Status == osdpb.Status_OK {
		return nil
	}
	return &Error{Status: h.Status, Message: h.Message}
}

// StatusOf is the reply status for err: OK for nil, the status of an
// *Error, INTERNAL_ERROR for anything else.
func StatusOf(err error) (osdpb.Status, string) {
	if err == nil {
		return osdpb.Status_OK, ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status, e.Message
	}
	return osdpb.Status_INTERNAL_ERROR, err.Error()
}

// Retriable statuses: the OSD could not serve the op now, or the client
// went to the wrong OSD; sending again (after a map refresh) may succeed.
func Retriable(s osdpb.Status) bool {
	switch s {
	case osdpb.Status_SERVICE_UNAVAILABLE, osdpb.Status_WRONG_PRIMARY, osdpb.Status_STALE_EPOCH, osdpb.Status_NOT_LEADER:
		return true
	}
	return false
}

var codes = map[osdpb.Status]string{
	osdpb.Status_OK:                    "OK",
	osdpb.Status_NO_SUCH_BUCKET:        "NoSuchBucket",
	osdpb.Status_NO_SUCH_KEY:           "NoSuchKey",
	osdpb.Status_BUCKET_NOT_EMPTY:      "BucketNotEmpty",
	osdpb.Status_BUCKET_ALREADY_EXISTS: "BucketAlreadyExists",
	osdpb.Status_INVALID_RANGE:         "InvalidRange",
	osdpb.Status_INVALID_BUCKET_NAME:   "InvalidBucketName",
	osdpb.Status_KEY_TOO_LONG:          "KeyTooLongError",
	osdpb.Status_ENTITY_TOO_LARGE:      "EntityTooLarge",
	osdpb.Status_ENTITY_TOO_SMALL:      "EntityTooSmall",
	osdpb.Status_INVALID_PART:          "InvalidPart",
	osdpb.Status_INVALID_PART_ORDER:    "InvalidPartOrder",
	osdpb.Status_NO_SUCH_UPLOAD:        "NoSuchUpload",
	osdpb.Status_BAD_DIGEST:            "BadDigest",
	osdpb.Status_INVALID_ARGUMENT:      "InvalidArgument",
	osdpb.Status_INTERNAL_ERROR:        "InternalError",
	osdpb.Status_SERVICE_UNAVAILABLE:   "ServiceUnavailable",
	osdpb.Status_WRONG_PRIMARY:         "WrongPrimary",
	osdpb.Status_STALE_EPOCH:           "StaleEpoch",
	osdpb.Status_INVALID_KEY:           "InvalidKey",
	osdpb.Status_NOT_LEADER:            "NotLeader",
	osdpb.Status_WRONG_CLUSTER:         "WrongCluster",
	osdpb.Status_STORAGE_FULL:          "StorageFull",  // MinIO's XMinioStorageFull
	osdpb.Status_NO_SUCH_ENTITY:        "NoSuchEntity", // IAM's
	osdpb.Status_ACCESS_DENIED:         "AccessDenied",
	osdpb.Status_ENTITY_EXISTS:         "EntityAlreadyExists", // IAM's
	osdpb.Status_PRECONDITION_FAILED:   "PreconditionFailed",
	osdpb.Status_REQUEST_ID_REUSED:     "RequestIdReused",
}

// FullnessWord is an OSD's fullness in Ceph's words ("nearfull",
// "backfillfull", "full", "failsafe"), "ok" for none.
func FullnessWord(f osdpb.Fullness) string {
	if f == osdpb.Fullness_FULLNESS_NONE {
		return "ok"
	}
	return strings.ToLower(strings.TrimPrefix(f.String(), "FULLNESS_"))
}

// Code is the S3-style error code of s ("NoSuchKey").
func Code(s osdpb.Status) string {
	if c, ok := codes[s]; ok {
		return c
	}
	return fmt.Sprintf("Status(%d)", int32(s))
}
