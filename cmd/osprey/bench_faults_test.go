package main

import (
	"fmt"
	"strings"
	"testing"
)

// benchFaultTransports are the transports TestBenchMsgrInjectSocketFailures
// runs on; bench_rdma_test.go adds rdma+tcp when RDMA is built in.
var benchFaultTransports = []string{"tcp"}

// TestBenchMsgrInjectSocketFailures: `osprey bench msgr
// --inject-socket-failures N` fails the run's sockets about every N
// messages, on every transport built in, and the run still completes:
// every message is delivered exactly once (the bench fails a row whose
// sessions lost or duplicated one), and each row reports the faults and
// reconnects it went through, in JSON and in the table. A bad count is a
// usage error.
func TestBenchMsgrInjectSocketFailures(t *testing.T) {
	const n = 40
	for _, tr := range benchFaultTransports {
		t.Run(tr, func(t *testing.T) {
			out, _, err := run(t, "bench", "msgr", "--transport", tr, "--size", "64,64KiB", "--depth", "8", "--conns", "2",
				"--mode", "stream,pingpong", "--duration", "300ms", "--warmup", "50ms",
				"--inject-socket-failures", fmt.Sprint(n), "--json", "--log-level", "error")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			rows := parseJSONLines(t, out)
			if len(rows) != 4 {
				t.Fatalf("%d rows, want 4 (2 sizes x 2 modes)", len(rows))
			}
			for _, r := range rows {
				what := fmt.Sprintf("%v %v size %v", r["transport"], r["mode"], r["size"])
				if r["transport"] != tr || r["inject_socket_failures"] != float64(n) {
					t.Errorf("%s: transport %v, inject_socket_failures %v; want %s, %d", what, r["transport"], r["inject_socket_failures"], tr, n)
				}
				// Each connection carries hundreds of messages, so each
				// of the two has links faulted and sessions reconnected.
				faults, _ := r["faults"].(float64)
				reconnects, _ := r["reconnects"].(float64)
				if faults < 2 || reconnects < 2 || reconnects > faults {
					t.Errorf("%s: faults %v, reconnects %v; want at least one of each per connection, a reconnect per fault at most", what, r["faults"], r["reconnects"])
				}
				if msgs, _ := r["msgs"].(float64); msgs <= 0 {
					t.Errorf("%s: %v messages measured", what, r["msgs"])
				}
				t.Logf("%s: %v msgs/s, %v faults, %v reconnects", what, r["msgs_per_sec"], faults, reconnects)
			}

			out, _, err = run(t, "bench", "msgr", "--transport", tr, "--size", "64", "--depth", "4", "--mode", "pingpong",
				"--duration", "100ms", "--warmup", "0s", "--inject-socket-failures", fmt.Sprint(n), "--log-level", "error")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if head, _, _ := strings.Cut(out, "\n"); !strings.Contains(head, "faults") || !strings.Contains(head, "reconnects") {
				t.Errorf("table header lacks faults and reconnects:\n%s", out)
			}
		})
	}
	for _, bad := range []string{"-1", "many", "1.5"} {
		_, _, err := run(t, "bench", "msgr", "--duration", "10ms", "--inject-socket-failures", bad)
		if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "inject-socket-failures") {
			t.Errorf("--inject-socket-failures %s: %v (exit %d), want a usage error", bad, err, exitCode(err))
		}
	}
}
