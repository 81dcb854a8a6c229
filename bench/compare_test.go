package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// synthRow is a msgr row with throughput segments around rate.
func synthRow(transport string, size int, rate float64, segs []uint64, p50 float64) Row {
	r := Row{Transport: transport, Mode: Stream, Size: size, Depth: 16, MsgsPerSec: rate,
		BytesPerSec: rate * float64(size), P50Us: p50, P99Us: 2 * p50, CPUSecPerGB: 1}
	bs := make([]float64, len(segs))
	for i, c := range segs {
		bs[i] = float64(c) * float64(size)
	}
	r.Segments = segmentStats(1, segs, bs)
	h := NewHistogram()
	for v := int64(1000); v < 50000; v += 500 {
		h.Record(v)
	}
	r.LatencyHist = h.Buckets()
	return r
}

func writeRun(t *testing.T, dir, name string, rows []Row) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompare(t *testing.T) {
	a := []Row{
		synthRow("tcp", 64, 1000, []uint64{990, 1000, 1010}, 10),     // B clearly faster
		synthRow("tcp", 4096, 500, []uint64{450, 500, 550}, 20),      // B within A's noise
		synthRow("tcp", 1<<20, 100, []uint64{100}, 30),               // too few segments
		synthRow("raw-tcp", 64, 2000, []uint64{2000, 2000, 2000}, 5), // only in A
	}
	b := []Row{
		synthRow("tcp", 64, 1200, []uint64{1190, 1200, 1210}, 8),
		synthRow("tcp", 4096, 520, []uint64{500, 520, 540}, 20),
		synthRow("tcp", 1<<20, 90, []uint64{90}, 33),
		synthRow("rdma+tcp", 64, 800, []uint64{800, 800, 800}, 12), // only in B
	}
	dir := t.TempDir()
	pa, pb := writeRun(t, dir, "a.json", a), writeRun(t, dir, "b.json", b)
	runs := make([]Run, 2)
	for i, p := range []string{pa, pb} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		runs[i], err = ReadRun(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(runs[0].Msgr, a) {
		t.Errorf("a run does not survive JSON:\n%+v\n%+v", runs[0].Msgr[0], a[0])
	}
	var out bytes.Buffer
	if err := Compare(&out, "a.json", runs[0], "b.json", runs[1]); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Logf("\n%s", s)
	for _, want := range []string{
		"tcp stream 64 depth 16  ", "+20.0%", // significant: ranges 990-1010 and 1190-1210 apart
		"~ (no significant difference)", // 450-550 overlaps 500-540
		"-10.0% ?", "?: fewer than 3 segments",
		"1.0k ±1%", "geomean",
		"p50 µs A", "-20.0%", // latency 10 -> 8
		"only in A: raw-tcp stream 64 depth 16", "only in B: rdma+tcp stream 64 depth 16",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("comparison lacks %q", want)
		}
	}
	if strings.Count(s, "~ (no significant difference)") != 1 {
		t.Errorf("one row should be within the noise:\n%s", s)
	}
	if strings.Contains(s, "congestion") {
		t.Errorf("runs without tcp_congestion warned about it:\n%s", s)
	}

	// Runs under different TCP congestion controls are compared with a
	// warning; under the same one, without.
	ca, cb := slices.Clone(runs[0].Msgr), slices.Clone(runs[1].Msgr)
	for i := range ca {
		ca[i].TCPCongestion = "bbr"
	}
	for i := range cb {
		cb[i].TCPCongestion = "cubic"
	}
	out.Reset()
	if err := Compare(&out, "a", Run{Msgr: ca}, "b", Run{Msgr: cb}); err != nil {
		t.Fatal(err)
	}
	if want := "warning: A ran under TCP congestion control bbr, B under cubic"; !strings.Contains(out.String(), want) {
		t.Errorf("comparison lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	if err := Compare(&out, "a", Run{Msgr: ca}, "a again", Run{Msgr: ca}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "warning") {
		t.Errorf("runs under one congestion control warned:\n%s", out.String())
	}

	// Runs of different benchmarks, or with nothing in common, do not compare.
	obj := Run{Obj: []ObjRow{{Op: OpPut, Size: 4096, Concurrency: 16, OpsPerSec: 1}}}
	if err := Compare(&out, "a", runs[0], "o", obj); err == nil {
		t.Error("compared a msgr run with an obj run")
	}
	if err := Compare(&out, "a", Run{Msgr: a[3:]}, "b", Run{Msgr: b[3:]}); err == nil {
		t.Error("compared runs without a common row")
	}
}

func TestReadRunObjLines(t *testing.T) {
	// bench obj --json writes one object per line.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range []ObjRow{{Op: OpPut, Size: 4096}, {Op: OpMixed, Mix: "get=1,put=1", Size: 4096}} {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	run, err := ReadRun(&buf)
	if err != nil || len(run.Obj) != 2 || run.Msgr != nil || run.Obj[1].Mix != "get=1,put=1" {
		t.Fatalf("ReadRun = %+v, %v", run, err)
	}
	for _, bad := range []string{"", "[]", `{"x": 1}`, `[{"mode":"stream"},{"op":"put"}]`, "[{"} {
		if _, err := ReadRun(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadRun(%q) accepted", bad)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	rows := []Row{synthRow("tcp", 64, 1000, []uint64{990, 1000, 1010}, 10)}
	rows[0].Provider = ""
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(recs) != 2 {
		t.Fatalf("CSV: %v, %v", recs, err)
	}
	header := recs[0]
	// Every JSON key but the histogram is a column.
	var keys []string
	for _, k := range msgrJSONKeys {
		if k != "latency_hist" {
			keys = append(keys, k)
		}
	}
	for _, k := range append(keys, "provider", "zero_copy", "vs_raw_p50") {
		i := indexOf(header, k)
		if i < 0 {
			t.Errorf("CSV header lacks %q: %v", k, header)
		}
	}
	if i := indexOf(header, "segment_counts"); i < 0 || recs[1][i] != "990 1000 1010" {
		t.Errorf("segment_counts column: %v", recs[1])
	}
	if i := indexOf(header, "provider"); i < 0 || recs[1][i] != "" {
		t.Errorf("an empty omitempty key should be an empty field: %v", recs[1])
	}
	if indexOf(header, "latency_hist") >= 0 {
		t.Error("the histogram is not a CSV column")
	}

	buf.Reset()
	if err := WriteObjCSV(&buf, []ObjRow{{Op: OpGet, Size: 4096, OpsPerSec: 12.5}}); err != nil {
		t.Fatal(err)
	}
	recs, err = csv.NewReader(&buf).ReadAll()
	if err != nil || len(recs) != 2 || recs[1][indexOf(recs[0], "ops_per_sec")] != "12.5" {
		t.Errorf("obj CSV: %v, %v", recs, err)
	}
	for _, k := range objJSONKeys {
		if k != "latency_hist" && indexOf(recs[0], k) < 0 {
			t.Errorf("obj CSV header lacks %q", k)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestPlots draws every plot of synthetic runs and checks each file is a
// whole SVG or PNG. Looking at them is for people (docs/benchmarks.md).
func TestPlots(t *testing.T) {
	msgr := []Row{
		synthRow("tcp", 64, 1000, []uint64{990, 1000, 1010}, 10),
		synthRow("tcp", 4096, 500, []uint64{450, 500, 550}, 20),
		synthRow("raw-tcp", 64, 2000, []uint64{2000}, 5),
		synthRow("raw-tcp", 4096, 900, nil, 5), // no segments: no error bar
	}
	msgr[3].LatencyHist = nil            // a row without a histogram has no line
	msgr[1].SegSlowestBytesPerSec = 0    // a segment that saw nothing: no 0 on a log axis
	msgr[1].SegFastestBytesPerSec = 1e12 // beyond the axis
	obj := []ObjRow{
		{Op: OpPut, Size: 4096, OpsPerSec: 100, BytesPerSec: 409600, LatencyHist: msgr[0].LatencyHist},
		{Op: OpStat, Size: 4096, OpsPerSec: 1000},
		{Op: OpGet, Mix: "get=1,put=1", Size: 4 << 20, OpsPerSec: 10, BytesPerSec: 4e7, LatencyHist: msgr[1].LatencyHist},
		{Op: OpMixed, Mix: "get=1,put=1", Size: 4 << 20, OpsPerSec: 10, BytesPerSec: 4e7, LatencyHist: msgr[1].LatencyHist},
	}
	for _, format := range PlotFormats {
		dir := t.TempDir()
		mf, err := PlotMsgr(dir, format, msgr)
		if err != nil {
			t.Fatal(err)
		}
		of, err := PlotObj(dir, format, obj)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"msgr-throughput-stream-d16", "msgr-latency-stream-64-d16", "msgr-latency-stream-4KiB-d16",
			"obj-throughput", "obj-latency-4KiB", "obj-latency-mix1-4MiB"}
		var got []string
		for _, f := range append(mf, of...) {
			got = append(got, strings.TrimSuffix(filepath.Base(f), "."+format))
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			switch format {
			case "svg":
				if !bytes.HasPrefix(b, []byte("<?xml")) || !bytes.Contains(b, []byte("<svg")) || !bytes.HasSuffix(bytes.TrimSpace(b), []byte("</svg>")) {
					t.Errorf("%s is not a whole SVG", f)
				}
			case "png":
				if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
					t.Errorf("%s is not a PNG (%d bytes)", f, len(b))
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s plots %v, want %v", format, got, want)
		}
	}
	if _, err := PlotMsgr(t.TempDir(), "gif", msgr); err == nil {
		t.Error("plotted a gif")
	}
}
