package mon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
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
}
