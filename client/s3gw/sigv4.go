package s3gw

import (
	"cmp"
	"crypto/sha256"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/sigv4"
	"golang.org/x/net/http/httpguts"
)

// AWS Signature Version 4, verified as the spec describes it
// (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html):
// a canonical request, the string to sign that hashes it, and an HMAC
// chain from the secret over date, region and service. Only the server's
// side exists here; tests sign with aws-sdk-go-v2's signer, so a mistake
// made twice cannot hide itself.

const (
	sigAlgorithm   = sigv4.Algorithm
	scopeTerminal  = sigv4.ScopeTerminal
	amzDateLayout  = sigv4.AmzDateLayout
	unsignedPay    = "UNSIGNED-PAYLOAD"
	maxClockSkew   = 15 * time.Minute
	maxPresignTime = 7 * 24 * time.Hour
	emptySHA256    = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// sigV4 is what a request's signature claims: from its Authorization
// header or, presigned, from its query.
type sigV4 struct {
	AccessKey     string
	Date          string // the scope's YYYYMMDD
	Region        string
	Service       string
	signedHeaders string // lower case, sorted, joined by ';', as sent
	Signature     string // hex

	presigned bool
	amzDate   time.Time
	expires   time.Duration // presigned only
}

func (s sigV4) scope() string { return string(s.appendScope(nil)) }

func (s sigV4) appendScope(b []byte) []byte { return sigv4.AppendScope(b, s.Date, s.Region, s.Service) }

// parseCredential splits "AKID/20130524/us-east-1/s3/aws4_request".
func parseCredential(v string, s *sigV4) bool {
	// The access key may not contain '/', the rest is fixed: split from
	// the right.
	var parts [5]string
	for i := range 4 {
		var ok bool
		if parts[i], v, ok = strings.Cut(v, "/"); !ok {
			return false
		}
	}
	parts[4] = v
	if parts[0] == "" || parts[4] != scopeTerminal || len(parts[1]) != 8 || parts[2] == "" || parts[3] == "" {
		return false
	}
	if _, err := time.Parse("20060102", parts[1]); err != nil {
		return false
	}
	s.AccessKey, s.Date, s.Region, s.Service = parts[0], parts[1], parts[2], parts[3]
	return true
}

// amzHeaderFaults looks at h's x-amz-* headers once: unsigned is one that
// signed (SignedHeaders, lower case, joined by ';') does not name, and
// repeated one given more than once (repeatedAmz), each "" if there is
// none. S3 refuses an unsigned one, as it must: the headers say what a
// request does (a copy's source, metadata, a condition), and one added on
// the way, to a presigned URL say, would turn it into a request its signer
// never made. Only x-amz-content-sha256 may go unsigned: a presigned
// request's payload is unsigned unless its query signs one, and a header
// request's is its signed canonical request's.
func amzHeaderFaults(h http.Header, signed string) (unsigned, repeated string) {
	for name, vs := range h {
		if len(name) <= len("x-amz-") || !strings.EqualFold(name[:len("x-amz-")], "x-amz-") {
			continue
		}
		if repeated == "" && repeatedAmz(name, len(vs)) {
			repeated = name
		}
		if unsigned != "" || strings.EqualFold(name, "x-amz-content-sha256") {
			continue
		}
		found := false
		for sh := range strings.SplitSeq(signed, ";") {
			if strings.EqualFold(sh, name) {
				found = true
				break
			}
		}
		if !found {
			unsigned = name
		}
	}
	return unsigned, repeated
}

// repeatedAmz reports whether x-amz-* header (or presigned parameter) name,
// given n times, is one that must come once: all but metadata, which S3
// joins. Given twice, one would be checked by its first value and done by
// another, or the other way round.
func repeatedAmz(name string, n int) bool {
	const meta = "x-amz-meta-"
	return n > 1 && !(len(name) > len(meta) && strings.EqualFold(name[:len(meta)], meta))
}

// validSignedHeaders checks "host;range;x-amz-date": lower case, sorted,
// no duplicates, host among them, as the spec requires.
func validSignedHeaders(v string) bool {
	prev, host := "", false
	for h := range strings.SplitSeq(v, ";") {
		if h == "" || !isLower(h) || prev >= h && prev != "" || strings.ContainsAny(h, " \t:") {
			return false
		}
		prev, host = h, host || h == "host"
	}
	return host
}

// isLower reports whether s has no upper-case ASCII letter (a header
// name in SignedHeaders is ASCII, and strings.ToLower would copy it).
func isLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return false
		}
	}
	return true
}

