package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors a credential check can end in; errors.Is tells them apart.
var (
	// ErrBadCredential: a certificate, key or keyring that does not parse,
	// does not match, or is not signed by the cluster's CA.
	ErrBadCredential = errors.New("auth: bad credential")
	// ErrInvalidEntity: a name that is not TYPE.ID.
	ErrInvalidEntity = errors.New("auth: invalid entity name")
)

// Validity of what the CA signs. Long on purpose: an entity is revoked by
// its record at the mon, not by expiry (see the package comment).
const (
	caValidity   = 20 * 365 * 24 * time.Hour
	certValidity = 10 * 365 * 24 * time.Hour
	// clockSkew backdates NotBefore, so a host whose clock is a little
	// behind the mon's accepts a certificate issued a moment ago.
	clockSkew = time.Hour
)

// ValidateEntity checks the TYPE.ID form of an entity name: a type of
// lower-case letters, then an id of letters, digits, '-', '_' or '.', 128
// bytes at most.
func ValidateEntity(name string) error {
	t, id, ok := strings.Cut(name, ".")
	if !ok || t == "" || id == "" || len(name) > 128 {
		return fmt.Errorf("%w %q: want TYPE.ID, e.g. osd.3", ErrInvalidEntity, name)
	}
	for _, r := range t {
		if r < 'a' || r > 'z' {
			return fmt.Errorf("%w %q: type must be lower-case letters", ErrInvalidEntity, name)
		}
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w %q: id has %q", ErrInvalidEntity, name, r)
		}
	}
	if t == "osd" {
		// An OSD's id is its number, written one way only: "osd.007"
		// would pass for osd.7 where ids are compared as numbers, and
		// outlive its "osd rm 7".
		if n, err := strconv.ParseUint(id, 10, 32); err != nil || strconv.FormatUint(n, 10) != id {
			return fmt.Errorf("%w %q: an OSD's id is its number, as osd.7", ErrInvalidEntity, name)
		}
	}
	return nil
}

// CA is the cluster's certificate authority: it signs every entity's
// certificate. The mon holds it; everyone else holds only its certificate.
type CA struct {
	Cert *x509.Certificate
	Key  ed25519.PrivateKey
}

// NewCA makes a cluster's CA, named after the cluster's fsid.
func NewCA(fsid string) (*CA, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{Organization: []string{"Osprey"}, CommonName: "osprey cluster " + fsid},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs entities only, never another CA
	}
	cert, err := sign(tmpl, tmpl, pub, key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue makes a key pair and a certificate for entity, signed by the CA,
// and returns them as the entity's keyring.
func (ca *CA) Issue(entity string) (*Keyring, error) {
	if err := ValidateEntity(entity); err != nil {
		return nil, err
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{Organization: []string{"Osprey"}, CommonName: entity},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Every entity is a TLS client when it dials and a server when it
		// accepts.
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	cert, err := sign(tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, err
	}
	return &Keyring{Entity: entity, Cert: cert, Key: key, CA: ca.Cert}, nil
}

// sign makes the certificate tmpl describes for pub, signed by parent's
// key.
func sign(tmpl, parent *x509.Certificate, pub ed25519.PublicKey, parentKey ed25519.PrivateKey) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// newSerial is a random 128-bit serial, as RFC 5280 allows (at most 20
// octets, positive).
func newSerial() *big.Int {
	var b [16]byte
	rand.Read(b[:])
	b[0] &= 0x7f
	b[0] |= 0x01 // never zero
	return new(big.Int).SetBytes(b[:])
}

// Serial formats a certificate's serial as the records and "auth ls" show it.
func Serial(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) }

// PEM block types, and the comment before each block that says what it is.
const (
	pemCert = "CERTIFICATE"
	pemKey  = "PRIVATE KEY"
)

// MarshalPEM encodes the CA, its private key included, for the mon's
// store.
func (ca *CA) MarshalPEM() ([]byte, error) {
	k, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n", ca.Cert.Subject.CommonName)
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: ca.Cert.Raw})
	pem.Encode(&b, &pem.Block{Type: pemKey, Bytes: k})
	return b.Bytes(), nil
}

// ParseCA decodes what MarshalPEM wrote.
func ParseCA(data []byte) (*CA, error) {
	certs, key, err := parsePEM(data)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 || key == nil || !certs[0].IsCA {
		return nil, fmt.Errorf("%w: a CA is one CA certificate and its key", ErrBadCredential)
	}
	if pub, ok := certs[0].PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("%w: the CA's key does not match its certificate", ErrBadCredential)
	}
	return &CA{Cert: certs[0], Key: key}, nil
}

// Keyring is one entity's credential: its certificate and private key,
// and the cluster CA's certificate to check peers against.
type Keyring struct {
	Entity string
	Cert   *x509.Certificate
	Key    ed25519.PrivateKey
	CA     *x509.Certificate
}

// MarshalPEM encodes the keyring as a keyring file holds it.
func (k *Keyring) MarshalPEM() ([]byte, error) {
	key, err := x509.MarshalPKCS8PrivateKey(k.Key)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Osprey keyring of %s: keep it secret, it is the entity.\n", k.Entity)
	fmt.Fprintf(&b, "# certificate of %s\n", k.Entity)
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: k.Cert.Raw})
	fmt.Fprintf(&b, "# private key of %s\n", k.Entity)
	pem.Encode(&b, &pem.Block{Type: pemKey, Bytes: key})
	fmt.Fprintf(&b, "# %s\n", k.CA.Subject.CommonName)
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: k.CA.Raw})
	return b.Bytes(), nil
}

