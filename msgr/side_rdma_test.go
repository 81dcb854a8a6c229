//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestSideSessionBesideLosslessRDMA: testSideSessionBesideLossless over
// rdma+tcp, where the side session's smaller window is fewer posted
// receives.
func TestSideSessionBesideLosslessRDMA(t *testing.T) {
	testSideSessionBesideLossless(t, msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }})
}
