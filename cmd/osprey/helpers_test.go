package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// monCluster starts a local cluster with a mon (8 PGs, auth on, its logs
// dropped, full ratios of 1 so that how full the host's disk is plays no
// part in its health) and returns it with the flags that reach its mon
// as client.admin.
func monCluster(t *testing.T, osds, replicas int) (*local.Cluster, []string) {
	t.Helper()
	lc := osdtest.StartLocal(t, local.Options{OSDs: osds, Replicas: replicas, PGs: 8, WithMon: true, Dir: t.TempDir(),
		NearfullRatio: 1, BackfillfullRatio: 1, FullRatio: 1, FailsafeFullRatio: 1,
		Logger: slog.New(slog.DiscardHandler)})
	return lc, []string{"--mon", lc.Mon.Addr(), "--keyring", lc.KeyringPath("client.admin")}
}

// mustCLI runs osprey commands with extra (monCluster's flags) appended
// and returns their output; an error fails the test.
func mustCLI(t *testing.T, extra []string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, _, err := run(t, append(args, extra...)...)
		if err != nil {
			t.Fatalf("osprey %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
}

// monClient is a client.admin SDK client of lc through its mon (it follows
// every map, so Locate answers under the newest), closed by t.Cleanup,
// with bucket made.
func monClient(t *testing.T, lc *local.Cluster, bucket string) *client.Client {
	t.Helper()
	cl, err := client.New(t.Context(), client.Options{Mon: []string{lc.Mon.Addr()}, Keyring: lc.AdminKeyring, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if err := cl.MakeBucket(t.Context(), bucket); err != nil {
		t.Fatal(err)
	}
	return cl
}
