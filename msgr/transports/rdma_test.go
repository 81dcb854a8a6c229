//go:build rdma

package transports_test

import (
	"errors"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/transports"
)

// testRDMAAddress: with -tags rdma an rdma+verbs address under
// FI_PROVIDER=tcp fails Listen with the conflict, not by running on tcp.
// The check comes before libfabric is asked, so this process's libfabric
// never sees the variable.
func testRDMAAddress(t *testing.T, m *msgr.Messenger) {
	t.Setenv("FI_PROVIDER", "tcp")
	_, err := m.Listen(t.Context(), "rdma+verbs://127.0.0.1:0")
	var pc *rdma.ProviderConflictError
	if !errors.As(err, &pc) || pc.Scheme != "rdma+verbs" || pc.FIProvider != "tcp" {
		t.Fatalf("err = %v, want a ProviderConflictError for rdma+verbs under FI_PROVIDER=tcp", err)
	}
}

// TestDefaultRejectsBadRendezvous: a misspelt OSPREY_RDMA_RENDEZVOUS is
// an error, not the automatic mode.
func TestDefaultRejectsBadRendezvous(t *testing.T) {
	t.Setenv("OSPREY_RDMA_RENDEZVOUS", "wirte")
	if _, err := transports.Default(); err == nil {
		t.Fatal("OSPREY_RDMA_RENDEZVOUS=wirte: no error")
	}
}

// TestNewSetsRDMAMemBudget: Config.RDMAMemBudget (flag or environment)
// is every RDMA transport's MemBudget; 0 leaves the transport's default.
func TestNewSetsRDMAMemBudget(t *testing.T) {
	for budget, want := range map[int64]int64{64 << 20: 64 << 20, 0: 1 << 30} {
		ts, err := transports.New(transports.Config{RDMAMemBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tr := range ts {
			if rt, ok := tr.(*rdma.Transport); ok {
				n++
				if got := rt.Config().MemBudget; got != want {
					t.Errorf("RDMAMemBudget %d: %s runs with MemBudget %d, want %d", budget, rt.Scheme(), got, want)
				}
			}
		}
		ts.Close()
		if n != 3 {
			t.Fatalf("%d RDMA transports, want 3", n)
		}
	}
}
