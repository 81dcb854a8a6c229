package mon

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestWriteKeyrings: a cluster's first keyrings land in a directory made
// for them, readable by the owner only, and writing them again (a mon's
// restart, a second mon) hands out the same credentials.
func TestWriteKeyrings(t *testing.T) {
	m := startAuthMon(t)
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

// TestLastAdminKept: an auth command that would leave no entity able to
// run auth commands (mon 'allow *'), the mons' own aside, is refused,
// whether it removes the last one or narrows its caps; with another, it
// passes; of two commands that each take one of the last two away at
// once, one fails. Without auth nothing is refused.
func TestLastAdminKept(t *testing.T) {
	m := startAuthMon(t)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := m.WriteKeyrings(ctx, t.TempDir()); err != nil { // makes client.admin
		t.Fatal(err)
	}
	run := func(c *osdpb.MonCommand) error {
		_, err := m.authCommand(ctx, c, &osdpb.MonCommandReply{}, nil)
		return err
	}
	refused := func(c *osdpb.MonCommand) {
		t.Helper()
		err := run(c)
		if statusOf(err) != osdpb.Status_PRECONDITION_FAILED || !strings.Contains(err.Error(), "client.admin is the last entity that may run auth commands") {
			t.Fatalf("%s %s: %v, want refused as the last admin", c.Prefix, c.Entity, err)
		}
	}
	refused(authCmd("auth rm", "client.admin", nil))
	refused(authCmd("auth caps", "client.admin", map[string]string{"mon": "allow rw", "osd": "allow *"}))
	if err := run(authCmd("auth rotate", "client.admin", nil)); err != nil {
		t.Fatalf("rotating the last admin's key: %v", err)
	}
	if err := run(authCmd("auth caps", "client.admin", map[string]string{"mon": "allow *", "osd": "allow r"})); err != nil {
		t.Fatalf("narrowing the last admin's osd caps: %v", err)
	}
	admins := map[string]string{"mon": "allow *"}
	if err := run(authCmd("auth add", "client.ops", admins)); err != nil {
		t.Fatal(err)
	}
	if err := run(authCmd("auth rm", "client.admin", nil)); err != nil {
		t.Fatalf("removing client.admin with client.ops left: %v", err)
	}
	if err := run(authCmd("auth add", "client.admin", admins)); err != nil {
		t.Fatal(err)
	}
	// Two at once, each removing one of the last two: the one whose
	// transaction comes second finds its keeper changed, and then that
	// it is the last.
	for range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, who := range []string{"client.admin", "client.ops"} {
			wg.Go(func() { errs[i] = run(authCmd("auth rm", who, nil)) })
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("removing the last two admins at once: %v, %v; want one refused", errs[0], errs[1])
		}
		gone := "client.admin"
		if errs[1] == nil {
			gone = "client.ops"
		}
		if err := run(authCmd("auth add", gone, admins)); err != nil {
			t.Fatal(err)
		}
	}
	// Without auth nothing checks caps: nothing to keep.
	e2 := startTestEtcd(t)
	open := startTestMon(t, testConfig(e2, "a"))
	if _, err := open.authCommand(ctx, authCmd("auth add", "client.only", admins), &osdpb.MonCommandReply{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := open.authCommand(ctx, authCmd("auth rm", "client.only", nil), &osdpb.MonCommandReply{}, nil); err != nil {
		t.Fatalf("without auth: %v", err)
	}
}
