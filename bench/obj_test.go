package bench

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr/wire"
)

// objJSONKeys are the keys every object row has in --json (mix only in a
// mix's rows).
var objJSONKeys = []string{
	"op", "size", "concurrency", "replicas", "transport", "objects", "ops", "errors", "seconds",
	"ops_per_sec", "bytes_per_sec", "p50_us", "p99_us", "p999_us", "max_us", "mean_us",
	"cpu_s", "cpu_us_per_op", "cpu_s_per_gb", "disk_write_bytes_per_sec", "disk_read_bytes_per_sec", "disk_share",
	"segment_s", "segment_counts",
	"seg_slowest_per_sec", "seg_median_per_sec", "seg_fastest_per_sec",
	"seg_slowest_bytes_per_sec", "seg_median_bytes_per_sec", "seg_fastest_bytes_per_sec",
	"latency_hist",
}

// TestRunObj runs every operation and a mix briefly against a one-OSD
// local cluster and checks the rows are complete. Speed is not checked.
func TestRunObj(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mix, err := ParseMix("get=50,put=30,delete=20")
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	rows, err := RunObj(ctx, ObjOptions{
		OSDs: 1, PGs: 8, Dir: t.TempDir(), Sizes: []int{4 << 10},
		Ops: ObjOps, Mix: mix, Objects: 40, Concurrency: 4,
		Duration: 150 * time.Millisecond, Segment: 50 * time.Millisecond,
		OnRow: func(ObjRow) { seen++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, objRowLabel(&r))
	}
	want := []string{"put", "get", "stat", "list", "delete",
		"mix get=50,put=30,delete=20: put", "mix get=50,put=30,delete=20: get",
		"mix get=50,put=30,delete=20: delete", "mix get=50,put=30,delete=20"}
	// A mix's rows come in ObjOps order, then the total.
	if !slices.Equal(got, want) || seen != len(rows) {
		t.Fatalf("rows %q (%d reported), want %q", got, seen, want)
	}
	for _, r := range rows {
		if r.Ops == 0 && r.Op != OpDelete || r.Errors != 0 || r.Replicas != 1 || r.Transport != "tcp/tcp" || r.CPUScope != CPUClientAndCluster {
			t.Errorf("%s: %d ops, %d errors, %d replicas, transport %q, cpu scope %q", objRowLabel(&r), r.Ops, r.Errors, r.Replicas, r.Transport, r.CPUScope)
		}
		if r.Ops > 0 && !(r.P50Us > 0 && r.P50Us <= r.P99Us && r.P99Us <= r.MaxUs) {
			t.Errorf("%s: percentiles %v %v %v", objRowLabel(&r), r.P50Us, r.P99Us, r.MaxUs)
		}
		moves := r.Op == OpPut || r.Op == OpGet || r.Op == OpMixed
		if moves != (r.BytesPerSec > 0) {
			t.Errorf("%s: %v bytes/s", objRowLabel(&r), r.BytesPerSec)
		}
		// Beside the disk: every row has the ceiling, puts and gets
		// their share of it.
		if r.DiskWriteBytesPerSec <= 0 || r.DiskReadBytesPerSec <= 0 || (r.Mix == "" && (r.Op == OpPut || r.Op == OpGet)) != (r.DiskShare > 0) {
			t.Errorf("%s: disk %v/%v B/s, share %v", objRowLabel(&r), r.DiskWriteBytesPerSec, r.DiskReadBytesPerSec, r.DiskShare)
		}
		// CPU is on the single rows and the mix's total only.
		if (r.Mix == "" || r.Op == OpMixed) != (r.CPUSeconds > 0) {
			t.Errorf("%s: cpu %v s", objRowLabel(&r), r.CPUSeconds)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var o map[string]any
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		checkJSONKeys(t, o, objJSONKeys)
		checkHistAndSegments(t, o, r.Ops)
	}
	var buf bytes.Buffer
	if err := WriteObjTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"seg ops/s slow/med/fast", "mix1:get", "mix1: get=50,put=30,delete=20", "stat", "list", "disk%", "disk: ", "cpu: this process's, the client's and the local cluster's"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, buf.String())
		}
	}
	t.Logf("\n%s", buf.String())
}

