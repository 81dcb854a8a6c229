package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
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
	if !strings.Contains(b.String(), "    recovery: 2.0 MiB/s\n") || !strings.Contains(b.String(), "             5 degraded, 0 misplaced\n") {
		t.Errorf("recovery:\n%s", b.String())
	}
}

// TestPrintTreeNeverBooted: osd tree shows an OSD that osd create made
// and no daemon booted as as never booted, not at the mon's placeholder
// address.
func TestPrintTreeNeverBooted(t *testing.T) {
	var b bytes.Buffer
	printTree(&b, []mon.OSDTreeEntry{
		{ID: 0, Host: "h0", Up: true, In: true, Weight: 1, PublicAddr: "tcp://127.0.0.1:6800", ClusterAddr: "tcp://127.0.0.1:6801", Fullness: "ok"},
		{ID: 3, Weight: 1, AutoOut: true, NeverBooted: true, Fullness: "ok"},
		{ID: 4, Host: "h4", In: true, Weight: 1, PublicAddr: "tcp://127.0.0.1:6808", ClusterAddr: "tcp://127.0.0.1:6809", Fullness: "nearfull"},
	})
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "tcp://127.0.0.1:6800") {
		t.Fatalf("osd tree:\n%s", b.String())
	}
	if f := strings.Fields(lines[2]); len(f) != 10 || f[0] != "osd.3" || f[1] != "-" || f[2] != "down" || f[3] != "out" || f[7] != "-" || f[8] != "never-booted" || f[9] != "-" {
		t.Fatalf("a never-booted OSD's row: %q\n%s", lines[2], b.String())
	}
	// A down OSD's disk is not known now: its last beacon's word is old.
	if f := strings.Fields(lines[3]); len(f) != 10 || f[0] != "osd.4" || f[2] != "down" || f[7] != "-" {
		t.Fatalf("a down OSD's row: %q\n%s", lines[3], b.String())
	}
}

// TestStdoutClosed: a write to a closed pipe on stdout ends the command
// quietly; another write error or a broken pipe elsewhere does not.
func TestStdoutClosed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	_, err = w.Write([]byte("x"))
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a closed pipe: %v", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		t.Fatalf("not a PathError: %T", err)
	}
	pe.Path = os.Stdout.Name() // as the same write to our stdout says
	if !stdoutClosed(fmt.Errorf("pg ls: %w", pe)) {
		t.Error("EPIPE on stdout: not seen")
	}
	if stdoutClosed(&fs.PathError{Op: "write", Path: "/tmp/x", Err: syscall.EPIPE}) || stdoutClosed(&fs.PathError{Op: "write", Path: os.Stdout.Name(), Err: syscall.EIO}) || stdoutClosed(nil) {
		t.Error("another error taken for stdout closed")
	}
}
