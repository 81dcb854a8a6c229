package ops

import (
	"net/netip"
	"strings"
	"unicode/utf8"
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
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return bad("must not be an IP address")
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
