package s3gw

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/ospreystore/osprey/client"
)

// Conditional requests (RFC 9110 13, as S3 applies them): If-Match,
// If-None-Match, If-Modified-Since and If-Unmodified-Since on GET and
// HEAD, and their x-amz-copy-source-if-* forms on the source of a copy.
// On writes (PutObject, CopyObject's destination, CompleteMultipartUpload)
// If-Match and If-None-Match "*" are S3's conditional writes, which the
// SDK sends to the OSD that checks them atomically with the write; so is
// If-Match on a DELETE (and an object's ETag in DeleteObjects), S3's
// conditional delete.

// ErrPreconditionFailed: a condition of the request is false.
var ErrPreconditionFailed = &Error{Code: "PreconditionFailed", Status: http.StatusPreconditionFailed}

// writeConditions are a write's If-Match and If-None-Match for the SDK
// (client.PutOptions.IfMatch, IfNoneMatch). As on S3, If-None-Match on a
// write takes only "*": another value is NotImplemented, refused rather
// than ignored.
func writeConditions(h http.Header) (ifMatch, ifNoneMatch string, err error) {
	if ifMatch, err = ifMatchOf(h); err != nil {
		return "", "", err
	}
	ifNoneMatch = strings.TrimSpace(strings.Join(h.Values("If-None-Match"), ","))
	if ifNoneMatch != "" && ifNoneMatch != "*" {
		return "", "", errf(ErrNotImplemented, "If-None-Match on a write takes only *, not %.40q", ifNoneMatch)
	}
	return ifMatch, ifNoneMatch, nil
}

// deleteConditions is a DELETE's If-Match for the SDK
// (client.RemoveObjectIf), "" for none. S3 checks an object's last
// modified time and size (x-amz-if-match-last-modified-time,
// x-amz-if-match-size) on directory buckets only: NotImplemented here,
// refused rather than ignored, since a delete done unconditionally would
// remove what the caller meant to keep.
func deleteConditions(h http.Header) (ifMatch string, err error) {
	for _, name := range []string{"X-Amz-If-Match-Last-Modified-Time", "X-Amz-If-Match-Size"} {
		if h.Get(name) != "" {
			return "", errf(ErrNotImplemented, "conditional deletes on %s are not implemented (S3 has them on directory buckets only)", name)
		}
	}
	return ifMatchOf(h)
}

// ifMatchOf is a write's or delete's If-Match, "" for none. One that is
// there but blank is InvalidArgument: taken as none, it would make the
// write or delete unconditional.
func ifMatchOf(h http.Header) (string, error) {
	vs, ok := h["If-Match"]
	if !ok {
		return "", nil
	}
	v := strings.Join(vs, ",")
	if strings.Trim(v, " \t,") == "" {
		return "", errf(ErrInvalidArgument, "an If-Match header without an entity tag")
	}
	return v, nil
}

// remove deletes bucket/key, only if its ETag is one of ifMatch when that
// is not "".
func (g *Gateway) remove(ctx context.Context, bucket, key, ifMatch string) error {
	if ifMatch != "" {
		return g.cl.RemoveObjectIf(ctx, bucket, key, ifMatch)
	}
	return g.cl.RemoveObject(ctx, bucket, key)
}

// condition is the outcome of a request's conditions.
type condition int

const (
	condPass        condition = iota
	condNotModified           // 304 for a GET or HEAD
	condFailed                // 412
)

// evalConditions evaluates the conditional headers named with prefix
// ("" or "X-Amz-Copy-Source-") against info, in RFC 9110's order: If-Match,
// else If-Unmodified-Since, may fail the request; then If-None-Match, else
// If-Modified-Since, may make it not modified. Dates that do not parse are
// ignored, as RFC 9110 says.
func evalConditions(h http.Header, prefix string, info client.ObjectInfo) condition {
	mod := info.LastModified.Truncate(time.Second)
	if v := h.Get(prefix + "If-Match"); v != "" {
		if !etagListHas(v, info.ETag) {
			return condFailed
		}
	} else if t, ok := httpTime(h.Get(prefix + "If-Unmodified-Since")); ok && mod.After(t) {
		return condFailed
	}
	if v := h.Get(prefix + "If-None-Match"); v != "" {
		if etagListHas(v, info.ETag) {
			return condNotModified
		}
	} else if t, ok := httpTime(h.Get(prefix + "If-Modified-Since")); ok && !mod.After(t) {
		return condNotModified
	}
	return condPass
}

// etagListHas reports whether a list of entity tags ("*", or quoted tags
// separated by commas, weak or strong) names etag.
func etagListHas(list, etag string) bool {
	etag = strings.Trim(etag, `"`)
	for tag := range strings.SplitSeq(list, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.Trim(strings.TrimPrefix(tag, "W/"), `"`) == etag {
			return true
		}
	}
	return false
}

func httpTime(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	t, err := parseHTTPDate(v)
	return t, err == nil
}

// httpDateLayouts are the dates clients send beyond net/http's three
// (http.ParseTime): RFC 1123's with a day of one digit, as Java's
// DateTimeFormatter.RFC_1123_DATE_TIME writes days 1 to 9 ("Mon, 7 Dec
// 2026 ..."; a condition net/http cannot read is ignored, so a
// copy-source date guard was dropped on those days), and with a numeric
// zone, as Python's email.utils.formatdate writes ("-0000"). Go's "2"
// reads one or two digits.
var httpDateLayouts = []string{"Mon, 2 Jan 2006 15:04:05 GMT", "Mon, 2 Jan 2006 15:04:05 -0700"}

// parseHTTPDate parses an HTTP date in any form S3 clients send.
func parseHTTPDate(v string) (time.Time, error) {
	t, err := http.ParseTime(v)
	for _, layout := range httpDateLayouts {
		if err == nil {
			break
		}
		t, err = time.Parse(layout, v)
	}
	return t, err
}
