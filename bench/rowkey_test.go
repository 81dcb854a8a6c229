package bench

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// secureRun is a `bench msgr --secure` run: a crc and a secure row of one
// transport, mode, size and depth, the secure one half as fast.
func secureRun() []Row {
	crc := synthRow("tcp", 64, 26600, []uint64{26500, 26600, 26700}, 10)
	sec := synthRow("tcp", 64, 12400, []uint64{12300, 12400, 12500}, 20)
	crc.ConnMode, sec.ConnMode = "crc", "secure"
	return []Row{crc, sec}
}

// TestCompareConnMode compares a --secure run with itself, and with its
// rows in the other order: each row pairs with its own connection mode, so
// every row is within the noise and the geomean is nil.
func TestCompareConnMode(t *testing.T) {
	a := secureRun()
	for _, b := range [][]Row{a, {a[1], a[0]}} {
		var out bytes.Buffer
		if err := Compare(&out, "a", Run{Msgr: a}, "b", Run{Msgr: b}); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if n := strings.Count(s, "~ (no significant difference)"); n != 2 {
			t.Errorf("%d rows within the noise, want 2:\n%s", n, s)
		}
		for _, want := range []string{"tcp stream 64 depth 16  ", "tcp/secure stream 64 depth 16  ", "geomean  ", "+0.00%"} {
			if !strings.Contains(s, want) {
				t.Errorf("comparison lacks %q:\n%s", want, s)
			}
		}
		if strings.Contains(s, "only in") {
			t.Errorf("a row went unpaired:\n%s", s)
		}
	}

	// A secure row has no counterpart in a run without --secure.
	var out bytes.Buffer
	if err := Compare(&out, "a", Run{Msgr: a}, "b", Run{Msgr: a[:1]}); err != nil {
		t.Fatal(err)
	}
	if want := "only in A: tcp/secure stream 64 depth 16"; !strings.Contains(out.String(), want) {
		t.Errorf("comparison lacks %q:\n%s", want, out.String())
	}
}

// TestRowKeyConnMode: a row without conn_mode (no --auth or --secure, or a
// file from before the field) keys as before, and as a crc row does; a
// secure row keys apart.
func TestRowKeyConnMode(t *testing.T) {
	plain := synthRow("tcp", 64, 1000, []uint64{1000, 1000, 1000}, 10)
	crc, sec := plain, plain
	crc.ConnMode, sec.ConnMode = "crc", "secure"
	keys := msgrCmpRows([]Row{plain, crc, sec})
	if keys[0].key != "tcp stream 64 depth 16" || keys[1].key != keys[0].key || keys[2].key != "tcp/secure stream 64 depth 16" {
		t.Errorf("keys %q, %q, %q", keys[0].key, keys[1].key, keys[2].key)
	}
	zc := sec
	zc.ZeroCopy = true
	fab := synthRow(FabricTransport, 64, 1000, nil, 10)
	fab.Provider = "verbs"
	for _, c := range []struct {
		r    Row
		want string
	}{{plain, "tcp"}, {crc, "tcp"}, {sec, "tcp/secure"}, {zc, "tcp/secure zero-copy"}, {fab, "raw-fabric(verbs)"}} {
		if got := rowLabel(&c.r); got != c.want {
			t.Errorf("rowLabel(%+v) = %q, want %q", c.r.ConnMode, got, c.want)
		}
	}
}

// TestPlotSeriesConnMode: the plots draw a --secure run's crc and secure
// rows as two lines, not one.
func TestPlotSeriesConnMode(t *testing.T) {
	rows := secureRun()
	if got, want := transportsOf(rows), []string{"tcp", "tcp/secure"}; !reflect.DeepEqual(got, want) {
		t.Errorf("series %q, want %q", got, want)
	}
	files, err := PlotMsgr(t.TempDir(), "svg", rows)
	if err != nil || len(files) != 2 {
		t.Fatalf("PlotMsgr: %v, %v", files, err)
	}
}

// TestReportRawRatioConnMode: with --secure and --baseline, the crc and
// secure rows' ratios to raw TCP say which is which.
func TestReportRawRatioConnMode(t *testing.T) {
	rows := secureRun()
	for i := range rows {
		rows[i].VsRawBytesPerSec = float64(i + 1)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "messenger / raw TCP") })
	if i < 0 || i+2 >= len(lines) ||
		!strings.Contains(lines[i+1], "tcp stream size 64 depth 16:") || !strings.Contains(lines[i+2], "tcp/secure stream size 64 depth 16:") {
		t.Errorf("raw TCP ratios:\n%s", out.String())
	}
}

// TestCompareWarnsOfDataCRC: runs whose messenger rows differ in the data
// CRC (--no-data-crc, recorded in the rows) compare with a warning, as
// runs under different TCP congestion controls do; runs that agree, or a
// file from before the field against one with the CRC on, without.
func TestCompareWarnsOfDataCRC(t *testing.T) {
	on := []Row{synthRow("tcp", 64, 1000, []uint64{1000, 1000, 1000}, 10)}
	off := []Row{on[0]}
	off[0].NoDataCRC = true
	for _, c := range []struct {
		a, b []Row
		warn bool
	}{{on, off, true}, {off, on, true}, {on, on, false}, {off, off, false}} {
		var out bytes.Buffer
		if err := Compare(&out, "a", Run{Msgr: c.a}, "b", Run{Msgr: c.b}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "without the data CRC (--no-data-crc)"); got != c.warn {
			t.Errorf("A no_data_crc %v, B %v: warned %v, want %v:\n%s", c.a[0].NoDataCRC, c.b[0].NoDataCRC, got, c.warn, out.String())
		}
	}
}

// TestCompareWarnsOfDuplicateRows: two rows of one run under one key
// (they differ in something the key leaves out, as crc and secure rows
// once did) are named in a warning, not silently folded into one.
func TestCompareWarnsOfDuplicateRows(t *testing.T) {
	r := synthRow("tcp", 64, 1000, []uint64{1000, 1000, 1000}, 10)
	var out bytes.Buffer
	if err := Compare(&out, "a", Run{Msgr: []Row{r, r}}, "b", Run{Msgr: []Row{r}}); err != nil {
		t.Fatal(err)
	}
	if want := `warning: A has more than one row of "tcp stream 64 depth 16"`; !strings.Contains(out.String(), want) {
		t.Errorf("comparison lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	if err := Compare(&out, "a", Run{Msgr: secureRun()}, "b", Run{Msgr: secureRun()}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "more than one row") {
		t.Errorf("a --secure run's crc and secure rows read as duplicates:\n%s", out.String())
	}
}
