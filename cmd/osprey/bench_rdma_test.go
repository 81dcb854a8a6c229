//go:build rdma

package main

import (
	"strings"
	"testing"
	"time"
)

// TestBenchMsgrJSONFabric is TestBenchMsgrJSON over rdma+tcp: --baseline
// adds a raw-fabric row on the tcp provider to the raw-tcp one, and the
// messenger's rows are compared with it.
func TestBenchMsgrJSONFabric(t *testing.T) {
	out, _, err := run(t, "bench", "msgr", "--transport", "rdma+tcp", "--size", "64,4KiB", "--depth", "2",
		"--mode", "stream,pingpong", "--duration", "50ms", "--warmup", "10ms", "--baseline", "--json", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	rows := parseJSONLines(t, out)
	if len(rows) != 12 {
		t.Fatalf("%d rows, want 12 (2 sizes x 2 modes x msgr+raw-tcp+raw-fabric)", len(rows))
	}
	count := map[string]int{}
	for _, r := range rows {
		tr, _ := r["transport"].(string)
		count[tr]++
		switch tr {
		case "raw-fabric":
			for _, k := range []string{"mode", "size", "depth", "msgs", "seconds", "msgs_per_sec", "bytes_per_sec",
				"p50_us", "p99_us", "p999_us", "max_us", "mean_us", "cpu_s", "cpu_us_per_msg", "allocs_per_msg"} {
				v, ok := r[k]
				if !ok {
					t.Errorf("raw-fabric row %v lacks %q", r, k)
				} else if s, isStr := v.(string); isStr && s == "" || !isStr && k != "allocs_per_msg" && !(v.(float64) > 0) {
					t.Errorf("raw-fabric row: %q = %v", k, v)
				}
			}
			if r["provider"] != "tcp" {
				t.Errorf("raw-fabric row: provider %v, want tcp", r["provider"])
			}
		case "rdma+tcp":
			for _, k := range []string{"vs_raw_p50", "vs_raw_p99", "vs_raw_bytes_per_sec"} {
				if v, _ := r[k].(float64); !(v > 0) {
					t.Errorf("rdma+tcp row: %q = %v, want a ratio to raw-fabric", k, r[k])
				}
			}
		case "raw-tcp":
		default:
			t.Errorf("transport %v", r["transport"])
		}
	}
	if count["rdma+tcp"] != 4 || count["raw-tcp"] != 4 || count["raw-fabric"] != 4 {
		t.Errorf("rows per transport %v, want 4 each", count)
	}
}

func TestBenchMsgrTableFabric(t *testing.T) {
	wants := []string{"raw-tcp", "raw-fabric(tcp)", "messenger / raw TCP", "messenger / raw libfabric",
		"rdma+tcp pingpong size 64 depth 1:"}
	// A ratio needs both of its rows to have measured a round trip: on a
	// loaded machine a 50 ms row may end before its first (the link's
	// setup takes the time), so a run that lacks a line is repeated with
	// rows twice as long, up to 1.6 s, before the test fails.
	for d := 50 * time.Millisecond; ; d *= 2 {
		out, _, err := run(t, "bench", "msgr", "--transport", "tcp,rdma+tcp", "--size", "64", "--depth", "1", "--mode", "pingpong",
			"--duration", d.String(), "--warmup", "0s", "--baseline", "--log-level", "error")
		if err != nil {
			t.Fatal(err)
		}
		var lacks []string
		for _, want := range wants {
			if !strings.Contains(out, want) {
				lacks = append(lacks, want)
			}
		}
		if len(lacks) == 0 {
			return
		}
		if d >= 1600*time.Millisecond {
			t.Fatalf("output with %v rows lacks %q:\n%s", d, lacks, out)
		}
		t.Logf("rows of %v: output lacks %q; running again with longer rows", d, lacks)
	}
}

func init() { benchFaultTransports = append(benchFaultTransports, "rdma+tcp") }
