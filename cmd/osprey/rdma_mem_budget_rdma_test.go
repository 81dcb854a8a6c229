//go:build rdma

package main

import (
	"testing"

	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// rdmaBudgets are the MemBudgets of the RDMA transports in ts.
func rdmaBudgets(ts []wire.Transport) []int64 {
	var out []int64
	for _, tr := range ts {
		if rt, ok := tr.(*rdma.Transport); ok {
			out = append(out, rt.Config().MemBudget)
		}
	}
	return out
}

// TestRDMAMemBudgetFlag: `osprey osd --rdma-mem-budget` reaches every
// RDMA transport the OSD's messengers get, over OSPREY_RDMA_MEM_BUDGET,
// and 0 is the transport's default.
func TestRDMAMemBudgetFlag(t *testing.T) {
	_, _, osdConfig := captureOSDConfig(t)
	t.Setenv("OSPREY_RDMA_MEM_BUDGET", "128MiB")
	for _, tc := range []struct {
		args []string
		want int64
	}{
		{[]string{"--rdma-mem-budget", "64MiB"}, 64 << 20},
		{[]string{"--rdma-mem-budget=2GiB"}, 2 << 30},
		{[]string{"--rdma-mem-budget", "33554432"}, 32 << 20},
		{[]string{"--rdma-mem-budget", "0"}, 1 << 30},
	} {
		got := rdmaBudgets(osdConfig(tc.args...).Transports)
		if len(got) != 3 {
			t.Fatalf("%v: %d RDMA transports, want 3", tc.args, len(got))
		}
		for _, b := range got {
			if b != tc.want {
				t.Errorf("%v: MemBudget %d, want %d", tc.args, b, tc.want)
			}
		}
	}
}
