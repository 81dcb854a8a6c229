package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Secure mode seals every frame with AES-GCM, as msgr2's secure mode
// does, with keys from the TLS handshake (Result.SessionKeys). msgr2 uses
// 128-bit keys; these are 256-bit: on this project's x86 hosts (VAES) a
// 64 KiB seal runs about 10% slower than with AES-128 (5.0 against 5.5
// GB/s), a small price for keys that keep a 128-bit margin against
// quantum search, as the hybrid ML-KEM exchange does for the handshake.
//
// Nonces never repeat: each direction has its own key and a 96-bit nonce
// of a 32-bit salt and a 64-bit counter of the Seal calls so far (a frame
// the messenger seals in two parts takes two; msgr's secure.go), the
// construction of TLS 1.3 (RFC 8446 5.3) and the fix of CVE-2020-1759,
// where msgr2 let two sessions share a nonce sequence. A session resumed
// after a reconnect runs a new handshake and gets new keys: a counter
// never restarts under an old key.
//
// Before a key has sealed rekeyFrames messages or rekeyBytes bytes, both
// sides replace it with the next one, derived by HKDF from the current
// secret, as TLS 1.3's KeyUpdate does but without a message: sender and
// receiver count the same messages and bytes, so they rekey at the same
// one. That keeps every key far inside AES-GCM's limits (2^24.5 full
// TLS records per key, RFC 8446 5.5) and the counter far from wrapping.

// ErrOpen: a sealed frame that does not open: tampered, reordered,
// replayed or sealed with another key.
var ErrOpen = errors.New("auth: sealed frame does not open")

const (
	keyLen  = 32 // AES-256
	saltLen = 4
	// DirectionKeyLen is the key material one direction takes from
	// SessionKeys: a secret from which its keys and salts derive.
	DirectionKeyLen = 32
	// Overhead is what sealing adds to a frame: GCM's tag.
	Overhead = 16

	rekeyFrames = 1 << 24
	rekeyBytes  = 1 << 34 // 16 GiB, 2^30 AES blocks
)

// Sealer seals (or, as an opener, opens) the frames of one direction of a
// session, in order. Not safe for concurrent use: one writer seals, one
// reader opens.
type Sealer struct {
	secret []byte
	aead   cipher.AEAD
	salt   [saltLen]byte
	count  uint64 // frames under the current key
	bytes  uint64 // bytes under the current key
	epoch  uint64 // keys used so far, for the derivation
	broken bool   // an Open failed: the direction is done
	// nb holds the nonce: a field, not a local, so that handing it to
	// the AEAD (an interface) costs no allocation per frame.
	nb [12]byte
}

// NewSealer returns the sealer of one direction from its secret
// (DirectionKeyLen bytes of SessionKeys). The peer's opener of that
// direction is NewSealer of the same secret.
func NewSealer(secret []byte) (*Sealer, error) {
	if len(secret) != DirectionKeyLen {
		return nil, fmt.Errorf("auth: a direction secret is %d bytes, not %d", DirectionKeyLen, len(secret))
	}
	s := &Sealer{secret: append([]byte(nil), secret...)}
	if err := s.rekey(); err != nil {
		return nil, err
	}
	return s, nil
}

// rekey derives key number s.epoch and its salt from the secret.
func (s *Sealer) rekey() error {
	info := binary.BigEndian.AppendUint64([]byte("osprey msgr key "), s.epoch)
	km, err := hkdf.Key(sha256.New, s.secret, nil, string(info), keyLen+saltLen)
	if err != nil {
		return err
	}
	block, err := aes.NewCipher(km[:keyLen])
	if err != nil {
		return err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return err
	}
	s.aead = aead
	copy(s.salt[:], km[keyLen:])
	s.count, s.bytes = 0, 0
	s.epoch++
	return nil
}

func (s *Sealer) nonce() []byte {
	copy(s.nb[:], s.salt[:])
	binary.BigEndian.PutUint64(s.nb[4:], s.count)
	return s.nb[:]
}

// advance counts a frame of n bytes and rekeys when the key has done its
// share.
func (s *Sealer) advance(n int) error {
	s.count++
	s.bytes += uint64(n)
	if s.count >= rekeyFrames || s.bytes >= rekeyBytes {
		return s.rekey()
	}
	return nil
}

// Seal appends the sealed plaintext to dst (Overhead bytes longer);
// additional is authenticated but not encrypted (a frame's preamble).
func (s *Sealer) Seal(dst, plaintext, additional []byte) ([]byte, error) {
	out := s.aead.Seal(dst, s.nonce(), plaintext, additional)
	return out, s.advance(len(plaintext))
}

// Open appends the plaintext of sealed to dst. A frame out of order, or
// one sealed under another key or altered, is ErrOpen, and the opener is
// then unusable: the session must end.
func (s *Sealer) Open(dst, sealed, additional []byte) ([]byte, error) {
	if s.broken {
		return nil, ErrOpen
	}
	out, err := s.aead.Open(dst, s.nonce(), sealed, additional)
	if err != nil {
		s.broken = true // never guess where the stream goes on
		return nil, ErrOpen
	}
	return out, s.advance(len(sealed) - Overhead)
}

// Records are k consecutive nonces of a direction, reserved at once so
// that k messages (the records of a large frame, msgr's secure.go) can be
// sealed or opened independently: in any order, on several goroutines at
// a time. They stay under the key current when they were reserved; the
// Sealer counts them as k messages, and rekeys after them if they took
// the key past its share, so sender and receiver, reserving the same
// runs, rekey at the same message. A run may take a key up to k-1
// messages past rekeyFrames, far inside AES-GCM's limits.
type Records struct {
	aead  cipher.AEAD
	salt  [saltLen]byte
	first uint64
	k     int
}

// Reserve takes the next k nonces for records of n bytes in all. On an
// opener that failed, it is ErrOpen.
func (s *Sealer) Reserve(k, n int) (Records, error) {
	if s.broken {
		return Records{}, ErrOpen
	}
	r := Records{aead: s.aead, salt: s.salt, first: s.count, k: k}
	s.count += uint64(k) - 1
	return r, s.advance(n)
}

// Break marks an opener failed, as a failed Open does: a record of a run
// did not open.
func (s *Sealer) Break() { s.broken = true }

// nonce writes record i's nonce into nb: scratch of the caller's, not a
// local, so that handing it to the AEAD costs no allocation.
func (r *Records) nonce(nb *[12]byte, i int) []byte {
	if i < 0 || i >= r.k {
		panic(fmt.Sprintf("auth: record %d of a run of %d", i, r.k))
	}
	copy(nb[:], r.salt[:])
	binary.BigEndian.PutUint64(nb[4:], r.first+uint64(i))
	return nb[:]
}

// Seal appends record i sealed to dst, as Sealer.Seal does. Safe for
// concurrent use with other records' Seal, each with its own nb.
func (r *Records) Seal(nb *[12]byte, dst []byte, i int, plaintext, additional []byte) []byte {
	return r.aead.Seal(dst, r.nonce(nb, i), plaintext, additional)
}

// Open appends the plaintext of record i to dst, as Sealer.Open does; a
// record that does not open is ErrOpen, and the caller must Break the
// opener. Safe for concurrent use with other records' Open.
func (r *Records) Open(nb *[12]byte, dst []byte, i int, sealed, additional []byte) ([]byte, error) {
	out, err := r.aead.Open(dst, r.nonce(nb, i), sealed, additional)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}
