package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/bench"
)

// run executes the CLI with args and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestBenchMsgrJSON(t *testing.T) {
	out, _, err := run(t, "bench", "msgr", "--size", "64,1KiB", "--depth", "2", "--mode", "stream,pingpong",
		"--duration", "50ms", "--warmup", "10ms", "--baseline", "--json", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	rows := parseJSONLines(t, out)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8 (2 sizes x 2 modes x msgr+raw)", len(rows))
	}
	for _, r := range rows {
		if r["transport"] != "tcp" && r["transport"] != "raw-tcp" {
			t.Errorf("transport %v", r["transport"])
		}
		if s := r["size"].(float64); s != 64 && s != 1024 {
			t.Errorf("size %v", s)
		}
		if _, ok := r["no_data_crc"]; ok {
			t.Errorf("a row with the data CRC says no_data_crc: %v", r)
		}
	}
	// --no-data-crc is in the messenger's rows, so compare can tell.
	out, _, err = run(t, "bench", "msgr", "--size", "64", "--depth", "2", "--mode", "stream",
		"--duration", "50ms", "--warmup", "10ms", "--no-data-crc", "--json", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range parseJSONLines(t, out) {
		if r["no_data_crc"] != true {
			t.Errorf("a --no-data-crc row: no_data_crc %v", r["no_data_crc"])
		}
	}
}

func TestBenchMsgrTable(t *testing.T) {
	out, _, err := run(t, "bench", "msgr", "--size", "4KiB", "--depth", "1", "--mode", "pingpong",
		"--duration", "50ms", "--warmup", "0s", "--baseline", "--log-level", "error")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"transport", "p99.9 µs", "raw-tcp", "4KiB", "messenger / raw TCP", "p50"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchMsgrHistogram(t *testing.T) {
	out, _, err := run(t, "bench", "msgr", "--size", "64", "--depth", "1", "--mode", "pingpong",
		"--duration", "100ms", "--warmup", "0s", "--baseline", "--histogram", "--log-level", "error")
	if err != nil {
		t.Fatal(err)
	}
	_, hist, ok := strings.Cut(out, "Latency histogram, tcp pingpong size 64 depth 1, beside raw-tcp in the same run:")
	if !ok {
		t.Fatalf("no histogram of the messenger row beside its baseline:\n%s", out)
	}
	// Every row's values are in it: the last octave's cumulative percent
	// is 100 for both columns.
	lines := strings.Split(strings.TrimSpace(hist), "\n")
	if f := strings.Fields(lines[len(lines)-1]); len(f) < 7 || !slices.Contains(f, "100.00") || strings.Count(lines[len(lines)-1], "100.00") < 2 {
		t.Errorf("last octave %q does not close both columns at 100%%:\n%s", lines[len(lines)-1], out)
	}
	for _, p := range []string{"p50", "p99", "p99.9"} {
		if strings.Count(hist, p+" ")+strings.Count(hist, p+"\n") < 2 {
			t.Errorf("%s is not marked in both columns:\n%s", p, hist)
		}
	}
}

func TestBenchMsgrErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "msgr", "--size", "4XB"}, "--size"},
		{[]string{"bench", "msgr", "--mode", "burst"}, "--mode"},
		{[]string{"bench", "msgr", "--duration", "0s"}, "--duration"},
		{[]string{"bench", "msgr", "--warmup", "-1s"}, "--warmup -1s: must be 0 (none) or more"},
		{[]string{"bench", "msgr", "--size", "67108865", "--duration", "10ms"}, "want 0 to 67108864 bytes (64 MiB)"},
		{[]string{"bench", "msgr", "--depth", "0", "--duration", "10ms"}, "depth"},
		{[]string{"bench", "msgr", "--transport", "rdma+nosuch", "--duration", "10ms"}, `"rdma+nosuch"`},
		{[]string{"--log-level", "loud", "bench", "msgr"}, "--log-level"},
		{[]string{"bench", "msgr", "extra"}, "unknown command"},
		{[]string{"bench", "msgr", "--histogram", "--json"}, "--histogram"},
	} {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one mentioning %s", c.args, err, c.want)
		}
		if code := exitCode(err); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage)", c.args, code, exitUsage)
		}
	}
}

