package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr/auth"
)

// TestAuthCLI drives `osprey auth` against a cluster's mon as an operator
// would, and `osprey up`'s client.admin keyring.
func TestAuthCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	c := osdtest.StartLocal(t, local.Options{OSDs: 1, Replicas: 1, PGs: 8, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	adminPath := c.KeyringPath("client.admin")
	admin, err := auth.LoadKeyring(adminPath)
	if err != nil || admin.Entity != "client.admin" {
		t.Fatalf("the cluster's admin keyring: %v %v", admin, err)
	}
	// A restart keeps client.admin's keyring: get-or-create, not a new one.
	if again, err := c.Mon.WriteKeyring(ctx, adminPath, "client.admin", mon.AdminCaps); err != nil || !again.Cert.Equal(admin.Cert) {
		t.Fatalf("writing client.admin's keyring again changed it: %v", err)
	}

	m := []string{"--mon", c.Mon.Addr(), "--keyring", adminPath}
	cli := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := run(t, append(args, m...)...)
		return out, err
	}
	path := filepath.Join(t.TempDir(), "backup.keyring")
	if out, err := cli("auth", "get-or-create", "client.backup", "mon", "allow r", "osd", "allow rw bucket=backups", "-o", path); err != nil || !strings.Contains(out, path) {
		t.Fatalf("get-or-create -o: %v %q", err, out)
	}
	k, err := auth.LoadKeyring(path)
	if err != nil || k.Entity != "client.backup" || !k.CA.Equal(admin.CA) {
		t.Fatalf("written keyring: %v %v", k, err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("keyring mode %04o", st.Mode().Perm())
	}
	// Without -o the keyring is printed: the same one.
	out, err := cli("auth", "get", "client.backup")
	if err != nil {
		t.Fatal(err)
	}
	if printed, err := auth.ParseKeyring([]byte(out)); err != nil || !printed.Cert.Equal(k.Cert) {
		t.Fatalf("auth get printed another keyring: %v", err)
	}
	// Other caps for an existing entity: refused, and nothing changes.
	if _, err := cli("auth", "get-or-create", "client.backup", "osd", "allow *"); err == nil || !strings.Contains(err.Error(), "exists with caps") {
		t.Fatalf("get-or-create with other caps: %v", err)
	}
	if out, err := cli("auth", "caps", "client.backup", "osd", "allow r", "osd", "allow w bucket=b"); err != nil || !strings.Contains(out, "osd 'allow r, allow w bucket=b'") {
		t.Fatalf("auth caps: %v %q", err, out)
	}
	out, err = cli("auth", "ls", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var entries []mon.AuthEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatal(err)
	}
	// up's admin and bootstrap keys, the mon's own, the OSD's (made by
	// its bootstrap key), and ours.
	var names []string
	for _, e := range entries {
		names = append(names, e.Entity)
	}
	if !slices.Equal(names, []string{"client.admin", "client.backup", "client.bootstrap-osd", "mon.a", "osd.0"}) ||
		entries[1].Caps["mon"] != "" || entries[1].Serial != auth.Serial(k.Cert) {
		t.Fatalf("auth ls: %+v", entries)
	}
	if out, err := cli("auth", "ls"); err != nil || !strings.Contains(out, "client.admin") || !strings.Contains(out, "mon 'allow *' osd 'allow *'") {
		t.Fatalf("auth ls table: %v\n%s", err, out)
	}
	// A command rerun with the request id of a run that timed out is
	// applied once: the rerun prints the key pair the first run made.
	rerun := []string{"auth", "s3-key", "add", "client.backup", "--request-id", "00112233445566778899aabbccddeeff"}
	first, err := cli(rerun...)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cli(rerun...); err != nil || again != first {
		t.Fatalf("s3-key add rerun with its request id: %v %q, want %q", err, again, first)
	}
	if out, err := cli("auth", "get", "client.backup"); err != nil || strings.Count(out, "# S3 key of client.backup") != 1 {
		t.Fatalf("after s3-key add and its rerun: %v\n%s", err, out)
	}
	// With -o the S3 secret goes to the file with the keyring, not to the
	// terminal, and the file still parses.
	withS3 := filepath.Join(t.TempDir(), "backup-s3.keyring")
	if out, err := cli("auth", "get", "client.backup", "-o", withS3); err != nil || strings.Contains(out, "secret") {
		t.Fatalf("auth get -o printed %q (%v), want no secret", out, err)
	}
	if b, err := os.ReadFile(withS3); err != nil || strings.Count(string(b), "# S3 key of client.backup") != 1 {
		t.Fatalf("auth get -o wrote %q (%v), want the S3 key in it", b, err)
	}
	if k2, err := auth.LoadKeyring(withS3); err != nil || !k2.Cert.Equal(k.Cert) {
		t.Fatalf("the keyring written with its S3 keys: %v", err)
	}
	// A rotate whose file cannot be written fails before the mon rotates:
	// the old keyring still works.
	if _, err := cli("auth", "rotate", "client.backup", "-o", filepath.Join(t.TempDir(), "missing", "x.keyring")); err == nil {
		t.Fatal("auth rotate -o into a missing directory succeeded")
	}
	if out, err := cli("auth", "get", "client.backup"); err != nil {
		t.Fatal(err)
	} else if now, err := auth.ParseKeyring([]byte(out)); err != nil || !now.Cert.Equal(k.Cert) {
		t.Fatalf("after a rotate that could not write its file the keyring changed: %v", err)
	}
	// The OSD commands say what they did not need to change, and a
	// weight beyond CRUSH's limit is refused.
	if out, err := cli("osd", "in", "0"); err != nil || !strings.Contains(out, "nothing to change (osd.0 already in)") {
		t.Fatalf("osd in of an OSD in: %v %q", err, out)
	}
	if _, err := cli("osd", "reweight", "0", "1e300"); exitCode(err) != exitUsage {
		t.Fatalf("osd reweight 0 1e300: %v, want a usage error", err)
	}
	var res struct {
		Command string   `json:"command"`
		Changed []uint32 `json:"changed"`
		Epoch   uint64   `json:"epoch"`
	}
	if out, err := cli("osd", "in", "0", "--json"); err != nil || json.Unmarshal([]byte(out), &res) != nil ||
		res.Command != "osd in" || res.Changed == nil || len(res.Changed) != 0 || res.Epoch == 0 {
		t.Fatalf("osd in --json: %v %q, %+v", err, out, res)
	}
	// The OSD checks what a client may do: a read-only key may list but
	// not make a bucket; the admin may.
	roPath := filepath.Join(t.TempDir(), "ro.keyring")
	if _, err := cli("auth", "get-or-create", "client.ro", "mon", "allow r", "osd", "allow r", "-o", roPath); err != nil {
		t.Fatal(err)
	}
	ro := []string{"--mon", c.Mon.Addr(), "--keyring", roPath}
	if _, _, err := run(t, append([]string{"ls"}, ro...)...); err != nil {
		t.Fatalf("ls with osd 'allow r': %v", err)
	}
	if _, _, err := run(t, append([]string{"mb", "ro-bucket"}, ro...)...); err == nil || !strings.Contains(err.Error(), "client.ro may not write bucket ro-bucket") {
		t.Fatalf("mb with osd 'allow r': %v", err)
	}
	if _, err := cli("mb", "admin-bucket"); err != nil {
		t.Fatalf("mb as client.admin: %v", err)
	}
	// A key scoped to one bucket lists that bucket alone, as S3's
	// ListBuckets lists a user's own.
	photosPath := filepath.Join(t.TempDir(), "photos.keyring")
	if _, err := cli("auth", "get-or-create", "client.photos", "mon", "allow r", "osd", "allow rw bucket=photos", "-o", photosPath); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("mb", "photos"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, "ls", "--mon", c.Mon.Addr(), "--keyring", photosPath); err != nil || !strings.Contains(out, "photos") || strings.Contains(out, "admin-bucket") {
		t.Fatalf("ls with osd 'allow rw bucket=photos': %v\n%s", err, out)
	}
	// A benchmark whose entity is removed while it runs stops at the
	// first refusal, instead of spinning on refusals for the rest of its
	// duration at full speed.
	benchPath := filepath.Join(t.TempDir(), "bench.keyring")
	if _, err := cli("auth", "get-or-create", "client.bench", "mon", "allow r", "osd", "allow *", "-o", benchPath); err != nil {
		t.Fatal(err)
	}
	benchDone := make(chan error, 1)
	go func() {
		_, _, err := run(t, "bench", "obj", "--seeds", strings.Join(c.Seeds(), ","), "--keyring", benchPath, "--bucket", "benchb",
			"--size", "4KiB", "--op", "put", "--concurrency", "2", "--duration", "60s", "--warmup", "0s", "--no-ceiling", "--no-cleanup")
		benchDone <- err
	}()
	osdtest.Eventually(t, 30*time.Second, "the benchmark writing", func() bool {
		out, err := cli("ls", "benchb")
		return err == nil && strings.TrimSpace(out) != ""
	})
	if _, err := cli("auth", "rm", "client.bench"); err != nil {
		t.Fatal(err)
	}
	if err := <-benchDone; err == nil || !strings.Contains(err.Error(), "stopped: ") {
		t.Fatalf("bench obj after its entity was removed: %v, want it stopped by the refusal", err)
	}
	// Without a keyring the cluster refuses the session, and says so.
	if _, _, err := run(t, "ls", "--mon", c.Mon.Addr(), "--keyring", "none"); err == nil || !strings.Contains(err.Error(), "authentication refused") {
		t.Fatalf("ls without a keyring: %v", err)
	}

	if _, err := cli("auth", "rm", "client.backup"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("auth", "get", "client.backup"); err == nil || !strings.Contains(err.Error(), "NoSuchEntity") {
		t.Fatalf("get after rm: %v", err)
	}

	// osd '' takes every cap away (caps with no pair at all is a usage
	// error, below).
	if out, err := cli("auth", "caps", "client.ro", "osd", ""); err != nil || !strings.Contains(out, "client.ro caps: (none)") {
		t.Fatalf("auth caps client.ro osd '': %v %q", err, out)
	}

	// Usage mistakes are caught before the mon is asked.
	for _, args := range [][]string{
		{"auth", "add", "backup"},
		{"auth", "add", "client.x", "osd"},
		{"auth", "add", "client.x", "osd", "allow q"},
		{"auth", "get", "client.x", "osd", "allow r"},
		{"auth", "caps", "client.admin"},
		{"auth", "rm"},
		{"auth", "s3-key", "add", "client.x", "--request-id", "0011"},
		{"auth", "s3-key", "add", "client.x", "--request-id", "not hex"},
		{"auth", "ls", "--mon", "bogus"},
		{"auth", "ls", "--mon", "tcp://127.0.0.1:99999"},
	} {
		if _, err := cli(args...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
