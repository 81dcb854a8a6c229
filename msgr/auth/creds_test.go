package auth

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mustCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("fsid-1")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustIssue(t testing.TB, ca *CA, entity string) *Keyring {
	t.Helper()
	k, err := ca.Issue(entity)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustPEM(t testing.TB, k *Keyring) []byte {
	t.Helper()
	b, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKeyringRoundTrip(t *testing.T) {
	ca := mustCA(t)
	k := mustIssue(t, ca, "client.backup")
	got, err := ParseKeyring(mustPEM(t, k))
	if err != nil {
		t.Fatal(err)
	}
	if got.Entity != "client.backup" || !got.Key.Equal(k.Key) || !got.Cert.Equal(k.Cert) || !got.CA.Equal(ca.Cert) {
		t.Fatalf("round trip changed the keyring: %+v", got)
	}
	name, err := Verify(ca.Cert, got.Cert, time.Now())
	if err != nil || name != "client.backup" {
		t.Fatalf("Verify: %q %v", name, err)
	}

	caPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := ParseCA(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !ca2.Key.Equal(ca.Key) || !ca2.Cert.Equal(ca.Cert) {
		t.Fatal("CA round trip changed it")
	}
	// A certificate the parsed CA issues checks against the original.
	if _, err := Verify(ca.Cert, mustIssue(t, ca2, "osd.3").Cert, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(mustPEM(t, k)); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("a keyring taken for a CA: %v", err)
	}
}

// TestVerifyRemembers: a certificate Verify passed once is remembered by
// its exact bytes and its CA's, never by its name or serial, and its
// validity is checked again at every use.
func TestVerifyRemembers(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	k := mustIssue(t, ca, "osd.7")
	now := time.Now()
	for range 2 {
		if name, err := Verify(ca.Cert, k.Cert, now); err != nil || name != "osd.7" {
			t.Fatalf("Verify: %q %v", name, err)
		}
	}
	if _, err := Verify(ca.Cert, k.Cert, now.Add(11*365*24*time.Hour)); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("a remembered certificate, expired: %v", err)
	}
	if _, err := Verify(ca.Cert, k.Cert, k.Cert.NotBefore.Add(-time.Second)); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("a remembered certificate, not yet valid: %v", err)
	}
	if _, err := Verify(other.Cert, k.Cert, now); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("a remembered certificate against another CA: %v", err)
	}
	// The same certificate with its signature altered: same name, serial
	// and key, other bytes.
	raw := bytes.Clone(k.Cert.Raw)
	raw[len(raw)-1] ^= 1
	forged, err := x509.ParseCertificate(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ca.Cert, forged, now); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("a remembered certificate with another signature: %v", err)
	}
	// Another CA's certificate for the same entity.
	if _, err := Verify(ca.Cert, mustIssue(t, other, "osd.7").Cert, now); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("another CA's certificate of a remembered entity: %v", err)
	}
}

// BenchmarkVerify: checking a peer's certificate, as every handshake does
// on both sides, once it was checked before.
func BenchmarkVerify(b *testing.B) {
	ca := mustCA(b)
	k := mustIssue(b, ca, "osd.1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(ca.Cert, k.Cert, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	k := mustIssue(t, ca, "osd.1")
	if _, err := Verify(other.Cert, k.Cert, time.Now()); !errors.Is(err, ErrBadCredential) || !strings.Contains(err.Error(), "another cluster") {
		t.Fatalf("a certificate of another cluster's CA: %v, want it said", err)
	}
	if _, err := Verify(ca.Cert, k.Cert, time.Now().Add(11*365*24*time.Hour)); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("an expired certificate: %v", err)
	}
	// The CA's own certificate is not an entity.
	if _, err := Verify(ca.Cert, ca.Cert, time.Now()); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("the CA as an entity: %v", err)
	}
	if _, err := ca.Issue("OSD.1"); !errors.Is(err, ErrInvalidEntity) {
		t.Fatalf("bad name issued: %v", err)
	}
}

