package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/bench/rawfabric"
)

// TestCompareToFabric checks rdma+ rows are compared with raw-fabric on
// their provider and the others with raw-tcp.
func TestCompareToFabric(t *testing.T) {
	row := func(tr, prov string, mode Mode, bps, p50 float64) Row {
		return Row{Transport: tr, Provider: prov, Mode: mode, Size: 64, Depth: 1, BytesPerSec: bps, P50Us: p50, P99Us: 2 * p50}
	}
	rows := []Row{
		row("tcp", "", Stream, 50, 0), row("rdma+tcp", "tcp", Stream, 90, 0), row("rdma+verbs", "verbs", Stream, 10, 0),
		row(RawTransport, "", Stream, 100, 0), row(FabricTransport, "tcp", Stream, 100, 0),
		row("tcp", "", PingPong, 0, 3), row("rdma+tcp", "tcp", PingPong, 0, 13), row("rdma+sockets", "", PingPong, 0, 8),
		row(RawTransport, "", PingPong, 0, 2), row(FabricTransport, "tcp", PingPong, 0, 10), row(FabricTransport, "sockets", PingPong, 0, 4),
	}
	CompareToRaw(rows)
	for _, c := range []struct {
		i        int
		bps, p50 float64
	}{
		{0, 0.5, 0}, {1, 0.9, 0}, {2, 0, 0}, // no raw-fabric on verbs: no ratio, not raw-tcp's
		{5, 0, 1.5}, {6, 0, 1.3}, {7, 0, 2}, // a row without Provider takes the scheme's
	} {
		r := rows[c.i]
		if r.VsRawBytesPerSec != c.bps || r.VsRawP50 != c.p50 || c.p50 != 0 && r.VsRawP99 != c.p50 {
			t.Errorf("%s %s: vs raw bytes/s %v p50 %v p99 %v, want %v, %v", r.Transport, r.Mode, r.VsRawBytesPerSec, r.VsRawP50, r.VsRawP99, c.bps, c.p50)
		}
	}
	for _, i := range []int{3, 4, 8, 9, 10} {
		if r := rows[i]; r.VsRawBytesPerSec != 0 || r.VsRawP50 != 0 {
			t.Errorf("baseline row %+v got a ratio", r)
		}
	}

	var buf bytes.Buffer
	if err := WriteTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	tcpAt := strings.Index(out, "messenger / raw TCP")
	fabAt := strings.Index(out, "messenger / raw libfabric")
	if tcpAt < 0 || fabAt < tcpAt {
		t.Fatalf("table lacks its two ratio sections:\n%s", out)
	}
	for _, want := range []string{"raw-fabric(tcp)", "raw-fabric(sockets)"} {
		if !strings.Contains(out[:tcpAt], want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"bytes/s 0.90x raw", "p50 1.30x raw, p99 1.30x raw", "p50 2.00x raw"} {
		if !strings.Contains(out[fabAt:], want) {
			t.Errorf("raw libfabric ratios lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out[tcpAt:fabAt], "rdma+") || strings.Contains(out[fabAt:], "\n  tcp ") {
		t.Errorf("a row is in the wrong ratio section:\n%s", out)
	}
	t.Logf("\n%s", out)
}

func TestFabricProviders(t *testing.T) {
	t.Setenv("FI_PROVIDER", "sockets") // names no provider: it only filters libfabric's
	got := fabricProviders([]string{"tcp", "rdma+tcp", "rdma+", "rdma+verbs", "rdma+tcp", "mem"})
	if strings.Join(got, ",") != "tcp,verbs" {
		t.Errorf("fabricProviders = %q", got)
	}
	if p, ok := fabricProvider("rdma+tcp"); !ok || p != "tcp" {
		t.Errorf("with FI_PROVIDER=sockets, rdma+tcp runs on %q, %v", p, ok)
	}
}

// TestFabricRowNotBuilt checks the error of a binary without the rdma tag.
func TestFabricRowNotBuilt(t *testing.T) {
	if rawfabric.Built {
		t.Skip("built with -tags rdma")
	}
	o := MsgrOptions{Duration: 10 * time.Millisecond}
	_, err := runFabricRow(context.Background(), &o, "tcp", Stream, 64, 1)
	if !errors.Is(err, rawfabric.ErrNotBuilt) || !strings.Contains(err.Error(), "-tags rdma") {
		t.Errorf("err = %v, want ErrNotBuilt", err)
	}
}