func validSignature(v string) bool {
	if len(v) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// parseAuthorization parses
//
//	AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=<64 hex>
//
// The separators between the three fields are a comma and optional
// spaces; each field must be there exactly once.
func parseAuthorization(h string) (sigV4, error) {
	var s sigV4
	alg, rest, ok := strings.Cut(h, " ")
	if !ok || alg != sigAlgorithm {
		return s, errf(ErrAuthorizationHeaderMalformed, "the authorization header must start with %s", sigAlgorithm)
	}
	var haveCred, haveSH, haveSig bool
	for f := range strings.SplitSeq(rest, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return s, errf(ErrAuthorizationHeaderMalformed, "malformed field %q", f)
		}
		switch name {
		case "Credential":
			if haveCred || !parseCredential(val, &s) {
				return s, errf(ErrAuthorizationHeaderMalformed, "malformed Credential %q", val)
			}
			haveCred = true
		case "SignedHeaders":
			if haveSH || !validSignedHeaders(val) {
				return s, errf(ErrAuthorizationHeaderMalformed, "malformed SignedHeaders %q (lower case, sorted, with host)", val)
			}
			s.signedHeaders, haveSH = val, true
		case "Signature":
			if haveSig || !validSignature(val) {
				return s, errf(ErrAuthorizationHeaderMalformed, "malformed Signature")
			}
			s.Signature, haveSig = val, true
		default:
			return s, errf(ErrAuthorizationHeaderMalformed, "unknown field %q", name)
		}
	}
	if !haveCred || !haveSH || !haveSig {
		return s, errf(ErrAuthorizationHeaderMalformed, "the authorization header needs Credential, SignedHeaders and Signature")
	}
	return s, nil
}

// parsePresigned reads a presigned URL's X-Amz-* query parameters.
func parsePresigned(q url.Values) (sigV4, error) {
	s := sigV4{presigned: true}
	bad := func(format string, args ...any) (sigV4, error) {
		return s, errf(ErrAuthorizationQueryParametersError, format, args...)
	}
	if q.Get("X-Amz-Algorithm") != sigAlgorithm {
		return bad("X-Amz-Algorithm must be %s", sigAlgorithm)
	}
	if !parseCredential(q.Get("X-Amz-Credential"), &s) {
		return bad("malformed X-Amz-Credential")
	}
	s.signedHeaders = q.Get("X-Amz-SignedHeaders")
	if !validSignedHeaders(s.signedHeaders) {
		return bad("malformed X-Amz-SignedHeaders (lower case, sorted, with host)")
	}
	if s.Signature = q.Get("X-Amz-Signature"); !validSignature(s.Signature) {
		return bad("malformed X-Amz-Signature")
	}
	t, err := time.Parse(amzDateLayout, q.Get("X-Amz-Date"))
	if err != nil {
		return bad("malformed X-Amz-Date")
	}
	s.amzDate = t
	secs, err := strconv.ParseInt(q.Get("X-Amz-Expires"), 10, 64)
	if err != nil || secs < 1 || time.Duration(secs)*time.Second > maxPresignTime {
		return bad("X-Amz-Expires must be 1 to %d seconds", int64(maxPresignTime/time.Second))
	}
	s.expires = time.Duration(secs) * time.Second
	return s, nil
}