// TestBenchMsgrOutputs runs one short benchmark twice, as --json and as
// --csv with --plot, and compares the runs with bench compare.
func TestBenchMsgrOutputs(t *testing.T) {
	dir := t.TempDir()
	args := []string{"bench", "msgr", "--size", "64,4KiB", "--depth", "4", "--mode", "stream",
		"--duration", "100ms", "--warmup", "10ms", "--segment", "25ms", "--log-level", "warn"}
	var files []string
	for i := range 2 {
		out, _, err := run(t, append(args, "--json")...)
		if err != nil {
			t.Fatal(err)
		}
		rows := parseJSONLines(t, out)
		if len(rows) != 2 {
			t.Fatalf("--json: %d rows, want 2", len(rows))
		}
		for _, r := range rows {
			for _, k := range []string{"msgs_per_sec", "p999_us", "cpu_s_per_gb", "segment_counts", "seg_median_per_sec", "latency_hist"} {
				if _, ok := r[k]; !ok {
					t.Errorf("JSON row lacks %q", k)
				}
			}
		}
		f := filepath.Join(dir, fmt.Sprintf("run%d.json", i))
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	out, errOut, err := run(t, append(args, "--csv", "--plot", dir)...)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "transport,") {
		t.Errorf("--csv output:\n%s", out)
	}
	svg := filepath.Join(dir, "msgr-throughput-stream-d4.svg")
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("plot %s: %v", svg, err)
	}
	if !strings.Contains(errOut, "wrote 3 plots") {
		t.Errorf("stderr: %q", errOut)
	}

	out, _, err = run(t, "bench", "compare", files[0], files[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tcp stream 64 depth 4", "tcp stream 4KiB depth 4", "B vs A", "geomean", "p50 µs A"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare output lacks %q:\n%s", want, out)
		}
	}
	pdir := filepath.Join(dir, "png")
	out, _, err = run(t, "bench", "plot", files[0], pdir, "--plot-format", "png")
	if err != nil || !strings.Contains(out, "msgr-latency-stream-64-d4.png") {
		t.Errorf("bench plot: %v\n%s", err, out)
	}
	// --format, bench plot's old name for it, still works, with a warning.
	out, errOut, err = run(t, "bench", "plot", files[0], filepath.Join(dir, "old"), "--format", "png")
	if err != nil || !strings.Contains(out, ".png") || !strings.Contains(out+errOut, "--format has been deprecated, use --plot-format") {
		t.Errorf("bench plot --format: %v\n%s%s", err, out, errOut)
	}
}

// parseJSONLines parses a --json output: one JSON object per line.
func parseJSONLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for l := range strings.Lines(out) {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", l, err)
		}
		rows = append(rows, r)
	}
	return rows
}

func TestBenchObjJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	dir := t.TempDir()
	out, _, err := run(t, "bench", "obj", "--osds", "1", "--size", "4KiB", "--op", "put,stat", "--mix", "get=2,put=1",
		"--concurrency", "2", "--objects", "8", "--duration", "100ms", "--segment", "25ms",
		"--dir", t.TempDir(), "--json", "--plot", dir, "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, fmt.Sprint(r["op"]))
		for _, k := range []string{"ops_per_sec", "segment_counts", "latency_hist", "cpu_us_per_op", "objects"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%v row lacks %q", r["op"], k)
			}
		}
	}
	if want := "put stat put get mixed"; strings.Join(ops, " ") != want {
		t.Errorf("rows %v, want %s", ops, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "obj-throughput.svg")); err != nil {
		t.Error(err)
	}
}

func TestBenchOutputErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "msgr", "--json", "--csv"}, "--json and --csv"},
		{[]string{"bench", "msgr", "--segment", "0s"}, "--segment"},
		{[]string{"bench", "msgr", "--segment", "1ns", "--duration", "1s"}, "more than 100000 segments"},
		{[]string{"bench", "obj", "--segment", "10us", "--duration", "10s"}, "more than 100000 segments"},
		{[]string{"bench", "obj", "--replicas", "5", "--osds", "3"}, "--replicas 5 over --osds 3"},
		{[]string{"bench", "obj", "--seeds", "127.0.0.1:1", "--osds", "7"}, "--osds is for the local cluster"},
		{[]string{"bench", "obj", "--s3", "http://127.0.0.1:1", "--access-key", "a", "--secret-key", "s", "--public", "rdma+tcp"}, "--public is for the local cluster"},
		{[]string{"bench", "obj", "--warmup", "-1s"}, "want at least 0"},
		{[]string{"bench", "obj", "--size", ",,"}, "no size in"},
		{[]string{"bench", "msgr", "--size", ","}, "no size in"},
		{[]string{"bench", "obj", "--objects", "-5"}, "want at least 0"},
		{[]string{"bench", "msgr", "--plot", "x", "--plot-format", "gif"}, "--plot-format"},
		{[]string{"bench", "obj", "--op", "fly"}, "--op"},
		{[]string{"bench", "obj", "--mix", "get"}, "--mix"},
		{[]string{"bench", "obj", "--s3", "http://127.0.0.1:1", "--seeds", "127.0.0.1:1", "--access-key", "a", "--secret-key", "s"}, "--s3 and --seeds"},
		{[]string{"bench", "obj", "--s3", "http://127.0.0.1:1", "--access-key", "a"}, "key pair"},
		{[]string{"bench", "compare", "a.json"}, "accepts 2 arg"},
		{[]string{"bench", "msgr", "--serve", "tcp://127.0.0.1:0", "--connect", "tcp://127.0.0.1:1"}, "none of the others"},
		{[]string{"bench", "msgr", "--connect", "tcp://127.0.0.1:1", "--transport", "tcp"}, "--transport and --connect"},
		{[]string{"bench", "msgr", "--connect", "tcp://127.0.0.1:1", "--baseline"}, "baseline"},
		{[]string{"bench", "msgr", "--conns", "2", "--baseline"}, "--conns 1"},
		{[]string{"bench", "compare", "/nonexistent/a.json", "/nonexistent/b.json"}, "no such file"},
	} {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one mentioning %s", c.args, err, c.want)
		} else if code := exitCode(err); code != exitUsage && !strings.Contains(c.want, "no such file") {
			t.Errorf("%v: exit %d, want %d (a usage error)", c.args, code, exitUsage)
		}
	}
}

func TestBenchProgressLine(t *testing.T) {
	var buf bytes.Buffer
	draw := progressLine(&buf, 60)
	draw(bench.Progress{Row: "tcp stream 4KiB depth 16", Phase: bench.PhaseWarmup, Elapsed: 120 * time.Millisecond, Duration: 500 * time.Millisecond})
	draw(bench.Progress{Row: "tcp stream 4KiB depth 16", Phase: bench.PhaseMeasure, Elapsed: 1234 * time.Millisecond,
		Duration: 3 * time.Second, Count: 1000, PerSec: 612345, BytesPerSec: 2.51e9})
	draw(bench.Progress{Phase: bench.PhaseDone})
	want := "\rtcp stream 4KiB depth 16  warming up 100ms of 500ms\033[K" +
		"\rtcp stream 4KiB depth 16  measuring 1.2s of 3s  612.3k/s  2\033[K" + // cut at 59 columns
		"\r\033[K"
	if got := buf.String(); got != want {
		t.Errorf("progress output\n%q\nwant\n%q", got, want)
	}
}
