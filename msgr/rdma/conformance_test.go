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

// The sockets provider (libfabric 1.17, deprecated upstream) segfaults
// inside its own progress thread (libfabric.so, no Go frame on the stack)
// during these runs, even with our endpoint, domain and memory teardown
// disabled; a crash kills the whole test binary, so this suite runs only on
// request: OSPREY_TEST_SOCKETS=1. docs/rdma.md, "Known limitations".
func TestConformanceRDMASockets(t *testing.T) {
	if os.Getenv("OSPREY_TEST_SOCKETS") == "" {
		t.Skip("set OSPREY_TEST_SOCKETS=1: libfabric 1.17's sockets provider crashes in its progress thread under these tests")
	}
	msgrtest.Run(t, rdmaEnv("sockets", 0.05))
}