// canonicalQuery is SigV4's canonical query string of a raw query:
// parameters decoded, then encoded again, sorted by name and value; the
// signature itself left out of a presigned URL's. Malformed escapes are
// an error.
func canonicalQuery(raw string, presigned bool) (string, error) {
	type kv struct{ k, v string }
	var params []kv
	for p := range strings.SplitSeq(raw, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			return "", err
		}
		dv, err := url.QueryUnescape(v)
		if err != nil {
			return "", err
		}
		if presigned && dk == "X-Amz-Signature" {
			continue
		}
		params = append(params, kv{sigv4.Escape(dk, false), sigv4.Escape(dv, false)})
	}
	slices.SortFunc(params, func(a, b kv) int {
		if c := strings.Compare(a.k, b.k); c != 0 {
			return c
		}
		return strings.Compare(a.v, b.v)
	})
	var b strings.Builder
	for i, p := range params {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(p.v)
	}
	return b.String(), nil
}

// headerValue is a signed header's canonical value: its values trimmed,
// inner runs of spaces made one, joined by commas.
// canonicalSigned are the canonical forms of the headers clients sign,
// which a request names in lower case: looked up here, they cost no
// canonicalization per request.
var canonicalSigned = func() map[string]string {
	m := map[string]string{}
	for _, h := range []string{"X-Amz-Date", "X-Amz-Content-Sha256", "X-Amz-Security-Token", "X-Amz-User-Agent",
		"Amz-Sdk-Invocation-Id", "Amz-Sdk-Request", "Content-Type", "Content-Md5", "Content-Encoding", "Range",
		"X-Amz-Decoded-Content-Length", "X-Amz-Trailer", "X-Amz-Copy-Source", "X-Amz-Checksum-Crc32", "X-Amz-Checksum-Crc32c",
		"X-Amz-Sdk-Checksum-Algorithm", "User-Agent"} {
		m[strings.ToLower(h)] = h
	}
	return m
}()

// collapsed reports whether v is already as SigV4 canonicalizes a header
// value: ASCII with no leading, trailing or repeated spaces and no other
// white space (anything else takes the general path, which is exact).
func collapsed(v string) bool {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 0x80 || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r':
			return false
		case c == ' ' && (i == 0 || i == len(v)-1 || v[i-1] == ' '):
			return false
		}
	}
	return true
}

func headerValue(r *http.Request, name string) string {
	switch name {
	case "host":
		return r.Host
	case "content-length":
		if v := r.Header.Get("Content-Length"); v != "" {
			return v
		}
		if r.ContentLength >= 0 && r.Header.Get("Transfer-Encoding") == "" && len(r.TransferEncoding) == 0 {
			return strconv.FormatInt(r.ContentLength, 10)
		}
	case "transfer-encoding":
		return strings.Join(r.TransferEncoding, ",")
	}
	key, ok := canonicalSigned[name]
	if !ok {
		key = http.CanonicalHeaderKey(name)
	}
	vals := r.Header[key]
	if len(vals) == 1 && collapsed(vals[0]) {
		return vals[0] // what the loop below would make of it, without its copies
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ",")
}

// appendCanonicalRequest appends the canonical request of r for s to b,
// with path as the canonical URI and payloadHash as its last line.
func appendCanonicalRequest(b []byte, r *http.Request, s sigV4, path, query, payloadHash string) []byte {
	b = append(b, r.Method...)
	b = append(b, '\n')
	b = append(b, path...)
	b = append(b, '\n')
	b = append(b, query...)
	b = append(b, '\n')
	for h := range strings.SplitSeq(s.signedHeaders, ";") {
		b = append(b, h...)
		b = append(b, ':')
		b = append(b, headerValue(r, h)...)
		b = append(b, '\n')
	}
	b = append(b, '\n')
	b = append(b, s.signedHeaders...)
	b = append(b, '\n')
	return append(b, payloadHash...)
}

// signingKey is the key of one day, region and service, derived once
// per secret and day.
func signingKey(secret string, s sigV4) *sigv4.Key {
	ck := keyScope{secret, s.Date, s.Region, s.Service}
	if k, ok := signingKeys.get(ck); ok {
		return k
	}
	k := sigv4.DeriveKey(secret, s.Date, s.Region, s.Service)
	signingKeys.put(ck, k)
	return k
}

