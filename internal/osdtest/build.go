package osdtest

import (
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/ospreystore/osprey/msgr/transports"
)

// BuildOsprey builds cmd/osprey into dir with the test binary's RDMA build
// tag, so the daemons it starts have the transports the test expects. It
// is built without the race detector or the invariants tag, whatever the
// test binary has: the processes it runs are the system under test at
// its own speed.
func BuildOsprey(dir string) (string, error) {
	bin := filepath.Join(dir, "osprey")
	args := []string{"build", "-o", bin}
	if transports.RDMABuilt {
		args = append(args, "-tags", "rdma")
	}
	out, err := exec.Command("go", append(args, "github.com/ospreystore/osprey/cmd/osprey")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/osprey: %v\n%s", err, out)
	}
	return bin, nil
}
