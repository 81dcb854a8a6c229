package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
)

// TestSecureCluster: a cluster whose networks require secure mode serves
// a client that offers it (a put replicated over the sealed cluster
// network and read back), and refuses one that offers only crc, saying
// why.
func TestSecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	secure := []msgr.Mode{msgr.ModeSecure}
	c := osdtest.StartLocal(t, local.Options{OSDs: 2, Replicas: 2, PGs: 8, WithMon: true, Dir: t.TempDir(),
		ClusterModes: secure, ServiceModes: secure, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	admin, err := auth.LoadKeyring(c.KeyringPath("client.admin"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(ctx, client.Options{Mon: []string{c.Mon.Addr()}, Keyring: admin, Modes: secure,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	body := bytes.Repeat([]byte("sealed "), 100<<10)
	if err := cl.MakeBucket(ctx, "sealed"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutObject(ctx, "sealed", "k", bytes.NewReader(body), int64(len(body)), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	o, err := cl.GetObject(ctx, "sealed", "k", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	o.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (%v), put %d", len(got), err, len(body))
	}
	// A crc-only client: refused at the mon, with the reason.
	_, _, err = run(t, "ls", "--mon", c.Mon.Addr(), "--keyring", c.KeyringPath("client.admin"), "--ms-client-mode", "crc")
	if err == nil || !strings.Contains(err.Error(), "no connection mode in common") {
		t.Fatalf("a crc client of a secure cluster: %v", err)
	}
}
