//go:build !rdma

package transports_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/transports"
)

// testRDMAAddress: without -tags rdma an rdma+ address says how to get
// the transport, at once, on Listen and on Connect.
func testRDMAAddress(t *testing.T, m *msgr.Messenger) {
	_, lerr := m.Listen(t.Context(), "rdma+verbs://127.0.0.1:0")
	_, cerr := m.Connect(t.Context(), "rdma+tcp://127.0.0.1:1", "osd.1")
	for _, err := range []error{lerr, cerr} {
		if !errors.Is(err, msgr.ErrNoTransport) || !errors.Is(err, transports.ErrRDMANotBuilt) {
			t.Errorf("err = %v, want msgr.ErrNoTransport and transports.ErrRDMANotBuilt", err)
		}
		if err != nil && !strings.Contains(err.Error(), "rdma transport not built in (build with -tags rdma)") {
			t.Errorf("error does not say how to build: %v", err)
		}
	}
}
