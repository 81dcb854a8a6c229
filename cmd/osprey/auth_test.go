package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/internal/local"
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
	c, err := local.Start(ctx, local.Options{OSDs: 1, Replicas: 1, PGs: 8, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	lc := &localCluster{Cluster: c}
	if err := lc.writeAdminKeyring(ctx); err != nil {
		t.Fatal(err)
	}
	admin, err := auth.LoadKeyring(lc.keyring)
	if err != nil || admin.Entity != "client.admin" {
		t.Fatalf("up's admin keyring: %v %v", admin, err)
	}
	// A restart keeps client.admin's keyring: get-or-create, not a new one.
	if err := lc.writeAdminKeyring(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := auth.LoadKeyring(lc.keyring); err != nil || !again.Cert.Equal(admin.Cert) {
		t.Fatalf("a second writeAdminKeyring changed the keyring: %v", err)
	}

	m := []string{"--mon", c.Mon.Addr()}
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
	if len(entries) != 2 || entries[1].Entity != "client.backup" || entries[1].Caps["mon"] != "" || entries[1].Serial != auth.Serial(k.Cert) {
		t.Fatalf("auth ls: %+v", entries)
	}
	if out, err := cli("auth", "ls"); err != nil || !strings.Contains(out, "client.admin") || !strings.Contains(out, "mon 'allow *' osd 'allow *'") {
		t.Fatalf("auth ls table: %v\n%s", err, out)
	}
	if _, err := cli("auth", "rm", "client.backup"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("auth", "get", "client.backup"); err == nil || !strings.Contains(err.Error(), "NoSuchEntity") {
		t.Fatalf("get after rm: %v", err)
	}

	// Usage mistakes are caught before the mon is asked.
	for _, args := range [][]string{
		{"auth", "add", "backup"},
		{"auth", "add", "client.x", "osd"},
		{"auth", "add", "client.x", "osd", "allow q"},
		{"auth", "get", "client.x", "osd", "allow r"},
		{"auth", "rm"},
	} {
		if _, err := cli(args...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
