//go:build linux

package multihost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/netns"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// The osprey binary every test runs, built once by TestMain; unavailable
// says why the tests skip (no root, no ip), buildErr why they fail.
var (
	ospreyBin   string
	unavailable error
	buildErr    error
)

// helperEnv makes the test binary a small client instead of running tests
// (the mon history check needs "get map", which the CLI does not offer).
const helperEnv = "OSPREY_MULTIHOST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "maps" {
		os.Exit(printMaps())
	}
	unavailable = netns.Check()
	var dir string
	if unavailable == nil && !testingShort() {
		dir, ospreyBin, buildErr = buildOsprey()
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// testingShort is testing.Short before m.Run has parsed the flags.
func testingShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

// buildOsprey builds cmd/osprey with the test binary's build tags, so the
// daemons have the transports the test expects.
func buildOsprey() (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", "osprey-multihost-"); err != nil {
		return "", "", err
	}
	bin, err = osdtest.BuildOsprey(dir)
	return dir, bin, err
}

// needLab skips the test where the lab cannot be built (or with -short),
// unless OSPREY_REQUIRE_NETNS=1.
func needLab(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-host tests run processes in network namespaces (not with -short)")
	}
	if unavailable != nil {
		if os.Getenv("OSPREY_REQUIRE_NETNS") == "1" {
			t.Fatalf("%v (OSPREY_REQUIRE_NETNS=1)", unavailable)
		}
		t.Skipf("%v (OSPREY_REQUIRE_NETNS=1 makes this a failure)", unavailable)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// mapLine is one epoch of the map history the helper prints.
type mapLine struct {
	Epoch     uint64  `json:"epoch"`
	FullRatio float64 `json:"full_ratio"`
	Error     string  `json:"error,omitempty"`
}

// printMaps is the helper: every map the mons ($OSPREY_MON, as
// $OSPREY_KEYRING) still hold, oldest first, one JSON line each.
func printMaps() int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k, err := auth.LoadKeyring(os.Getenv("OSPREY_KEYRING"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mc, err := monclient.New(ctx, monclient.Options{Addrs: strings.Split(os.Getenv("OSPREY_MON"), ","), Keyring: k})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer mc.Close()
	newest, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "get map"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	for e := uint64(1); e <= newest.GetMap().GetEpoch(); e++ {
		rep, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "get map", Epoch: e})
		if err != nil {
			enc.Encode(mapLine{Epoch: e, Error: err.Error()})
			continue
		}
		enc.Encode(mapLine{Epoch: rep.GetMap().GetEpoch(), FullRatio: rep.GetMap().GetFullRatio()})
	}
	return 0
}
