package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// TestRunMsgr runs a short benchmark of every mode against its baseline
// and checks the rows are complete. It checks no speed: that is for
// `osprey bench`, not for tests on a shared machine.
func TestRunMsgr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var seen int
	rows, err := RunMsgr(ctx, MsgrOptions{
		Sizes: []int{64, 4 << 10}, Depths: []int{1, 8}, Modes: []Mode{Stream, PingPong},
		Duration: 150 * time.Millisecond, Warmup: 20 * time.Millisecond, Baseline: true, Segment: 50 * time.Millisecond,
		OnRow: func(Row) { seen++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 16 || seen != 16 {
		t.Fatalf("got %d rows (%d reported), want 16", len(rows), seen)
	}
	combos := map[[4]any]bool{}
	for _, r := range rows {
		combos[[4]any{r.Transport, r.Mode, r.Size, r.Depth}] = true
		if r.Transport != "tcp" && r.Transport != RawTransport {
			t.Errorf("row transport %q", r.Transport)
		}
		if r.TCPCongestion != tcpCongestion() {
			t.Errorf("%s row: tcp_congestion %q, this machine has %q", r.Transport, r.TCPCongestion, tcpCongestion())
		}
		for name, v := range map[string]float64{
			"msgs": float64(r.Msgs), "seconds": r.Seconds, "msgs_per_sec": r.MsgsPerSec,
			"bytes_per_sec": r.BytesPerSec, "p50_us": r.P50Us, "p99_us": r.P99Us,
			"p999_us": r.P999Us, "max_us": r.MaxUs, "cpu_s": r.CPUSeconds,
		} {
			if !(v > 0) {
				t.Errorf("%s %s size %d depth %d: %s = %v, want > 0", r.Transport, r.Mode, r.Size, r.Depth, name, v)
			}
		}
		if !(r.P50Us <= r.P99Us && r.P99Us <= r.P999Us && r.P999Us <= r.MaxUs) {
			t.Errorf("%+v: percentiles out of order", r)
		}
		if r.Seconds < 0.1 || r.Seconds > 1 {
			t.Errorf("%+v: measured %.3fs of 0.15s", r, r.Seconds)
		}
		if r.Transport == "tcp" && (r.VsRawP50 <= 0 || r.VsRawBytesPerSec <= 0) {
			t.Errorf("%+v: no ratio to the baseline", r)
		}
	}
	if len(combos) != 16 {
		t.Errorf("%d distinct rows, want 16", len(combos))
	}

	var buf bytes.Buffer
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &objs); err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(rows) {
		t.Fatalf("JSON has %d objects, want %d", len(objs), len(rows))
	}
	for i, o := range objs {
		checkJSONKeys(t, o, msgrJSONKeys)
		checkHistAndSegments(t, o, rows[i].Msgs)
		for _, k := range []string{"transport", "mode", "size", "depth", "msgs_per_sec", "bytes_per_sec",
			"p50_us", "p99_us", "p999_us", "max_us", "cpu_s", "cpu_s_per_gb",
			"seg_fastest_per_sec", "seg_fastest_bytes_per_sec"} { // slower segments may be empty on a loaded machine
			v, ok := o[k]
			if !ok {
				t.Errorf("JSON object %v lacks %q", o, k)
				continue
			}
			if s, isStr := v.(string); isStr {
				if s == "" {
					t.Errorf("JSON %q is empty", k)
				}
			} else if f, _ := v.(float64); !(f > 0) {
				t.Errorf("JSON %q = %v, want > 0", k, v)
			}
		}
	}
	buf.Reset()
	if err := WriteTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"transport", "raw-tcp", "pingpong", "4KiB", "messenger / raw TCP", "p50", "bytes/s",
		"seg msgs/s slow/med/fast", "cpu s/GB"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}

// TestCongestionControl checks which rows carry the TCP congestion control
// and that the table names each value once.
func TestCongestionControl(t *testing.T) {
	for _, c := range []struct {
		r    Row
		want bool
	}{
		{Row{Transport: "tcp"}, true},
		{Row{Transport: RawTransport}, true},
		{Row{Transport: "rdma+tcp", Provider: "tcp"}, true},
		{Row{Transport: "rdma+sockets", Provider: "sockets"}, true},
		{Row{Transport: FabricTransport, Provider: "sockets"}, true},
		{Row{Transport: "rdma+verbs", Provider: "verbs"}, false},
		{Row{Transport: FabricTransport, Provider: "verbs"}, false},
	} {
		if got := overTCP(&c.r); got != c.want {
			t.Errorf("overTCP(%s, provider %q) = %v, want %v", c.r.Transport, c.r.Provider, got, c.want)
		}
	}
	rows := []Row{
		{Transport: "tcp", Mode: Stream, Size: 64, Depth: 1, TCPCongestion: "bbr"},
		{Transport: RawTransport, Mode: Stream, Size: 64, Depth: 1, TCPCongestion: "bbr"},
		{Transport: "rdma+verbs", Provider: "verbs", Mode: Stream, Size: 64, Depth: 1},
		{Transport: "tcp", Mode: Stream, Size: 64, Depth: 1, TCPCongestion: "cubic"}, // a row from another machine
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if want := "TCP congestion control: bbr, cubic"; !strings.Contains(buf.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, buf.String())
	}
	buf.Reset()
	if err := WriteTable(&buf, rows[2:3]); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "congestion") {
		t.Errorf("a verbs-only table names a TCP congestion control:\n%s", buf.String())
	}
}