// keyScope is what a signing key is derived from.
type keyScope struct{ secret, date, region, service string }

// signingKeys caches derived signing keys by secret and scope: a key is
// good for its scope's day, and deriving it is four HMACs, as much as
// the rest of a GET's signature check.
var signingKeys = keyCache{max: 4096}

// keyCache is a map that forgets everything when it is full, which is
// enough for keys that change once a day.
type keyCache struct {
	mu  sync.RWMutex
	m   map[keyScope]*sigv4.Key
	max int
}

func (c *keyCache) get(k keyScope) (*sigv4.Key, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

func (c *keyCache) put(k keyScope, v *sigv4.Key) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[keyScope]*sigv4.Key)
	}
	c.m[k] = v
	c.mu.Unlock()
}

// equalHex compares a computed hex signature with the one sent, in time
// that does not depend on where they differ.
func equalHex(want []byte, got string) bool {
	if len(want) != len(got) {
		return false
	}
	var d byte
	for i := range want {
		d |= want[i] ^ got[i]
	}
	return d == 0
}

// authResult is a verified request's identity and what its body must hash
// to.
type authResult struct {
	AccessKey   string
	Identity    Identity
	PayloadHash string // hex SHA-256 the body must have; "" when unsigned
	// Streaming is the x-amz-content-sha256 of an aws-chunked body
	// (streamingSigned, streamingSignedTrailer or streamingUnsignedTrailer),
	// "" otherwise.
	Streaming string
	chunks    *chunkSigner // a signed body's chunk signatures
}

// errTemporaryCredentials refuses a session token: temporary credentials
// come with one, which the gateway never issued; AWS refuses one it cannot
// check too.
var errTemporaryCredentials = errf(ErrInvalidToken, "the provided token is malformed or otherwise invalid: this gateway issues no temporary credentials")

// presignAuthParams are a presigned URL's own x-amz-* query parameters:
// its signature's, not headers of the request it stands for.
var presignAuthParams = []string{"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires",
	"x-amz-signedheaders", "x-amz-signature", "x-amz-security-token", "x-amz-content-sha256"}

// presignedHeaders makes each other x-amz-* query parameter of a verified
// presigned request one of its headers, as S3 does: a presigner may put the
// request's x-amz-* headers (metadata, a storage class, a checksum, a
// condition) in the URL, signed with it, rather than leave the uploader to
// send them (the JavaScript SDK v3's getSignedUrl does, and its default
// x-amz-checksum-crc32 with it). Read from the query, every check and
// refusal a header gets applies; ignored, a presigned PUT stored its
// object without its metadata, or a checksum unchecked, and said 200.
// x-amz-content-sha256 stays verify's: the body's hash, or unsigned. A
// parameter also sent as a header with another value is refused: which
// one the signer meant is unknown.
func presignedHeaders(r *http.Request, q url.Values) error {
	for k, vs := range q {
		if len(k) <= len("x-amz-") || !strings.EqualFold(k[:len("x-amz-")], "x-amz-") {
			continue
		}
		if strings.EqualFold(k, "x-amz-security-token") && k != "X-Amz-Security-Token" {
			return errTemporaryCredentials // in any case of its name
		}
		if slices.ContainsFunc(presignAuthParams, func(a string) bool { return strings.EqualFold(a, k) }) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			// As a header it could not be sent, and metadata by that
			// name would be dropped unsaid.
			return errf(ErrInvalidArgument, "query parameter %.100q is no header name: a presigned URL's x-amz-* parameters are its headers", k)
		}
		name := textproto.CanonicalMIMEHeaderKey(k)
		if repeatedAmz(name, len(vs)) {
			return errf(ErrInvalidArgument, "query parameter %s is given more than once", strings.ToLower(name))
		}
		if have, ok := r.Header[name]; ok && !slices.Equal(have, vs) {
			return errf(ErrInvalidArgument, "%s is both a query parameter and a header of this presigned request, with different values", strings.ToLower(name))
		}
		r.Header[name] = vs
	}
	return nil
}

