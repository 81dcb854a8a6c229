package s3gw

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Cross-Origin Resource Sharing, for pages that call the gateway from a
// browser: a web app that uploads straight to a presigned URL, an S3
// browser in JavaScript. It is the gateway's (Options.CORSOrigins, `osprey
// s3 --cors-origin`), the same for every bucket, as MinIO's
// api.cors_allow_origin: Put/GetBucketCors, S3's per-bucket rules, are not
// implemented. Every method S3 has and any request header are allowed
// from an allowed origin; a signature is still needed for anything but a
// preflight, so CORS only says which sites' scripts may read the answers
// of requests their users (or presigned URLs) could send anyway.

// corsMethods are the methods a preflight may ask for.
const corsMethods = "GET, PUT, POST, DELETE, HEAD"

// corsExposed are the response headers a page's script may read besides
// the CORS-safelisted ones: what the SDKs read (the ETag of a part, for
// CompleteMultipartUpload, above all), and "*" for the rest (user
// metadata), which a browser takes as a wildcard on requests sent
// without cookies, as S3 requests are.
var corsExposed = []string{"ETag, x-amz-request-id, x-amz-id-2, x-amz-version-id, x-amz-delete-marker, " +
	"x-amz-checksum-crc32, x-amz-checksum-crc32c, x-amz-checksum-crc64nvme, x-amz-checksum-sha1, x-amz-checksum-sha256, " +
	"x-amz-checksum-type, x-amz-mp-parts-count, x-amz-storage-class, Content-Range, Accept-Ranges, Content-Disposition, " +
	"Content-Encoding, Content-Language, Last-Modified, Date, *"}

var (
	corsMethodList = strings.Split(corsMethods, ", ")
	corsVary       = []string{"Origin"}
	corsAllowed    = []string{corsMethods}
	wildcard       = []string{"*"}
)

// corsOrigin is an allowed origin: one with no '*' matches itself alone;
// "*" every origin; "https://*.example.com" any with that prefix and
// suffix around at least one character.
type corsOrigin struct {
	prefix, suffix string
	star, any      bool
}

func parseCORSOrigins(list []string) ([]corsOrigin, error) {
	var out []corsOrigin
	for _, o := range list {
		o = strings.TrimSpace(o)
		switch {
		case o == "":
			continue
		case o == "*":
			out = append(out, corsOrigin{any: true, star: true})
			continue
		case strings.Count(o, "*") > 1 || strings.ContainsAny(o, " ,\t"):
			return nil, fmt.Errorf("s3gw: CORS origin %q: an origin (scheme://host[:port]) with at most one '*'", o)
		case !strings.Contains(o, "://") || strings.Contains(o[strings.Index(o, "://")+3:], "/"):
			return nil, fmt.Errorf("s3gw: CORS origin %q: want scheme://host[:port], no path, as a browser's Origin header names it", o)
		}
		pre, suf, star := strings.Cut(o, "*")
		out = append(out, corsOrigin{prefix: strings.ToLower(pre), suffix: strings.ToLower(suf), star: star})
	}
	return out, nil
}

func (c corsOrigin) matches(origin string) bool {
	if c.any {
		return true
	}
	if !c.star {
		return strings.EqualFold(origin, c.prefix)
	}
	return len(origin) > len(c.prefix)+len(c.suffix) &&
		strings.EqualFold(origin[:len(c.prefix)], c.prefix) && strings.EqualFold(origin[len(origin)-len(c.suffix):], c.suffix)
}

// allowedOrigin is what Access-Control-Allow-Origin answers origin: "*"
// for an origin "*" allowed, origin itself for one a rule names, "" for
// one not allowed.
func (g *Gateway) allowedOrigin(origin string) string {
	if origin == "" {
		return ""
	}
	for _, c := range g.cors {
		if c.matches(origin) {
			if c.any {
				return "*"
			}
			return origin
		}
	}
	return ""
}

// corsHeaders sets the CORS headers of a response to a request from a
// page (one with an Origin): who may read it, and what of it.
func (g *Gateway) corsHeaders(h http.Header, r *http.Request) {
	origin := headerOf(r.Header, "Origin")
	h["Vary"] = corsVary // a cache keeps one answer per origin
	allow := g.allowedOrigin(origin)
	if allow == "" {
		return
	}
	if allow == "*" {
		h["Access-Control-Allow-Origin"] = wildcard
	} else {
		h["Access-Control-Allow-Origin"] = []string{allow}
	}
	h["Access-Control-Expose-Headers"] = corsExposed
}

// isPreflight reports whether r is a CORS preflight: an OPTIONS without an
// Authorization header. Its URL may be a presigned one, query and all
// (the browser asks before it sends the PUT): S3 signs no OPTIONS, so
// that query is not checked.
func isPreflight(req *request) bool {
	return req.r.Method == http.MethodOptions && req.r.Header.Get("Authorization") == ""
}

// preflight answers a CORS preflight as S3 answers one for a bucket with
// CORS rules: 200 and what the page may send when its origin and method
// are allowed, else 403 AccessForbidden. corsHeaders set the origin's.
func (g *Gateway) preflight(req *request) error {
	r, h := req.r, req.w.Header()
	delete(h, "Access-Control-Expose-Headers") // a preflight's answer exposes nothing
	if r.Header.Get("Origin") == "" {
		return errf(ErrBadRequest, "insufficient information: the Origin request header is needed")
	}
	method := r.Header.Get("Access-Control-Request-Method")
	if method == "" {
		return errf(ErrBadRequest, "insufficient information: the Access-Control-Request-Method request header is needed")
	}
	if h.Get("Access-Control-Allow-Origin") == "" || !slices.Contains(corsMethodList, method) {
		return errf(ErrAccessForbidden, "CORSResponse: this CORS request is not allowed: the gateway's --cors-origin does not name origin %.200q (or method %.20q is not one of %s)",
			r.Header.Get("Origin"), method, corsMethods)
	}
	h["Access-Control-Allow-Methods"] = corsAllowed
	if v := r.Header.Get("Access-Control-Request-Headers"); v != "" {
		h.Set("Access-Control-Allow-Headers", v) // any request header
	}
	h.Set("Access-Control-Max-Age", "3600")
	h["Vary"] = []string{"Origin, Access-Control-Request-Headers, Access-Control-Request-Method"}
	req.w.WriteHeader(http.StatusOK)
	return nil
}