// msgrJSONKeys are the keys every msgr row has in --json (the omitempty
// ones, provider, zero_copy and vs_raw_*, are not always there): the
// messenger issue's and issue 6's. Tests and docs rely on them.
var msgrJSONKeys = []string{
	"transport", "mode", "size", "depth", "msgs", "seconds", "msgs_per_sec", "bytes_per_sec",
	"p50_us", "p99_us", "p999_us", "max_us", "mean_us", "cpu_s", "cpu_us_per_msg", "allocs_per_msg",
	"cpu_s_per_gb", "segment_s", "segment_counts",
	"seg_slowest_per_sec", "seg_median_per_sec", "seg_fastest_per_sec",
	"seg_slowest_bytes_per_sec", "seg_median_bytes_per_sec", "seg_fastest_bytes_per_sec",
	"latency_hist", "faults", "reconnects",
}

func checkJSONKeys(t *testing.T, o map[string]any, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := o[k]; !ok {
			t.Errorf("JSON row lacks %q: %v", k, o)
		}
	}
}

// checkHistAndSegments checks a JSON row's histogram holds its n
// completions in ascending, non-overlapping buckets, and that it has
// segments whose counts add up to at most n.
func checkHistAndSegments(t *testing.T, o map[string]any, n uint64) {
	t.Helper()
	hist, _ := o["latency_hist"].([]any)
	var total float64
	prevHi := -1.0
	for _, b := range hist {
		m := b.(map[string]any)
		lo, hi, c := m["lo_ns"].(float64), m["hi_ns"].(float64), m["count"].(float64)
		if lo > hi || lo <= prevHi || c <= 0 {
			t.Errorf("histogram bucket %v after hi %v", m, prevHi)
		}
		prevHi, total = hi, total+c
	}
	if uint64(total) != n {
		t.Errorf("histogram holds %v values, the row %d", total, n)
	}
	segs, _ := o["segment_counts"].([]any)
	var sum float64
	for _, c := range segs {
		sum += c.(float64)
	}
	if len(segs) == 0 || uint64(sum) > n || o["segment_s"].(float64) <= 0 {
		t.Errorf("segments %v (width %v) for %d completions", segs, o["segment_s"], n)
	}
}

func TestRunMsgrUnknownTransport(t *testing.T) {
	_, err := RunMsgr(context.Background(), MsgrOptions{Transports: []string{"tcp", "nosuch"}, Duration: time.Millisecond})
	if !errors.Is(err, msgr.ErrNoTransport) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Fatalf("err = %v, want ErrNoTransport naming the scheme", err)
	}
}

func TestRunMsgrBadOptions(t *testing.T) {
	for _, o := range []MsgrOptions{
		{Sizes: []int{-1}}, {Sizes: []int{128 << 20}}, {Depths: []int{0}}, {Modes: []Mode{"burst"}}, {Duration: -time.Second},
	} {
		if _, err := RunMsgr(context.Background(), o); err == nil {
			t.Errorf("RunMsgr(%+v) accepted", o)
		}
	}
}