func TestParseMix(t *testing.T) {
	m, err := ParseMix("get=70, put=20,stat=10,list=0")
	if err != nil {
		t.Fatal(err)
	}
	if want := []MixWeight{{OpGet, 70}, {OpPut, 20}, {OpStat, 10}}; !slices.Equal(m, want) {
		t.Errorf("ParseMix = %v, want %v (a weight of 0 drops the operation)", m, want)
	}
	if s := FormatMix(m); s != "get=70,put=20,stat=10" {
		t.Errorf("FormatMix = %q", s)
	}
	for _, bad := range []string{"", "get", "get=x", "get=-1", "fly=3", "get=1,get=2", "get=0"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
	if _, err := ParseObjOp("Delete"); err != nil {
		t.Errorf("ParseObjOp is case-insensitive: %v", err)
	}
}

// TestObjBodyIncompressible: the default body is random (deflate cannot
// shrink it), the same each run, and --compressible's pattern is not.
func TestObjBodyIncompressible(t *testing.T) {
	ratio := func(b []byte) float64 {
		var out bytes.Buffer
		w, _ := flate.NewWriter(&out, flate.BestSpeed)
		w.Write(b)
		w.Close()
		return float64(out.Len()) / float64(len(b))
	}
	body := objBody(1<<20, false)
	if r := ratio(body); r < 0.99 {
		t.Errorf("the default body compresses to %.3f of its size", r)
	}
	if !bytes.Equal(body, objBody(1<<20, false)) {
		t.Error("the default body differs between runs")
	}
	if r := ratio(objBody(1<<20, true)); r > 0.05 {
		t.Errorf("the compressible body compresses only to %.3f", r)
	}
}

// TestMeasureDisk measures a temporary directory's disk and leaves nothing
// behind.
func TestMeasureDisk(t *testing.T) {
	dir := t.TempDir()
	c, err := MeasureDisk(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.WriteBytesPerSec <= 0 || c.ReadBytesPerSec <= 0 || c.Dir != dir {
		t.Fatalf("ceiling %+v", c)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left %v behind", left)
	}
	t.Logf("%s: write %.0f MB/s, read %.0f MB/s, O_DIRECT %v", dir, c.WriteBytesPerSec/1e6, c.ReadBytesPerSec/1e6, c.Direct)
}

// TestRunObjClientSharesClusterTransports: the client of a local cluster
// runs on the cluster's transports (local.Cluster.Transports), so over
// RDMA the process has one domain and one poller, not one more for it.
func TestRunObjClientSharesClusterTransports(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	var given []wire.Transport
	newObjClient = func(ctx context.Context, opts client.Options) (*client.Client, error) {
		given = opts.Transports
		return client.New(ctx, opts)
	}
	t.Cleanup(func() { newObjClient = client.New })
	_, err := RunObj(t.Context(), ObjOptions{OSDs: 1, PGs: 4, Dir: t.TempDir(), Sizes: []int{4 << 10}, Ops: []ObjOp{OpPut},
		Objects: 4, Concurrency: 1, Duration: 20 * time.Millisecond, Segment: 10 * time.Millisecond, NoCeiling: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(given) == 0 {
		t.Fatal("the client got no transports: it opened its own, not the cluster's")
	}
}

// TestMapTransports: a run against a cluster's seeds labels its rows with
// the networks of that cluster's map, not the local defaults (tcp/tcp
// for an rdma+tcp cluster, a stress probe saw).
func TestMapTransports(t *testing.T) {
	m, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: []string{"rdma+tcp://127.0.0.1:6800"},
		ClusterAddrs: []string{"tcp://127.0.0.1:6801"}, PGCount: 8, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := mapTransports(m); got != "rdma+tcp/tcp" {
		t.Fatalf("mapTransports = %q, want rdma+tcp/tcp", got)
	}
}

// TestFormatMs: sub-millisecond latencies keep three digits after the
// point, longer ones two.
func TestFormatMs(t *testing.T) {
	for us, want := range map[float64]string{71.2: "0.071", 999.4: "0.999", 1234.5: "1.23", 56789: "56.79"} {
		if got := formatMs(us); got != want {
			t.Errorf("formatMs(%v) = %q, want %q", us, got, want)
		}
	}
}
