//go:build rdma

package rdma

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestProviderSIGPIPE: once a domain is open, a SIGPIPE raised on a
// thread Go did not start (a provider's write to a socket whose peer has
// gone) must not kill the process. It runs in a child process, which
// without the fix dies of the signal.
func TestProviderSIGPIPE(t *testing.T) {
	if os.Getenv("OSPREY_TEST_SIGPIPE") == "child" {
		tr := NewTransport("tcp", Config{})
		ln, err := tr.Listen(context.Background(), "127.0.0.1:0", wire.LinkOptions{})
		if err != nil {
			t.Skipf("no tcp provider: %v", err)
		}
		defer tr.Close()
		defer ln.Close()
		if rc := sigpipeProbe(); rc != 0 {
			t.Fatalf("probe: %d", rc)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProviderSIGPIPE$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "OSPREY_TEST_SIGPIPE=child")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child with an open domain: %v\n%s", err, out)
	}
}
