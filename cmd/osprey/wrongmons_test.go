package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOSDAgainstAnotherClustersMons: an OSD's data directory, its own
// keyring in it, started against another cluster's mons: refused, naming
// the cluster the directory belongs to, and nothing in it changes.
func TestOSDAgainstAnotherClustersMons(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	x, _ := monCluster(t, 1, 1)
	y, _ := monCluster(t, 1, 1)
	data := filepath.Join(x.Dir, "osd.0")
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(data, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ident, keyring := read("identity.json"), read("keyring")
	_, _, err := run(t, "osd", "--mon", y.Mon.Addr(), "--data", data, "--public", "tcp://127.0.0.1:0", "--cluster", "tcp://127.0.0.1:0")
	fsid := x.OSDs[0].Map().FSID()
	if err == nil || !strings.Contains(err.Error(), fsid) {
		t.Fatalf("osd of cluster %s against another cluster's mons: %v; want the refusal naming %s", fsid, err, fsid)
	}
	t.Log(err)
	if !bytes.Equal(read("identity.json"), ident) || !bytes.Equal(read("keyring"), keyring) {
		t.Fatal("the refused start changed the data directory's identity or keyring")
	}
}