// ParseKeyring decodes a keyring file and checks that it holds together:
// one entity certificate whose key is the private key, signed by the one
// CA certificate, and a valid entity name. Anything else is
// ErrBadCredential, never a panic.
func ParseKeyring(data []byte) (*Keyring, error) {
	certs, key, err := parsePEM(data)
	if err != nil {
		return nil, err
	}
	var ca, leaf *x509.Certificate
	for _, c := range certs {
		switch {
		case c.IsCA && ca == nil:
			ca = c
		case !c.IsCA && leaf == nil:
			leaf = c
		default:
			return nil, fmt.Errorf("%w: a keyring holds one entity certificate and one CA certificate", ErrBadCredential)
		}
	}
	if ca == nil || leaf == nil || key == nil {
		return nil, fmt.Errorf("%w: a keyring holds an entity certificate, its private key and the CA certificate", ErrBadCredential)
	}
	pub, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("%w: the private key is not the certificate's", ErrBadCredential)
	}
	entity, err := Verify(ca, leaf, time.Now())
	if err != nil {
		return nil, err
	}
	return &Keyring{Entity: entity, Cert: leaf, Key: key, CA: ca}, nil
}

// parsePEM reads every block of data: certificates, and at most one
// Ed25519 private key.
func parsePEM(data []byte) (certs []*x509.Certificate, key ed25519.PrivateKey, err error) {
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		switch blk.Type {
		case pemCert:
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %v", ErrBadCredential, err)
			}
			certs = append(certs, c)
		case pemKey:
			if key != nil {
				return nil, nil, fmt.Errorf("%w: more than one private key", ErrBadCredential)
			}
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %v", ErrBadCredential, err)
			}
			ek, ok := k.(ed25519.PrivateKey)
			if !ok {
				return nil, nil, fmt.Errorf("%w: the private key is %T, want Ed25519", ErrBadCredential, k)
			}
			key = ek
		default:
			return nil, nil, fmt.Errorf("%w: unexpected PEM block %q", ErrBadCredential, blk.Type)
		}
	}
	if len(bytes.TrimSpace(stripComments(data))) != 0 {
		return nil, nil, fmt.Errorf("%w: text after the last PEM block that is not a comment", ErrBadCredential)
	}
	return certs, key, nil
}

// stripComments drops '#' lines, which keyrings use to say what each
// block is.
func stripComments(b []byte) []byte {
	var out []byte
	for line := range bytes.Lines(b) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// Verify checks that cert was issued by ca for an entity, valid at now,
// and returns the entity's name: the name a peer gets is the one its CA
// signed, never one it claims.
//
// A certificate that passed is remembered (verified), so that the next
// handshake with the same peer skips the CA's signature, an Ed25519
// verification on each side of every handshake: the outcome depends only
// on the two certificates' bytes, which the cache is keyed by, and on the
// time, which is checked again on every hit. Revocation is not Verify's
// business (the caller checks the serial against the entity's record).
func Verify(ca, cert *x509.Certificate, now time.Time) (string, error) {
	key := verifiedKey{ca: sha256.Sum256(ca.Raw), cert: sha256.Sum256(cert.Raw)}
	if name, ok := verified.get(key); ok {
		if !validAt(ca, now) || !validAt(cert, now) {
			return "", fmt.Errorf("%w: x509: certificate has expired or is not yet valid at %v", ErrBadCredential, now.UTC())
		}
		return name, nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots:       pool,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		var other x509.UnknownAuthorityError
		if errors.As(err, &other) {
			// The usual cause: a keyring, or a daemon, of another
			// cluster (each cluster's CA names its fsid).
			return "", fmt.Errorf("%w: %s's certificate was issued by %q, not by %q, the CA this side trusts: a keyring or daemon of another cluster?",
				ErrBadCredential, cert.Subject.CommonName, cert.Issuer.CommonName, ca.Subject.CommonName)
		}
		return "", fmt.Errorf("%w: %v", ErrBadCredential, err)
	}
	name := cert.Subject.CommonName
	if err := ValidateEntity(name); err != nil {
		return "", fmt.Errorf("%w: certificate names %q: %v", ErrBadCredential, name, err)
	}
	verified.put(key, name)
	return name, nil
}

// validAt is x509's validity check of one certificate, as Verify's chain
// check applies it to both.
func validAt(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotBefore) && !now.After(c.NotAfter)
}

// verifiedCerts remembers, up to maxVerified, the certificates Verify
// passed, by the hashes of the certificate and of its CA's, with the
// entity each names. Full, it starts over: a cluster's entities are far
// fewer, and a miss only costs the check again.
type verifiedCerts struct {
	mu sync.Mutex
	m  map[verifiedKey]string
}

type verifiedKey struct{ ca, cert [sha256.Size]byte }

const maxVerified = 4096

var verified verifiedCerts

func (v *verifiedCerts) get(k verifiedKey) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	name, ok := v.m[k]
	return name, ok
}

func (v *verifiedCerts) put(k verifiedKey, name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerified {
		v.m = make(map[verifiedKey]string)
	}
	v.m[k] = name
}

// TLSCertificate is the keyring's certificate and key as crypto/tls takes
// them, for the messenger's handshake.
func (k *Keyring) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{k.Cert.Raw}, PrivateKey: k.Key, Leaf: k.Cert}
}