// TestRunMsgrCancelled: a run cancelled before it starts, or in the
// middle of a stream row (Ctrl-C), fails as cancelled (the CLI's
// "interrupted", exit 130), not as messages still in flight (a loss).
func TestRunMsgrCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunMsgr(ctx, MsgrOptions{Sizes: []int{64}, Depths: []int{4}, Modes: []Mode{Stream}}); err == nil {
		t.Fatal("a cancelled run succeeded")
	}
	for _, mode := range []Mode{Stream, PingPong} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel) // mid-row: the row runs 10 s
		_, err := RunMsgr(ctx, MsgrOptions{Sizes: []int{4096}, Depths: []int{16}, Modes: []Mode{mode}, Duration: 10 * time.Second, Warmup: 50 * time.Millisecond})
		if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "after the end") {
			t.Errorf("%v cancelled mid-row: %v, want context.Canceled", mode, err)
		}
	}
}

// TestPingFront checks the hand-written front is what protobuf makes of a
// BenchPing, both ways.
func TestPingFront(t *testing.T) {
	for _, c := range []struct {
		id   uint64
		sent int64
	}{{1, 1}, {12345, time.Now().UnixNano()}, {^uint64(0), 1<<63 - 1}} {
		b := appendPing(nil, c.id, c.sent)
		if len(b) > maxFrontBytes {
			t.Errorf("front of %d bytes, above maxFrontBytes %d", len(b), maxFrontBytes)
		}
		var pb msgrpb.BenchPing
		if err := proto.Unmarshal(b, &pb); err != nil || pb.GetId() != c.id || pb.GetSentUnixNano() != c.sent {
			t.Errorf("proto.Unmarshal(appendPing(%d, %d)) = %v, %v", c.id, c.sent, &pb, err)
		}
		m, err := proto.Marshal(&msgrpb.BenchPing{Id: c.id, SentUnixNano: c.sent})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m, b) {
			t.Errorf("proto.Marshal = %x, appendPing = %x", m, b)
		}
		id, sent, err := parsePing(m)
		if err != nil || id != c.id || sent != c.sent {
			t.Errorf("parsePing = %d, %d, %v; want %d, %d", id, sent, err, c.id, c.sent)
		}
	}
	// Unknown fields are skipped, as proto does; garbage is an error.
	b := appendPing(nil, 7, 9)
	b = append(b, 0x1a, 2, 'h', 'i') // field 3, bytes
	if id, sent, err := parsePing(b); err != nil || id != 7 || sent != 9 {
		t.Errorf("parsePing with an unknown field = %d, %d, %v", id, sent, err)
	}
	if _, _, err := parsePing([]byte{0x08}); err == nil {
		t.Errorf("parsePing accepted a truncated front")
	}
	if n := testing.AllocsPerRun(100, func() { b = appendPing(b[:0], 1<<40, 1<<62) }); n != 0 {
		t.Errorf("appendPing allocates %v times", n)
	}
}

func TestWindow(t *testing.T) {
	w := newWindow(4, 2)
	stop := make(chan struct{})
	for range 4 {
		if !w.acquire(stop) {
			t.Fatal("acquire failed with room")
		}
	}
	if !w.full() {
		t.Fatal("window of 4 with 4 in flight is not full")
	}
	// A full window waits for batch completions, from another goroutine.
	go func() {
		for range 4 {
			w.complete()
		}
	}()
	if !w.acquire(stop) {
		t.Fatal("acquire failed")
	}
	go w.complete() // the fifth
	if !w.drain(stop) {
		t.Fatal("drain failed")
	}
	if w.sent != 5 || w.done.Load() != 5 {
		t.Fatalf("sent %d done %d after drain, want 5 and 5", w.sent, w.done.Load())
	}
	// stop ends a wait that would never end.
	for w.acquire(stop) && !w.full() {
	}
	close(stop)
	if w.acquire(stop) {
		t.Fatal("acquire on a full window succeeded after stop")
	}
}

func TestReportFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{FormatCount(950), "950"}, {FormatCount(612345), "612.3k"}, {FormatCount(2130000), "2.13M"},
		{FormatRate(812.3e6), "812.3 MB/s"}, {FormatRate(4.123e9), "4.12 GB/s"}, {FormatRate(10), "10 B/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, nil); err != nil || strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("WriteJSON(nil) = %q, %v", buf.String(), err)
	}
}

