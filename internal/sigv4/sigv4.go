// Package sigv4 holds the parts of AWS Signature Version 4 that the S3
// gateway's check (client/s3gw) and the benchmark's S3 client (bench) share:
// SigV4's URI escaping, the derived signing key and the HMAC of a string
// to sign. Each side builds its own canonical request; both are tested
// against aws-sdk-go-v2's signer, so a mistake here cannot hide behind
// being made on both sides.
//
// It must never hold secrets beyond the keys derived from them, and never
// allocate per signature: it runs on every request of the gateway.
package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

const (
	// Algorithm names SigV4 in an Authorization header and a string to sign.
	Algorithm = "AWS4-HMAC-SHA256"
	// ScopeTerminal ends every credential scope.
	ScopeTerminal = "aws4_request"
	// AmzDateLayout is X-Amz-Date's time format.
	AmzDateLayout = "20060102T150405Z"
)

// Key is the signing key of one secret, day, region and service. Its
// HMACs are pooled: a signature costs no allocation and no rehash of the
// key.
type Key struct {
	b    []byte
	macs sync.Pool // of *mac
}

// mac is a keyed HMAC-SHA256 and the buffers of what it hashes and of its
// sum, which would escape to the heap through the hash.Hash interface if
// they were the caller's.
type mac struct {
	h   hash.Hash
	sts [256]byte
	out [sha256.Size]byte
}

// DeriveKey derives the signing key of secret for date (YYYYMMDD), region
// and service: four HMACs.
func DeriveKey(secret, date, region, service string) *Key {
	k := hmacOnce([]byte("AWS4"+secret), date)
	k = hmacOnce(k, region)
	k = hmacOnce(k, service)
	return NewKey(hmacOnce(k, ScopeTerminal))
}

// NewKey is a Key of already derived bytes.
func NewKey(b []byte) *Key {
	k := &Key{b: b}
	k.macs.New = func() any { return &mac{h: hmac.New(sha256.New, k.b)} }
	return k
}

func hmacOnce(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// Bytes is the derived key. The caller must not change it.
func (k *Key) Bytes() []byte { return k.b }

// AppendMAC appends HMAC-SHA256 of msg under k to dst.
func (k *Key) AppendMAC(dst, msg []byte) []byte {
	m := k.macs.Get().(*mac)
	dst = append(dst, m.sum(msg)...)
	k.macs.Put(m)
	return dst
}

func (m *mac) sum(msg []byte) []byte {
	m.h.Reset()
	m.h.Write(msg)
	return m.h.Sum(m.out[:0])
}

// AppendScope appends the credential scope DATE/REGION/SERVICE/aws4_request.
func AppendScope(dst []byte, date, region, service string) []byte {
	dst = append(dst, date...)
	dst = append(dst, '/')
	dst = append(dst, region...)
	dst = append(dst, '/')
	dst = append(dst, service...)
	dst = append(dst, '/')
	return append(dst, ScopeTerminal...)
}

// AppendSignature appends the hex signature of a canonical request to
// dst: the HMAC under k of the string to sign, which is the algorithm,
// amzDate, the scope and the canonical request's SHA-256.
func AppendSignature(dst []byte, k *Key, amzDate string, scope []byte, canonical []byte) []byte {
	h := sha256.Sum256(canonical)
	m := k.macs.Get().(*mac)
	sts := append(m.sts[:0], Algorithm+"\n"...)
	sts = append(sts, amzDate...)
	sts = append(sts, '\n')
	sts = append(sts, scope...)
	sts = append(sts, '\n')
	sts = hex.AppendEncode(sts, h[:])
	dst = hex.AppendEncode(dst, m.sum(sts))
	k.macs.Put(m)
	return dst
}

// unreserved are the bytes SigV4 leaves as they are in a URI.
func unreserved(c byte, keepSlash bool) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/' && keepSlash
}

// Escape URI-encodes s as SigV4 does: every byte but A-Z a-z 0-9 - . _ ~
// as %XX in upper case hex, and '/' too unless keepSlash.
func Escape(s string, keepSlash bool) string {
	i := 0
	for i < len(s) && unreserved(s[i], keepSlash) {
		i++
	}
	if i == len(s) {
		return s // the usual key: nothing to escape, nothing to copy
	}
	return string(AppendEscape(append(make([]byte, 0, len(s)+16), s[:i]...), s[i:], keepSlash))
}

// AppendEscape appends s, escaped as Escape does, to dst.
func AppendEscape(dst []byte, s string, keepSlash bool) []byte {
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c, keepSlash) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexd[c>>4], hexd[c&15])
	}
	return dst
}