// claimedAccessKey is the access key r's signature names, whether or not
// it verifies (for the access log of a refused one), at most 128 bytes.
func claimedAccessKey(r *http.Request) string {
	cred := ""
	if _, v, ok := strings.Cut(r.Header.Get("Authorization"), "Credential="); ok {
		cred = v
	} else if r.URL.RawQuery != "" {
		cred = r.URL.Query().Get("X-Amz-Credential")
	}
	if i := strings.IndexAny(cred, "/, "); i >= 0 {
		cred = cred[:i]
	}
	return cred[:min(len(cred), 128)]
}

// verify checks r's signature (header or presigned) at now against creds.
// A presigned request's x-amz-* query parameters become its headers
// (presignedHeaders).
func verify(r *http.Request, creds Credentials, now time.Time) (authResult, error) {
	var q url.Values // nil, which has nothing, for the usual request without a query
	if r.URL.RawQuery != "" {
		q = r.URL.Query()
	}
	authz := r.Header.Get("Authorization")
	var (
		s   sigV4
		err error
	)
	switch {
	case authz != "" && q.Has("X-Amz-Algorithm"):
		return authResult{}, errf(ErrInvalidArgument, "only one auth mechanism allowed")
	case authz != "":
		if strings.HasPrefix(authz, "AWS ") {
			return authResult{}, errf(ErrAccessDenied, "signature version 2 is not supported; sign with AWS4-HMAC-SHA256")
		}
		s, err = parseAuthorization(authz)
	case q.Has("X-Amz-Algorithm"):
		s, err = parsePresigned(q)
	case q.Has("AWSAccessKeyId"):
		return authResult{}, errf(ErrAccessDenied, "signature version 2 is not supported; presign with AWS4-HMAC-SHA256")
	default:
		return authResult{}, errf(ErrAccessDenied, "anonymous access is not allowed: sign the request (AWS Signature Version 4)")
	}
	if err != nil {
		return authResult{}, err
	}
	if s.Service != "s3" {
		return authResult{}, errf(ErrAuthorizationHeaderMalformed, "the credential scope's service must be s3, not %q", s.Service)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if s.presigned {
		amzDate = q.Get("X-Amz-Date")
	} else {
		if d := r.Header.Get("Date"); amzDate == "" && d != "" {
			// The spec's fallback: the Date header, in ISO 8601 in the
			// string to sign. HTTP dates are in GMT, but botocore sends
			// a numeric zone (Python's formatdate: "-0000").
			t, err := parseHTTPDate(d)
			if err != nil {
				return authResult{}, errf(ErrAccessDenied, "malformed Date %q: want an HTTP date such as %q", d, now.UTC().Format(http.TimeFormat))
			}
			amzDate = t.UTC().Format(amzDateLayout)
		}
		if amzDate == "" {
			return authResult{}, errf(ErrAccessDenied, "the request needs an X-Amz-Date (or Date) header")
		}
		if s.amzDate, err = time.Parse(amzDateLayout, amzDate); err != nil {
			return authResult{}, errf(ErrAccessDenied, "malformed X-Amz-Date %q", amzDate)
		}
	}
	if amzDate[:len("20060102")] != s.Date { // amzDate parsed as amzDateLayout
		return authResult{}, errf(ErrSignatureDoesNotMatch, "the credential scope's date %s is not the request's %s", s.Date, amzDate)
	}
	switch {
	case s.presigned && now.After(s.amzDate.Add(s.expires)):
		return authResult{}, errf(ErrAccessDenied, "request has expired")
	case s.presigned && s.amzDate.Sub(now) > maxClockSkew:
		return authResult{}, errf(ErrAccessDenied, "request is not valid yet")
	case !s.presigned && (now.Sub(s.amzDate) > maxClockSkew || s.amzDate.Sub(now) > maxClockSkew):
		return authResult{}, errf(ErrRequestTimeTooSkewed, "the difference between the request time %s and the server's %s is more than 15 minutes",
			s.amzDate.Format(amzDateLayout), now.UTC().Format(amzDateLayout))
	}

	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" && s.presigned {
		// A presigner may sign the body's hash into the URL (the
		// canonical request's last line is then that hash, and the body
		// must have it); most sign none.
		payload = cmp.Or(q.Get("X-Amz-Content-Sha256"), unsignedPay)
	}
	switch {
	case payload == "":
		return authResult{}, errf(ErrInvalidRequest, "missing required header for this request: x-amz-content-sha256")
	case payload == unsignedPay:
	case payload == streamingSigned || payload == streamingSignedTrailer || payload == streamingUnsignedTrailer:
		if s.presigned {
			return authResult{}, errf(ErrInvalidRequest, "a presigned request's body cannot be aws-chunked")
		}
	case strings.HasPrefix(payload, "STREAMING-"):
		return authResult{}, errf(ErrNotImplemented, "x-amz-content-sha256 %s is not supported: send %s, %s, %s, UNSIGNED-PAYLOAD or the body's SHA-256",
			payload, streamingSigned, streamingSignedTrailer, streamingUnsignedTrailer)
	case !validSignature(payload): // 64 hex digits, as a signature
		return authResult{}, errf(ErrInvalidArgument, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a hex SHA-256")
	}

	unsigned, repeated := amzHeaderFaults(r.Header, s.signedHeaders)
	if unsigned != "" {
		return authResult{}, errf(ErrAccessDenied, "there were headers present in the request which were not signed: %.100s (sign every x-amz-* header)", unsigned)
	}
	if r.Header.Get("X-Amz-Security-Token") != "" || q.Get("X-Amz-Security-Token") != "" {
		return authResult{}, errTemporaryCredentials
	}
	if repeated != "" {
		return authResult{}, errf(ErrInvalidArgument, "header %s is given more than once", strings.ToLower(repeated))
	}
	id, err := creds.Lookup(r.Context(), s.AccessKey)
	if err != nil {
		return authResult{}, err
	}
	query, err := canonicalQuery(r.URL.RawQuery, s.presigned)
	if err != nil {
		return authResult{}, errf(ErrSignatureDoesNotMatch, "malformed query: %v", err)
	}
	key := signingKey(id.Secret, s)
	// The canonical URI is the path as the client escaped it for the wire,
	// which for S3 is escaped once with SigV4's rules; a client that
	// escaped it otherwise signed what it sent.
	var pathBuf [2]string
	paths := append(pathBuf[:0], sigv4.Escape(r.URL.Path, true))
	if raw, _, _ := strings.Cut(r.RequestURI, "?"); raw != paths[0] && strings.HasPrefix(raw, "/") {
		paths = append(paths, raw)
	}
	for _, p := range paths {
		var cbuf [1024]byte
		var sbuf [2 * sha256.Size]byte
		var scope [128]byte
		want := sigv4.AppendSignature(sbuf[:0], key, amzDate, s.appendScope(scope[:0]), appendCanonicalRequest(cbuf[:0], r, s, p, query, payload))
		if equalHex(want, s.Signature) {
			if s.presigned {
				if err := presignedHeaders(r, q); err != nil {
					return authResult{}, err
				}
			}
			res := authResult{AccessKey: s.AccessKey, Identity: id}
			switch payload {
			case unsignedPay:
			case streamingSigned, streamingSignedTrailer, streamingUnsignedTrailer:
				res.Streaming = payload
				if payload != streamingUnsignedTrailer {
					res.chunks = &chunkSigner{key: key, amzDate: amzDate, scope: s.scope(), prev: s.Signature}
				}
			default:
				res.PayloadHash = payload
			}
			return res, nil
		}
	}
	return authResult{}, errf(ErrSignatureDoesNotMatch, "the request signature we calculated does not match the signature you provided; check your key and signing method")
}
