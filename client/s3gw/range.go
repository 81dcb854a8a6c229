package s3gw

import (
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
	num := func(s string) (int64, bool) {
		if s == "" || len(s) > 18 || strings.TrimLeft(s, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
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
	if !ok || last < first {
		return r, false
	}
	return byteRange{first: first, last: last}, true
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
