package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
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
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out)
	}
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

func TestBenchMsgrErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "msgr", "--size", "4XB"}, "--size"},
		{[]string{"bench", "msgr", "--mode", "burst"}, "--mode"},
		{[]string{"bench", "msgr", "--duration", "0s"}, "--duration"},
		{[]string{"bench", "msgr", "--depth", "0", "--duration", "10ms"}, "depth"},
		{[]string{"bench", "msgr", "--transport", "rdma+nosuch", "--duration", "10ms"}, `"rdma+nosuch"`},
		{[]string{"--log-level", "loud", "bench", "msgr"}, "--log-level"},
		{[]string{"bench", "msgr", "extra"}, "unknown command"},
	} {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one mentioning %s", c.args, err, c.want)
		}
	}
}
