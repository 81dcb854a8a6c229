package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestRDMAMemBudgetFlagRejectsBadValues: a --rdma-mem-budget that is not
// a size, or is below the minimum, is a usage error that names the flag
// and says what to give, in every build.
func TestRDMAMemBudgetFlagRejectsBadValues(t *testing.T) {
	dir, mapPath, osdConfig := captureOSDConfig(t)
	if got := osdConfig(); got.Transports != nil {
		t.Errorf("without --rdma-mem-budget the OSD got transports %v, want its defaults (nil)", got.Transports)
	}
	for _, bad := range []string{"lots", "-1GiB", "1MiB", "4096"} {
		_, _, err := run(t, "osd", "--map", mapPath, "--data", dir, "--rdma-mem-budget", bad)
		if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "rdma-mem-budget") ||
			!strings.Contains(fmt.Sprint(err), "RDMA memory budget") {
			t.Errorf("--rdma-mem-budget %s: %v (exit %d), want a usage error about the budget", bad, err, exitCode(err))
		}
	}
	t.Setenv("OSPREY_RDMA_MEM_BUDGET", "2MiB")
	_, _, err := run(t, "osd", "--map", mapPath, "--data", dir, "--rdma-mem-budget", "64MiB")
	if err == nil || !strings.Contains(err.Error(), "OSPREY_RDMA_MEM_BUDGET") {
		t.Errorf("a bad OSPREY_RDMA_MEM_BUDGET beside the flag: %v, want an error naming the variable", err)
	}
}