// TestRunMsgrConnsAndRemote runs rows with two connections, first with
// both ends here, then against a ServeMsgr server as a second process
// would (the server runs in this test's process, but the rows reach it
// only by its address).
func TestRunMsgrConnsAndRemote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := MsgrOptions{Sizes: []int{64, 4 << 10}, Depths: []int{4}, Conns: 2,
		Duration: 100 * time.Millisecond, Warmup: 10 * time.Millisecond}
	rows, err := RunMsgr(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startServeMsgr(ctx, t, ServeOptions{})
	o.Remote = addr
	remote, err := RunMsgr(ctx, o)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	rows = append(rows, remote...)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8", len(rows))
	}
	for i, r := range rows {
		if r.Conns != 2 || r.Msgs == 0 || r.P50Us <= 0 || r.Transport != "tcp" {
			t.Errorf("%+v", r)
		}
		if wantRemote := i >= 4; (r.Remote == addr) != wantRemote {
			t.Errorf("row %d: remote %q", i, r.Remote)
		}
	}

	for _, bad := range []MsgrOptions{
		{Remote: addr, Baseline: true}, {Conns: 2, Baseline: true}, {Conns: -1}, {Remote: "127.0.0.1:7300"},
	} {
		if _, err := RunMsgr(ctx, bad); err == nil {
			t.Errorf("RunMsgr(%+v) accepted", bad)
		}
	}
}

// startServeMsgr runs ServeMsgr with o on a free tcp port of 127.0.0.1,
// as a second process would, until stop, which reports its error.
func startServeMsgr(ctx context.Context, t *testing.T, o ServeOptions) (addr string, stop func()) {
	t.Helper()
	srvCtx, cancel := context.WithCancel(ctx)
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	o.Addr, o.Listening = "tcp://127.0.0.1:0", func(a string) { addrc <- a }
	go func() { served <- ServeMsgr(srvCtx, o) }()
	select {
	case addr = <-addrc:
	case err := <-served:
		cancel()
		t.Fatal(err)
	}
	return addr, func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeMsgr: %v", err)
		}
	}
}

// TestRunMsgrFaults runs rows with faults injected into every messenger,
// with both ends here and against a ServeMsgr server that injects too:
// the rows complete, every message delivered exactly once (RunMsgr checks
// it), and report their faults and reconnects.
func TestRunMsgrFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	faults := msgr.FaultInjection{EveryNFrames: 40}
	o := MsgrOptions{Sizes: []int{64}, Depths: []int{8}, Conns: 2, Modes: []Mode{Stream, PingPong},
		Duration: 200 * time.Millisecond, Warmup: 20 * time.Millisecond, Faults: faults}
	rows, err := RunMsgr(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var stop func()
	o.Remote, stop = startServeMsgr(ctx, t, ServeOptions{Faults: faults})
	remote, err := RunMsgr(ctx, o)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(rows, remote...) {
		if r.InjectSocketFailures != 40 || r.Faults < 2 || r.Reconnects < 2 || r.Reconnects > r.Faults || r.Msgs == 0 {
			t.Errorf("%s %s remote %q: inject %d, faults %d, reconnects %d, msgs %d", r.Transport, r.Mode, r.Remote,
				r.InjectSocketFailures, r.Faults, r.Reconnects, r.Msgs)
		}
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rows); err != nil || !strings.Contains(buf.String(), "reconnects") {
		t.Errorf("table without faults and reconnects (%v):\n%s", err, buf.String())
	}
	for _, bad := range []msgr.FaultInjection{{EveryNFrames: -1}, {Probability: 2}} {
		if _, err := RunMsgr(ctx, MsgrOptions{Faults: bad}); err == nil {
			t.Errorf("RunMsgr with faults %+v accepted", bad)
		}
	}
}

// TestCheckDelivered: a row whose counts show a lost or a duplicated
// message fails, in each mode; equal counts pass.
func TestCheckDelivered(t *testing.T) {
	for _, c := range []struct {
		mode           Mode
		remote         bool
		sent, got      uint64
		wantErr, cause string
	}{
		{Stream, false, 100, 100, "", ""},
		{Stream, false, 100, 99, "99 handled by the server", "lost"},
		{Stream, true, 100, 101, "101 acknowledged", "duplicated"},
		{PingPong, false, 100, 100, "", ""},
		{PingPong, false, 100, 101, "101 answered", "duplicated"},
	} {
		r := &msgrRow{mode: c.mode, remote: c.remote}
		conn := &msgrConn{row: r, win: newWindow(8, 2)}
		conn.nextID.Store(c.sent)
		if c.mode == PingPong {
			conn.replies.Store(c.got)
		} else {
			conn.win.done.Store(int64(c.got))
		}
		r.conns = []*msgrConn{conn}
		err := r.checkDelivered()
		if (err == nil) != (c.wantErr == "") || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s remote %v, %d sent, %d %s: %v", c.mode, c.remote, c.sent, c.got, c.cause, err)
		}
	}
}

