package osdtest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
)

// BuildOsprey builds cmd/osprey into dir with this test binary's build
// tags (rdma, invariants), so the daemons it starts run the transports
// and checks the test expects, and reuse the packages the build cache
// holds for those tags (make lint vets with them). It is built without
// the race detector, whatever the test binary has: the processes it runs
// are the system under test at its own speed.
func BuildOsprey(dir string) (string, error) {
	bin := filepath.Join(dir, "osprey")
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" && s.Value != "" {
				args = append(args, "-tags", s.Value)
			}
		}
	}
	out, err := exec.Command("go", append(args, "github.com/ospreystore/osprey/cmd/osprey")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/osprey: %v\n%s", err, out)
	}
	return bin, nil
}
