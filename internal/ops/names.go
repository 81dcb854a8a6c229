package ops

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// MultipartBucket holds the parts and upload records of multipart uploads.
// Its name is not a valid bucket name, so no client can create, list or
// delete it.
const MultipartBucket = ".multipart"

// CheckBucketName applies S3's rules for bucket names: 3 to 63 characters
// of lowercase letters, digits, '.' and '-', beginning and ending with a
// letter or digit, no "..", not an IPv4 address, no "xn--" prefix and no
// "-s3alias" suffix.
func CheckBucketName(name string) error {
	bad := func(why string) error { return Errorf(ErrInvalidBucketName.Status, "%q: %s", name, why) }
	if len(name) < 3 || len(name) > 63 {
		return bad("must be 3 to 63 characters long")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return bad("only lowercase letters, digits, '.' and '-' are allowed")
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return bad("must begin and end with a letter or digit")
	}
	if strings.Contains(name, "..") {
		return bad("must not contain \"..\"")
	}
	// Only digits and dots can be an IPv4 address: the usual name is not
	// handed to ParseAddr, whose error for it is an allocation on every
	// op that names a bucket.
	if strings.Trim(name, "0123456789.") == "" {
		if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
			return bad("must not be an IP address")
		}
	}
	if strings.HasPrefix(name, "xn--") || strings.HasSuffix(name, "-s3alias") {
		return bad("reserved prefix or suffix")
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// CheckKey applies the rules for object keys: 1 to MaxKeyLen bytes of valid
// UTF-8 without NUL (the store separates bucket and key with a NUL).
func CheckKey(key string) error {
	switch {
	case key == "":
		return Errorf(ErrInvalidKey.Status, "empty key")
	case len(key) > MaxKeyLen:
		return Errorf(ErrKeyTooLong.Status, "key of %d bytes, the limit is %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return Errorf(ErrInvalidKey.Status, "key is not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return Errorf(ErrInvalidKey.Status, "key contains NUL")
	}
	return nil
}

// Multipart keys. An upload record is the hidden object
// "BUCKET/KEY/UPLOADID" of MultipartBucket, kept in the PG of BUCKET/KEY so
// that the final key's primary owns it; part N of an upload is the hidden
// object "UPLOADID/NNNNN", placed by its own key so parts spread over PGs.
const uploadIDLen = 32

// NewUploadID returns a fresh random upload id (32 hex digits).
func NewUploadID() string { return randomHex(uploadIDLen) }

// randomHex is n random hex digits (n even).
func randomHex(n int) string {
	b := make([]byte, n/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// isHex reports whether s is n hex digits.
func isHex(s string, n int) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == n
}

// CheckUploadID checks an upload id's form.
func CheckUploadID(id string) error {
	if !isHex(id, uploadIDLen) {
		return Errorf(ErrNoSuchUpload.Status, "upload id %q is malformed", id)
	}
	return nil
}

// UploadKey is the hidden key of an upload's record.
func UploadKey(bucket, key, uploadID string) string { return bucket + "/" + key + "/" + uploadID }

// ParseUploadKey splits an upload record's hidden key.
func ParseUploadKey(k string) (bucket, key, uploadID string, ok bool) {
	i := strings.IndexByte(k, '/')
	if i < 0 || len(k) < i+2+uploadIDLen || k[len(k)-uploadIDLen-1] != '/' {
		return "", "", "", false
	}
	bucket, key, uploadID = k[:i], k[i+1:len(k)-uploadIDLen-1], k[len(k)-uploadIDLen:]
	if CheckBucketName(bucket) != nil || CheckKey(key) != nil || CheckUploadID(uploadID) != nil {
		return "", "", "", false
	}
	return bucket, key, uploadID, true
}

// PartKey is the hidden key of part n of an upload.
func PartKey(uploadID string, n uint32) string { return fmt.Sprintf("%s/%05d", uploadID, n) }

// ParsePartKey splits a part's hidden key.
func ParsePartKey(k string) (uploadID string, n uint32, ok bool) {
	if len(k) != uploadIDLen+6 || k[uploadIDLen] != '/' || CheckUploadID(k[:uploadIDLen]) != nil {
		return "", 0, false
	}
	v, err := strconv.ParseUint(k[uploadIDLen+1:], 10, 32)
	if err != nil || v < 1 || v > MaxParts {
		return "", 0, false
	}
	return k[:uploadIDLen], uint32(v), true
}

// PieceKey is the hidden key of piece p (1 to MaxParts) of set set of part
// n of an upload: "UPLOADID/NNNNN.SSSSSSSS.PPPPP", after the part's own
// key, so an upload's listing (and abort) takes its pieces with its parts.
// A part larger than one op (MaxPutSize) is stored in pieces, which its
// record (at PartKey) lists; each upload of the part writes a set of its
// own (NewPieceSet), so one never overwrites the pieces of another.
func PieceKey(uploadID string, n uint32, set string, p uint32) string {
	return fmt.Sprintf("%s/%05d.%s.%05d", uploadID, n, set, p)
}

const pieceSetLen = 8

// NewPieceSet returns a fresh random piece set id (8 hex digits).
func NewPieceSet() string { return randomHex(pieceSetLen) }

// CheckPieceSet checks a piece set id's form.
func CheckPieceSet(set string) error {
	if !isHex(set, pieceSetLen) {
		return Errorf(ErrInvalidArgument.Status, "piece set %q is malformed", set)
	}
	return nil
}

// ParsePieceKey splits a piece's hidden key.
func ParsePieceKey(k string) (uploadID string, n uint32, set string, p uint32, ok bool) {
	const setAt, pAt = uploadIDLen + 7, uploadIDLen + 8 + pieceSetLen
	if len(k) != pAt+5 || k[uploadIDLen] != '/' || k[setAt-1] != '.' || k[pAt-1] != '.' || CheckUploadID(k[:uploadIDLen]) != nil ||
		CheckPieceSet(k[setAt:pAt-1]) != nil {
		return "", 0, "", 0, false
	}
	nv, err1 := strconv.ParseUint(k[uploadIDLen+1:setAt-1], 10, 32)
	pv, err2 := strconv.ParseUint(k[pAt:], 10, 32)
	if err1 != nil || err2 != nil || nv < 1 || nv > MaxParts || pv < 1 || pv > MaxParts {
		return "", 0, "", 0, false
	}
	return k[:uploadIDLen], uint32(nv), k[setAt : pAt-1], uint32(pv), true
}

// IsPartOrPiece reports whether k is the hidden key of a part or a piece.
func IsPartOrPiece(k string) bool {
	if _, _, ok := ParsePartKey(k); ok {
		return true
	}
	_, _, _, _, ok := ParsePieceKey(k)
	return ok
}

// CheckObjectNames checks a (bucket, key) an object op names: a valid
// bucket and key, or a part, piece or upload record of the multipart
// bucket.
func CheckObjectNames(bucket, key string) error {
	if bucket == MultipartBucket {
		if _, _, ok := ParsePartKey(key); ok {
			return nil
		}
		if _, _, _, _, ok := ParsePieceKey(key); ok {
			return nil
		}
		if _, _, _, ok := ParseUploadKey(key); ok {
			return nil
		}
		return Errorf(ErrInvalidKey.Status, "%q is neither a part nor an upload of %s", key, MultipartBucket)
	}
	if err := CheckBucketName(bucket); err != nil {
		return err
	}
	return CheckKey(key)
}

// StoredPG is the PG an object is stored in: its own (placement.PGOf),
// except an upload record, which lives in the PG of the upload's final key.
func StoredPG(pool *osdpb.Pool, bucket, key string) uint32 {
	if bucket == MultipartBucket {
		if b, k, _, ok := ParseUploadKey(key); ok {
			return placement.PGOf(pool, b, k)
		}
	}
	return placement.PGOf(pool, bucket, key)
}

// StoredHeaders are the standard HTTP headers the S3 gateway keeps with
// an object and sends back with it, in an object's user metadata under
// StoredHeaderKey's names: a ":" cannot begin an HTTP header name, so
// they never collide with x-amz-meta-* keys. No other key may begin with
// ":" (the SDK refuses one), so what goes back is these headers alone.
var StoredHeaders = []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language", "Expires"}

// StoredHeaderKey is the user metadata key of stored header name.
func StoredHeaderKey(name string) string { return ":" + strings.ToLower(name) }

// StoredHeaderOf is the header a user metadata key stores, if it is one
// of StoredHeaders' keys.
func StoredHeaderOf(key string) (string, bool) {
	for _, h := range StoredHeaders {
		if key == StoredHeaderKey(h) {
			return h, true
		}
	}
	return "", false
}
