package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/mon"
)

// TestPrintMonStatusIO: the text status shows client I/O and recovery,
// as ceph -s's io section does, and no io section when idle.
func TestPrintMonStatusIO(t *testing.T) {
	var b bytes.Buffer
	st := &mon.Status{FSID: "f", Health: mon.Health{Status: mon.HealthOK}, PGs: map[string]int{"active+clean": 8}, PGTotal: 8}
	printMonStatus(&b, st)
	if strings.Contains(b.String(), "io:") {
		t.Errorf("an idle cluster shows io:\n%s", b.String())
	}
	b.Reset()
	st.OpsPerSec, st.ReadBytesPerSec, st.WriteBytesPerSec = 120, 3<<20, 1<<20
	printMonStatus(&b, st)
	if !strings.Contains(b.String(), "  io:\n    client:   3.0 MiB/s rd, 1.0 MiB/s wr, 120 op/s\n") || strings.Contains(b.String(), "recovery") {
		t.Errorf("client I/O:\n%s", b.String())
	}
	b.Reset()
	st.RecoveryBytesPerSec, st.DegradedObjects = 2<<20, 5
	printMonStatus(&b, st)
	if !strings.Contains(b.String(), "    recovery: 2.0 MiB/s; degraded: 5 objects, misplaced: 0 objects\n") {
		t.Errorf("recovery:\n%s", b.String())
	}
}