// TestRunMsgrAuth runs rows with authenticated sessions: every messenger
// gets a keyring of one CA made for the run, named as the messenger is
// (msgr refuses a keyring of another name), and the rows move messages.
func TestRunMsgrAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := &MsgrOptions{Auth: true}
	a, err := o.authFor("osd.0", msgr.ModeCRC)
	if err != nil {
		t.Fatal(err)
	}
	b, err := o.authFor("client.bench.0", msgr.ModeCRC)
	if err != nil {
		t.Fatal(err)
	}
	if a.Keyring.Entity != "osd.0" || b.Keyring.Entity != "client.bench.0" || !a.Keyring.CA.Equal(b.Keyring.CA) {
		t.Fatalf("keyrings of %s and %s, one CA: %v", a.Keyring.Entity, b.Keyring.Entity, a.Keyring.CA.Equal(b.Keyring.CA))
	}
	if none, _ := (&MsgrOptions{}).authFor("osd.0", msgr.ModeCRC); none != nil {
		t.Fatal("auth options without Auth")
	}
	rows, err := RunMsgr(ctx, MsgrOptions{Sizes: []int{64}, Depths: []int{4}, Modes: []Mode{Stream, PingPong}, Conns: 2,
		Duration: 100 * time.Millisecond, Warmup: -1, Auth: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Msgs == 0 {
			t.Errorf("%s row moved nothing", r.Mode)
		}
	}
	if _, err := RunMsgr(ctx, MsgrOptions{Remote: "tcp://127.0.0.1:1", Auth: true}); err == nil || !strings.Contains(err.Error(), "auth") {
		t.Fatalf("auth against a remote server: %v", err)
	}
}

// TestRunMsgrSecure: with Secure each combination runs in crc and then in
// secure mode, each row says its mode and handshake, and the table sets
// secure beside crc.
func TestRunMsgrSecure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := RunMsgr(ctx, MsgrOptions{Sizes: []int{64}, Depths: []int{4}, Modes: []Mode{Stream, PingPong},
		Duration: 100 * time.Millisecond, Warmup: -1, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, r := range rows {
		modes = append(modes, string(r.Mode)+"/"+r.ConnMode)
		if r.Msgs == 0 || r.HandshakeUs <= 0 {
			t.Errorf("%s %s row: %d msgs, handshake %v µs", r.Mode, r.ConnMode, r.Msgs, r.HandshakeUs)
		}
		// The distribution: every sample taken, ordered, and each a
		// handshake's time, not a nanosecond or a timeout.
		if r.Handshakes != HandshakeSamples || !(0 < r.HandshakeP50Us && r.HandshakeP50Us <= r.HandshakeP99Us &&
			r.HandshakeP99Us <= r.HandshakeMaxUs && r.HandshakeMaxUs < float64(shutdownTimeout/time.Microsecond)) ||
			r.HandshakeCPUUs <= 0 {
			t.Errorf("%s %s row: %d handshakes, p50/p99/max %v/%v/%v µs, cpu %v µs", r.Mode, r.ConnMode,
				r.Handshakes, r.HandshakeP50Us, r.HandshakeP99Us, r.HandshakeMaxUs, r.HandshakeCPUUs)
		}
	}
	if want := "stream/crc stream/secure pingpong/crc pingpong/secure"; strings.Join(modes, " ") != want {
		t.Fatalf("rows %v, want %s", modes, want)
	}
	// The crc rows authenticate too: the handshake ratio is of the mode
	// (sealing), not of TLS against no handshake at all.
	so := MsgrOptions{Secure: true}
	if a, err := so.authFor("osd.0", msgr.ModeCRC); err != nil || a == nil || !slices.Equal(a.Modes, []msgr.Mode{msgr.ModeCRC}) {
		t.Fatalf("a --secure run's crc rows: auth %+v, %v; want authenticated in crc mode", a, err)
	}
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "tcp/secure") || !strings.Contains(b.String(), "secure / crc, same run:") ||
		!strings.Contains(b.String(), "bytes/s") || !strings.Contains(b.String(), "p50") ||
		!strings.Contains(b.String(), "handshake µs p50/p99/max") {
		t.Fatalf("table:\n%s", b.String())
	}
	if _, err := RunMsgr(ctx, MsgrOptions{Remote: "tcp://127.0.0.1:1", Secure: true}); err == nil || !strings.Contains(err.Error(), "secure") {
		t.Fatalf("secure against a remote server: %v", err)
	}
}