// TestValidateEntityOSDIDs: an OSD's entity name is its number, written
// one way only; other types take any id of the allowed characters.
func TestValidateEntityOSDIDs(t *testing.T) {
	for _, name := range []string{"osd.0", "osd.7", "osd.4294967295", "client.007", "client.admin", "mon.a", "client.s3-gw_1.x"} {
		if err := ValidateEntity(name); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
	for _, name := range []string{"osd.007", "osd.00", "osd.abc", "osd.-1", "osd.+1", "osd.4294967296", "osd.7.1"} {
		if err := ValidateEntity(name); !errors.Is(err, ErrInvalidEntity) {
			t.Errorf("%s: %v, want ErrInvalidEntity", name, err)
		}
	}
}

func TestParseKeyringRefuses(t *testing.T) {
	ca := mustCA(t)
	k := mustIssue(t, ca, "client.a")
	k2 := mustIssue(t, ca, "client.b")
	other := mustIssue(t, mustCA(t), "client.a")
	mixKey := *k
	mixKey.Key = k2.Key
	foreign := *k
	foreign.CA = other.CA
	good := mustPEM(t, k)
	for name, data := range map[string][]byte{
		"empty":              nil,
		"garbage":            []byte("not a keyring"),
		"key of another":     mustPEM(t, &mixKey),
		"CA of another":      mustPEM(t, &foreign),
		"trailing junk":      append(append([]byte{}, good...), "junk\n"...),
		"two entities":       append(append([]byte{}, good...), mustPEM(t, k2)...),
		"truncated":          good[:len(good)/2],
		"only a certificate": good[:bytes.Index(good, []byte("# private key"))],
	} {
		if _, err := ParseKeyring(data); !errors.Is(err, ErrBadCredential) {
			t.Errorf("%s: %v, want ErrBadCredential", name, err)
		}
	}
}

func TestKeyringFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "client.admin.keyring")
	k := mustIssue(t, mustCA(t), "client.admin")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := k.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("keyring written with mode %04o", st.Mode().Perm())
	}
	got, err := LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Entity != "client.admin" {
		t.Fatalf("loaded %q", got.Entity)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyring(path); !errors.Is(err, ErrKeyringMode) {
		t.Fatalf("a keyring others may read: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("Save left temporary files: %v", ents)
	}
}

// TestKeyringFileIntoSpecial: a keyring written to a path that names no
// regular file (a pipe, as /dev/stdout or /dev/null) is written into it,
// which stays what it was; one written through a symlink replaces the
// link's target, and the link stays; a directory is refused.
func TestKeyringFileIntoSpecial(t *testing.T) {
	dir := t.TempDir()
	data := []byte("keyring bytes\n")
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // until the writer closes it
		got <- b
	}()
	if err := WriteKeyringFile(fifo, data); err != nil {
		t.Fatalf("into a pipe: %v", err)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the pipe after the write: %v, %v", fi.Mode(), err)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("the pipe's reader got %q", b)
	}

	target := filepath.Join(dir, "real.keyring")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.keyring")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyringFile(link, data); err != nil {
		t.Fatalf("through a symlink: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink after the write: %v, %v", fi.Mode(), err)
	}
	if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the link's target: %q, %v", b, err)
	}
	if err := WriteKeyringFile(dir, data); err == nil {
		t.Fatal("a keyring written over a directory")
	}
}

func FuzzParseKeyring(f *testing.F) {
	ca := mustCA(f)
	good := mustPEM(f, mustIssue(f, ca, "client.fuzz"))
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeyring(data)
		if err != nil {
			if !errors.Is(err, ErrBadCredential) && !errors.Is(err, ErrInvalidEntity) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if _, err := Verify(k.CA, k.Cert, time.Now()); err != nil {
			t.Fatalf("parsed a keyring that does not verify: %v", err)
		}
	})
}
