package msgrtest_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

func TestConformanceMem(t *testing.T) {
	mem := msgrtest.NewMemTransport()
	msgrtest.Run(t, msgrtest.Env{Scheme: "mem", Transports: func() []wire.Transport { return []wire.Transport{mem} }})
}

func TestConformanceTCP(t *testing.T) {
	msgrtest.Run(t, msgrtest.Env{Scheme: "tcp", Host: "127.0.0.1:0"})
}

// TestConformanceTCPAuth runs the suite with every session authenticated
// (method tls13): the auth step must change nothing above it. A quarter of
// the counts (250 sessions at once, not 1,000): every case and every
// reconnect still authenticates, and TestConformanceTCP runs the full ones.
func TestConformanceTCPAuth(t *testing.T) {
	msgrtest.Run(t, msgrtest.WithAuth(t, msgrtest.Env{Scheme: "tcp", Host: "127.0.0.1:0", Scale: 0.25}, msgrtest.NewTestCA(t)))
}

// TestConformanceTCPSecure runs the suite in secure mode: every frame
// after the auth step sealed, faults and replays included; a quarter of
// the counts, as TestConformanceTCPAuth.
func TestConformanceTCPSecure(t *testing.T) {
	msgrtest.Run(t, msgrtest.WithSecure(t, msgrtest.Env{Scheme: "tcp", Host: "127.0.0.1:0", Scale: 0.25}, msgrtest.NewTestCA(t)))
}

func TestLinksMem(t *testing.T) { msgrtest.RunLinks(t, msgrtest.NewMemTransport(), "") }

func TestLinksTCP(t *testing.T) { msgrtest.RunLinks(t, tcp.Transport{}, "127.0.0.1:0") }
