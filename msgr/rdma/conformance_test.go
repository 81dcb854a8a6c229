//go:build rdma

package rdma_test

import (
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

func TestConformanceRDMASockets(t *testing.T) { msgrtest.Run(t, rdmaEnv("sockets", 0.05)) }
