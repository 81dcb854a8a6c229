package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestAnotherDaemonBootedAsUsStops: a second daemon boots as osd.0 at
// other addresses (a copy of its data directory started elsewhere, with
// its identity and keyring). The running osd.0 stops, as a Ceph OSD does
// when its map shows it elsewhere: before, both ran as osd.0, shared its
// peers' sessions, and kept the id up with I/O to its PGs hanging once the
// copy died (found by an operator probe).
func TestAnotherDaemonBootedAsUsStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, _ := monCluster(t, 3, 3)
	ctx := t.Context()
	dir := filepath.Join(lc.Dir, "osd.0")
	k, err := auth.LoadKeyring(filepath.Join(dir, "keyring"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ident struct {
		UUID string `json:"uuid"`
		FSID string `json:"fsid"`
	}
	if err := json.Unmarshal(b, &ident); err != nil {
		t.Fatal(err)
	}
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{lc.Mon.Addr()}, Keyring: k, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Boot(ctx, &osdpb.MonBoot{Fsid: ident.FSID, HasId: true, Id: 0, Uuid: ident.UUID,
		PublicAddr: "tcp://127.0.0.1:1", ClusterAddr: "tcp://127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	osd0 := lc.OSDs[0]
	if osd0.ID() != 0 {
		t.Fatalf("lc.OSDs[0] is osd.%d", osd0.ID())
	}
	osdtest.Eventually(t, 20*time.Second, "the running osd.0 stops", func() bool { return osd0.Stopped() != nil })
	if err := osd0.Stopped(); !strings.Contains(err.Error(), "another daemon booted as osd.0 at tcp://127.0.0.1:1") {
		t.Fatalf("stopped with %v", err)
	}
	for _, o := range lc.OSDs[1:] {
		if err := o.Stopped(); err != nil {
			t.Fatalf("osd.%d stopped too: %v", o.ID(), err)
		}
	}
}
