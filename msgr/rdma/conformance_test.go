//go:build rdma

package rdma_test

import (
	"os"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// rdmaEnv runs the conformance suite over a libfabric provider. A smaller
// receive window keeps registered memory per link small (one credit is one
// posted 16 KiB buffer).
func rdmaEnv(provider string, scale float64) msgrtest.Env {
	return msgrtest.Env{
		Scheme: "rdma+" + provider, Host: "127.0.0.1:0", Scale: scale,
		Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 },
	}
}

func TestConformanceRDMATCP(t *testing.T) { msgrtest.Run(t, rdmaEnv("tcp", 0.1)) }

// TestConformanceRDMASockets runs the suite over libfabric's sockets
// provider, only with OSPREY_TEST_SOCKETS=1: it passes most runs since the
// CM-info fixes, but about one full-package run in seven still fails on this
// deprecated provider (docs/rdma.md, Known limitations), and a crash there
// takes the whole test binary, and CI, with it.
func TestConformanceRDMASockets(t *testing.T) {
	if os.Getenv("OSPREY_TEST_SOCKETS") == "" {
		t.Skip("set OSPREY_TEST_SOCKETS=1 to run the suite on the sockets provider")
	}
	msgrtest.Run(t, rdmaEnv("sockets", 0.05))
}
