package main

import (
	"log/slog"
	"testing"

	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// monCluster starts a local cluster with a mon (8 PGs, auth on, its logs
// dropped) and returns it with the flags that reach its mon as
// client.admin.
func monCluster(t *testing.T, osds, replicas int) (*local.Cluster, []string) {
	t.Helper()
	lc := osdtest.StartLocal(t, local.Options{OSDs: osds, Replicas: replicas, PGs: 8, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.DiscardHandler)})
	return lc, []string{"--mon", lc.Mon.Addr(), "--keyring", lc.KeyringPath("client.admin")}
}
