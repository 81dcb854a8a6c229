package s3gw

import (
	"math"
	"strconv"
	"strings"
)

// byteRange is one HTTP Range (RFC 9110 14.1.2) as S3 takes it:
// "bytes=first-last", "bytes=first-" (open) or "bytes=-n" (the last n).
type byteRange struct {
	first, last int64 // last -1: to the end
	suffix      int64 // > 0 for "bytes=-n"; first and last unused
	// none is "bytes=-0", the last 0 bytes: a valid range no object can
	// satisfy (RFC 9110 14.1.2).
	none bool
}

// parseRange parses a Range header. ok is false for a header S3 ignores
// (a malformed one, several ranges, another unit): the whole object is
// then sent.
func parseRange(h string) (r byteRange, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return r, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return r, false
	}
	// A number of any length counts, past int64 as the largest: no
	// object is that big, so bytes=0-99999999999999999999 is the whole
	// object (206) and a first byte that large is past the end (416), as
	// on S3, not a malformed header ignored (200).
	num := func(s string) (int64, bool) {
		if s == "" || strings.TrimLeft(s, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return math.MaxInt64, true // all digits: only too large
		}
		return n, true
	}
	if a == "" {
		n, ok := num(b)
		if !ok {
			return r, false
		}
		return byteRange{suffix: n, none: n == 0}, true
	}
	first, ok := num(a)
	if !ok {
		return r, false
	}
	if b == "" {
		return byteRange{first: first, last: -1}, true
	}
	last, ok := num(b)
	if !ok || digitsLess(b, a) { // as numbers, past int64 too
		return r, false
	}
	return byteRange{first: first, last: last}, true
}

// length is how many bytes r asks for from its first, before the
// object's size is known: -1 for to the end (open, or a last byte so far
// off that last-first+1 would overflow: bytes=0-99999999999999999999).
func (r byteRange) length() int64 {
	if r.last < 0 || r.last-r.first == math.MaxInt64 {
		return -1
	}
	return r.last - r.first + 1
}

// resolve gives the offset and length of r within an object of size
// bytes; ok is false when no byte of it exists (InvalidRange).
func (r byteRange) resolve(size int64) (off, n int64, ok bool) {
	if r.none {
		return 0, 0, false
	}
	if r.suffix > 0 {
		if size == 0 {
			return 0, 0, false
		}
		n = min(r.suffix, size)
		return size - n, n, true
	}
	if r.first >= size {
		return 0, 0, false
	}
	last := size - 1
	if r.last >= 0 {
		last = min(r.last, last)
	}
	return r.first, last - r.first + 1, true
}

// digitsLess reports whether the decimal digits a stand for a smaller
// number than b's, at any length.
func digitsLess(a, b string) bool {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}
