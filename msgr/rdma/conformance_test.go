//go:build rdma

package rdma_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
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
// provider in a process of its own (this test binary, re-executed): the
// provider keeps global state that other tests' domains in the same process
// disturb (docs/rdma.md, Known limitations), and a crash inside it would take
// every other test down with it. OSPREY_TEST_SOCKETS=0 skips it.
//
// The tests that reconnect (two in storms, two after a restart, three after
// a close while the link was down) are skipped on sockets unless OSPREY_TEST_SOCKETS=full: the provider loses a
// new connection's first frame now and then after a reconnect (Known
// limitations 4), which failed about one CI run in eight. The tcp provider
// runs them, and the whole suite, every time.
func TestConformanceRDMASockets(t *testing.T) {
	switch os.Getenv("OSPREY_TEST_SOCKETS") {
	case "0":
		t.Skip("OSPREY_TEST_SOCKETS=0")
	case "child", "full-child":
		env := rdmaEnv("sockets", 0.05)
		// A window of 16, not 64: the provider can wedge a connection
		// for good when the receiver's socket buffer fills (docs/rdma.md,
		// Known limitations 4). Ordering hung so in about one run in 500
		// under load (the sender's socket rwnd-limited with 300 KB unsent,
		// the receiver's holding a few bytes the provider never read; our
		// receives posted, our CQ polled); none in 1,600 runs at 16.
		env.Tweak = func(o *msgr.Options) { o.RecvWindowMsgs = 16 }
		if os.Getenv("OSPREY_TEST_SOCKETS") == "child" {
			why := "the sockets provider loses a reconnected link's first frame now and then (docs/rdma.md, Known limitations 4); OSPREY_TEST_SOCKETS=full runs it"
			env.Skip = map[string]string{"ExactlyOnceUnderFaults": why, "SimultaneousConnect": why, "DialerRestartIsRemoteReset": why,
				"PeerRestartIsRemoteReset": why, "CloseWhileDownAccepted": why, "CloseWhileDownDialed": why, "CloseWhileDownNewSession": why}
		}
		msgrtest.Run(t, env)
		return
	}
	// The child's own timeout turns a hang into a failure with every
	// goroutine's stack, well inside the parent's. A child that failed is
	// run once more, its output logged: the provider can wedge a
	// connection for good under load (docs/rdma.md, Known limitations 4),
	// and a wedged link then fails its redials inside the provider too.
	// One CI run hung so in a test's teardown; another, in about sixty,
	// failed KeepalivesFullWindows so (the link idle after the windows
	// were released, every redial "Input/output error" from a completion),
	// where 14 runs of that test under load and 8 of the suite passed
	// after it. The tcp provider runs the whole suite once, unforgiven;
	// here a second failure fails.
	args := []string{"-test.run=^TestConformanceRDMASockets$", "-test.count=1", "-test.timeout=5m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	child := "OSPREY_TEST_SOCKETS=child"
	if os.Getenv("OSPREY_TEST_SOCKETS") == "full" {
		child = "OSPREY_TEST_SOCKETS=full-child"
	}
	run := func() ([]byte, error) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), child)
		return cmd.CombinedOutput()
	}
	out, err := run()
	if err != nil {
		what := "failed"
		if bytes.Contains(out, []byte("panic: test timed out")) {
			what = "hung"
		}
		t.Logf("the child %s (%v), running it once more; its output:\n%s", what, err, out)
		out, err = run()
	}
	if err != nil || testing.Verbose() {
		t.Logf("child process output:\n%s", out)
	}
	if err != nil {
		t.Fatalf("conformance suite on rdma+sockets: %v", err)
	}
}

// TestConformanceRDMATCPAuth runs the suite, smaller, with every session
// authenticated (method tls13): the handshake's flights travel as RDMA
// sends like any handshake frame, and nothing above changes.
func TestConformanceRDMATCPAuth(t *testing.T) {
	msgrtest.Run(t, msgrtest.WithAuth(t, rdmaEnv("tcp", 0.05), msgrtest.NewTestCA(t)))
}

// TestConformanceRDMATCPSecure runs the suite, smaller, in secure mode: a
// large sealed frame is the payload a rendezvous moves.
func TestConformanceRDMATCPSecure(t *testing.T) {
	msgrtest.Run(t, msgrtest.WithSecure(t, rdmaEnv("tcp", 0.05), msgrtest.NewTestCA(t)))
}

// TestLinksRDMATCP runs the link-level checks over the tcp provider, with
// the write rendezvous and with RDMA reads.
func TestLinksRDMATCP(t *testing.T) {
	for _, mode := range []rdma.RendezvousMode{rdma.RendezvousWrite, rdma.RendezvousRead} {
		t.Run(mode.String(), func(t *testing.T) {
			msgrtest.RunLinks(t, ownTransport(t, rdma.Config{Rendezvous: mode}), "127.0.0.1:0")
		})
	}
}

// TestConformanceRDMAVerbs runs the suite and the link-level checks over
// the verbs provider, on an RDMA NIC (InfiniBand, RoCE, iWARP, or Soft-RoCE
// and siw): OSPREY_TEST_VERBS_ADDR names the IP address of the interface
// the NIC answers on (its IPoIB or RoCE address, as in rdma+verbs://IP:PORT).
// Hosts without one skip it; CI has none. verbs registers memory with
// FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED and FI_MR_PROV_KEY, so this
// is where those modes are exercised for real (docs/rdma.md).
func TestConformanceRDMAVerbs(t *testing.T) {
	ip := os.Getenv("OSPREY_TEST_VERBS_ADDR")
	if ip == "" {
		t.Skip("no RDMA NIC named: set OSPREY_TEST_VERBS_ADDR to its IP address (see fi_info -p verbs -t FI_EP_MSG)")
	}
	host := net.JoinHostPort(ip, "0")
	verbsEnv := func(scale float64) msgrtest.Env {
		env := rdmaEnv("verbs", scale)
		env.Host = host
		return env
	}
	t.Run("suite", func(t *testing.T) { msgrtest.Run(t, verbsEnv(0.1)) })
	t.Run("secure", func(t *testing.T) {
		msgrtest.Run(t, msgrtest.WithSecure(t, verbsEnv(0.05), msgrtest.NewTestCA(t)))
	})
	for _, mode := range []rdma.RendezvousMode{rdma.RendezvousWrite, rdma.RendezvousRead} {
		t.Run("links/"+mode.String(), func(t *testing.T) {
			tr := rdma.NewTransport("verbs", rdma.Config{Rendezvous: mode})
			t.Cleanup(func() { tr.Close() })
			msgrtest.RunLinks(t, tr, host)
		})
	}
}
