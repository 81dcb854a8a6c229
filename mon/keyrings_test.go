package mon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestWriteKeyrings: a cluster's first keyrings land in a directory made
// for them, readable by the owner only, and writing them again (a mon's
// restart, a second mon) hands out the same credentials.
func TestWriteKeyrings(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.NoAuth = false
	m := startTestMon(t, cfg)
	ctx := ctxFor(t, 30*time.Second)
	dir := filepath.Join(t.TempDir(), "not", "there")
	k, err := m.WriteKeyrings(ctx, dir)
	if err != nil {
		t.Fatalf("into a directory that does not exist yet: %v", err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Fatalf("the keyring directory: %v %v", st.Mode(), err)
	}
	for path, want := range map[string]string{k.AdminPath: "client.admin", k.BootstrapOSDPath: "client.bootstrap-osd"} {
		got, err := auth.LoadKeyring(path)
		if err != nil || got.Entity != want {
			t.Fatalf("%s: %v %v", path, got, err)
		}
	}
	again, err := m.WriteKeyrings(ctx, dir)
	if err != nil || !again.Admin.Cert.Equal(k.Admin.Cert) || !again.BootstrapOSD.Cert.Equal(k.BootstrapOSD.Cert) {
		t.Fatalf("writing the keyrings again changed them: %v", err)
	}
	// An operator narrowed client.admin's caps: a mon's next start (which
	// writes them again) hands it out as it is, never refuses to start.
	rep := &osdpb.MonCommandReply{}
	if _, err := m.authCommand(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.admin",
		Caps: map[string]string{"mon": "allow *", "osd": "allow r"}}, rep, nil); err != nil {
		t.Fatal(err)
	}
	narrowed, err := m.WriteKeyrings(ctx, dir)
	if err != nil || !narrowed.Admin.Cert.Equal(k.Admin.Cert) {
		t.Fatalf("writing the keyrings after client.admin's caps changed: %v", err)
	}
}

// TestKeyringFilesFollowRotation: when client.bootstrap-osd's key is
// rotated, on another mon, every mon writes its keyring file again, so
// that the copy an operator takes from a mon's directory for a new OSD
// works (it held the old, refused certificate).
func TestKeyringFilesFollowRotation(t *testing.T) {
	e := startTestEtcd(t)
	cfgA, cfgB := testConfig(e, "a"), testConfig(e, "b")
	cfgA.NoAuth, cfgB.NoAuth = false, false
	a := startTestMon(t, cfgA)
	b := startTestMon(t, cfgB)
	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	k, err := b.WriteKeyrings(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	rep := &osdpb.MonCommandReply{}
	if _, err := a.authCommand(ctx, &osdpb.MonCommand{Prefix: "auth rotate", Entity: "client.bootstrap-osd"}, rep, nil); err != nil {
		t.Fatal(err)
	}
	rotated, err := auth.ParseKeyring(rep.Keyring)
	if err != nil || rotated.Cert.Equal(k.BootstrapOSD.Cert) {
		t.Fatalf("the rotation's keyring: %v", err)
	}
	eventually(t, 20*time.Second, "mon.b's bootstrap keyring file to hold the rotated certificate", func() bool {
		got, err := auth.LoadKeyring(k.BootstrapOSDPath)
		return err == nil && got.Cert.Equal(rotated.Cert)
	})
	if got, err := auth.LoadKeyring(k.AdminPath); err != nil || !got.Cert.Equal(k.Admin.Cert) {
		t.Fatalf("client.admin's file changed with another entity's rotation: %v", err)
	}
}