// TestRunMsgrNoServer: a --connect row with nothing listening fails at
// the first dial, with its error, not after the connect timeout with a
// deadline (perftest's "Couldn't connect").
func TestRunMsgrNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + ln.Addr().String()
	ln.Close() // a port nothing listens on
	_, err = RunMsgr(t.Context(), MsgrOptions{Remote: addr, Sizes: []int{64}, Depths: []int{1}, Modes: []Mode{Stream}, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "connection refused") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a row against %s, where nothing listens: %v", addr, err)
	}
}

// TestStarvedBaselineFlagged: a messenger row's ratios to a raw-fabric row
// that got less than its two cores carry the raw row's Starved flag (in
// --json and --csv) and say so in the table, where they read as figures.
func TestStarvedBaselineFlagged(t *testing.T) {
	rows := []Row{
		{Transport: "rdma+tcp", Provider: "tcp", Mode: Stream, Size: 64, Depth: 1, BytesPerSec: 175e6, P50Us: 10},
		{Transport: FabricTransport, Provider: "tcp", Mode: Stream, Size: 64, Depth: 1, BytesPerSec: 1e6, P50Us: 4000, Starved: true},
		{Transport: "rdma+tcp", Provider: "tcp", Mode: Stream, Size: 4096, Depth: 1, BytesPerSec: 100e6, P50Us: 10},
		{Transport: FabricTransport, Provider: "tcp", Mode: Stream, Size: 4096, Depth: 1, BytesPerSec: 200e6, P50Us: 8},
	}
	CompareToRaw(rows)
	if !rows[0].Starved || rows[0].VsRawBytesPerSec != 175 || rows[2].Starved {
		t.Fatalf("ratios: %+v / %+v", rows[0], rows[2])
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !regexp.MustCompile(`rdma\+tcp stream size 64 depth 1:\s+bytes/s 175.00x raw\s+\(the raw row was starved of CPU: not a ratio to trust\)`).MatchString(out) {
		t.Fatalf("the starved ratio's line:\n%s", out)
	}
	if !regexp.MustCompile(`rdma\+tcp stream size 4KiB depth 1:\s+bytes/s 0.50x raw\s+\(higher is better\)`).MatchString(out) {
		t.Fatalf("a ratio to a row that was not starved:\n%s", out)
	}
}

// TestTailQuantilesNeedSamples: a row of 50 messages (64 MiB ones, say)
// shows no p99 or p99.9, which would be its slowest message; one of 500
// shows p99 but no p99.9; the table says why.
func TestTailQuantilesNeedSamples(t *testing.T) {
	rows := []Row{
		{Transport: "tcp", Mode: Stream, Size: 64 << 20, Depth: 1, Msgs: 50, P50Us: 100, P99Us: 900, P999Us: 950, MaxUs: 950},
		{Transport: "tcp", Mode: Stream, Size: 1 << 20, Depth: 1, Msgs: 500, P50Us: 10, P99Us: 90, P999Us: 95, MaxUs: 95},
		{Transport: "tcp", Mode: Stream, Size: 64, Depth: 1, Msgs: 5000, P50Us: 1, P99Us: 9, P999Us: 9.5, MaxUs: 9.5},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, re := range []string{
		`64MiB\s+1\s.*\s100\.0\s+-\s+-\s+950\.0\s`,
		`1MiB\s+1\s.*\s10\.0\s+90\.0\s+-\s+95\.0\s`,
		`\s64\s+1\s.*\s1\.0\s+9\.0\s+9\.5\s+9\.5\s`,
		`fewer than 1,000 no p99\.9`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("no %q in the table:\n%s", re, out)
		}
	}
	b.Reset()
	objRows := []ObjRow{
		{Op: OpPut, Size: 64 << 20, Concurrency: 1, Transport: "tcp", Ops: 40, P50Us: 2000, P99Us: 9000, MaxUs: 9000},
		{Op: OpGet, Size: 4096, Concurrency: 1, Transport: "tcp", Ops: 4000, P50Us: 200, P99Us: 900, MaxUs: 1000},
	}
	if err := WriteObjTable(&b, objRows); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, re := range []string{`put\s+64MiB.*\s2\.00\s+-\s+9\.00\s`, `get\s+4KiB.*\s0\.200\s+0\.900\s+1\.00\s`, `fewer than 100 ops has no p99`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("no %q in the object table:\n%s", re, out)
		}
	}
}
