// Package bench measures Osprey's moving parts the way docs/ and
// TARGETS.md quote them, so a claim like "the messenger streams 1 MiB at
// 0.9x raw TCP" is something anyone can rerun: `osprey bench msgr` is
// RunMsgr plus the report in this package.
//
// The messenger benchmark runs both ends in one process on loopback. For
// every combination of size, depth and mode it builds a fresh pair of
// messengers, warms up, measures for a fixed time, and tears them down:
//
//   - stream: the client sends messages of Size payload bytes as fast as
//     it can, with at most Depth sent but not yet handled by the server.
//     Latency is one way (send to server handler), which under load is
//     mostly queueing.
//   - pingpong: the client keeps Depth requests outstanding; the server
//     echoes each (the same payload back) and every reply sends the next
//     request. Latency is the round trip; msgs/s counts round trips and
//     bytes/s counts one direction's payload.
//
// With a baseline the same pattern runs over a plain TCP socket pair, with
// no messenger, in the same run, so results can be quoted as ratios on a
// noisy machine. Both sides use the same in-process window and the same
// latency clock, so the only difference is what carries the bytes. For an
// rdma+PROVIDER transport the baseline also runs the pattern over raw
// libfabric send/recv on PROVIDER (package rawfabric), and its messenger
// rows are compared with that.
//
// Compare latencies with the baseline at depth 1, and throughput at any
// depth. Once a row saturates the link, the messenger's latency includes the
// time a message waits in its send queue (Send returns at once), while the
// raw writer has no queue: it blocks in write() and stamps the next message
// only when that returns, so fewer messages are really in flight and its
// latency leaves the queueing out.
//
// CPU is the process's user+system time (getrusage) during the measured
// interval, for both ends together; allocations are the Go heap objects
// allocated in that interval. Both are divided per message so the
// "zero allocations per message" target is checkable from the report.
//
// A row may run several connections (MsgrOptions.Conns), each from its own
// client messenger, and its server may be another process (ServeMsgr, the
// `--serve` end, with MsgrOptions.Remote): then a stream message is
// acknowledged by the server and its latency runs to the acknowledgement,
// since two hosts share no clock.
//
// Every row, of this benchmark and of the object one (RunObj), also counts
// its completions per time segment (segments.go) and keeps its whole
// latency histogram, so reports can show the spread over time, plots can
// draw CDFs, and two saved runs can be compared against their own noise
// (compare.go).
package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"
)

// Mode is a traffic pattern.
type Mode string

const (
	// Stream sends one way, keeping Depth messages in flight.
	Stream Mode = "stream"
	// PingPong sends requests the server echoes, Depth outstanding.
	PingPong Mode = "pingpong"
)

// ParseMode parses "stream" or "pingpong" ("ping-pong" is accepted too).
func ParseMode(s string) (Mode, error) {
	switch s {
	case "stream":
		return Stream, nil
	case "pingpong", "ping-pong":
		return PingPong, nil
	}
	return "", fmt.Errorf("mode %q: want stream or pingpong", s)
}

// RawTransport names baseline rows, which run on a plain TCP socket.
const RawTransport = "raw-tcp"

// OptionsError is the error of options a run cannot take (RunMsgr,
// RunObj): the caller's mistake, which the CLI answers as a usage error,
// not a failure of the run.
type OptionsError struct{ Err error }

func (e *OptionsError) Error() string { return e.Err.Error() }
func (e *OptionsError) Unwrap() error { return e.Err }

// Row is the result of one combination. JSON keys are part of the CLI's
// output contract (--json); keep them stable.
type Row struct {
	Transport string `json:"transport"`          // msgr address scheme, "raw-tcp" or "raw-fabric"
	Provider  string `json:"provider,omitempty"` // libfabric provider, of raw-fabric and rdma+ rows
	Mode      Mode   `json:"mode"`
	Size      int    `json:"size"`                // payload bytes per message
	Depth     int    `json:"depth"`               // messages in flight, per connection
	Conns     int    `json:"conns"`               // connections, each with its own client messenger
	Remote    string `json:"remote,omitempty"`    // the --serve server's address in a two-process run
	ZeroCopy  bool   `json:"zero_copy,omitempty"` // payloads from Conn.AllocPayload
	// NoDataCRC: a messenger row ran without the data CRC
	// (MsgrOptions.DisableDataCRC, --no-data-crc).
	NoDataCRC bool `json:"no_data_crc,omitempty"`
	// ConnMode is a messenger row's connection mode, "crc" or "secure"
	// (msgr.Mode), when the run authenticated (--auth, --secure).
	ConnMode string `json:"conn_mode,omitempty"`
	// HandshakeUs is a messenger row's first connection's setup, from
	// Connect to the session ready: dial, banner, auth (a TLS 1.3
	// handshake with --auth or --secure) and session, in microseconds.
	HandshakeUs float64 `json:"handshake_us,omitempty"`
	// Handshakes is how many more full handshakes the row measured
	// (HandshakeSamples, each a new authenticated session Connect to
	// ready, before the measured interval), and the others their
	// distribution, in microseconds.
	Handshakes     int     `json:"handshakes,omitempty"`
	HandshakeP50Us float64 `json:"handshake_p50_us,omitempty"`
	HandshakeP99Us float64 `json:"handshake_p99_us,omitempty"`
	HandshakeMaxUs float64 `json:"handshake_max_us,omitempty"`
	// HandshakeCPUUs is the process's CPU time per one of those
	// handshakes: both ends' unless the server is remote (--connect).
	// It reads the same on a loaded machine, where wall times do not.
	HandshakeCPUUs float64 `json:"handshake_cpu_us,omitempty"`
	Msgs           uint64  `json:"msgs"` // messages (round trips for pingpong) measured
	Seconds        float64 `json:"seconds"`

	// InjectSocketFailures is the messengers' fault injection, about one
	// link fault per N frames (msgr.FaultInjection.EveryNFrames, `bench
	// msgr --inject-socket-failures N`); 0 when off. Faults and Reconnects
	// are the link faults and reconnects of the row's client sessions,
	// summed over its connections, over the whole row (warmup and the
	// drain after the measured interval included): with injection on,
	// what the figures paid for. Raw rows have none.
	InjectSocketFailures int    `json:"inject_socket_failures,omitempty"`
	Faults               uint64 `json:"faults"`
	Reconnects           uint64 `json:"reconnects"`

	// TCPCongestion is the kernel's TCP congestion control on the machine
	// that ran the bench command, on rows whose bytes cross a TCP socket
	// (tcp, raw-tcp, and libfabric's tcp and sockets providers). It sets
	// loopback's ceiling: bbr paces the flow, so this machine's raw
	// libfabric row moved about 6.3 GB/s under bbr and 10.4 under cubic
	// (docs/benchmarks.md), and rows from machines that differ in it do
	// not compare.
	TCPCongestion string `json:"tcp_congestion,omitempty"`

	MsgsPerSec  float64 `json:"msgs_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`

	// Latency in microseconds: one way for stream, round trip for pingpong.
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`
	MeanUs float64 `json:"mean_us"`

	CPUSeconds   float64 `json:"cpu_s"`
	CPUUsPerMsg  float64 `json:"cpu_us_per_msg"`
	AllocsPerMsg float64 `json:"allocs_per_msg"`
	// CPUSecPerGB is CPU seconds per 10^9 payload bytes counted in
	// bytes_per_sec (one direction for pingpong); 0 for empty payloads.
	CPUSecPerGB float64 `json:"cpu_s_per_gb"`

	// Throughput per time segment and the whole latency histogram
	// (nanoseconds), from which any percentile or a CDF can be redrawn.
	Segments
	LatencyHist []HistBucket `json:"latency_hist"`

	// Messenger rows, when a baseline ran: messenger divided by the
	// baseline for the same size, depth and mode, which is raw-fabric on
	// the same provider for rdma+ rows and raw-tcp for the others.
	// Higher is better for bytes/s, lower for latencies.
	VsRawBytesPerSec float64 `json:"vs_raw_bytes_per_sec,omitempty"`
	VsRawP50         float64 `json:"vs_raw_p50,omitempty"`
	VsRawP99         float64 `json:"vs_raw_p99,omitempty"`
	// Starved: a raw-fabric row whose two busy-polling threads got less
	// than their two cores (other load), and a messenger row whose VsRaw
	// ratios are to such a row: they flatter or wrong the messenger.
	Starved bool `json:"starved,omitempty"`
}

// clock is the benchmark's time base: monotonic nanoseconds since start,
// so one-way latencies between two goroutines of the process are exact and
// immune to wall-clock steps. base converts it to a Unix time for the
// BenchPing front.
type clock struct {
	start time.Time
	base  int64
}

func newClock() clock {
	s := time.Now()
	return clock{start: s, base: s.UnixNano()}
}

func (c *clock) now() int64 { return int64(time.Since(c.start)) }

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// run is the timeline of one row: warm up, measure, stop. Recorders look
// at phase on every message (one atomic load) and count only while
// measuring, so the counts and the histogram cover exactly the measured
// interval without any reset racing the hot path. The fields after stopped
// are written by the timeline goroutine and may be read once stopped is
// closed (t0 also by a recorder that saw the phase measuring).
type run struct {
	clk     clock
	opts    runOptions
	seg     int64 // segment width, ns
	nseg    int   // segment slots a tally holds: the whole ones, a partial one and one for stragglers
	live    atomic.Uint64
	phase   atomic.Int32
	started chan struct{} // closed when measuring starts
	stopped chan struct{}

	t0, t1           int64
	cpu0, cpu1       time.Duration
	allocs0, allocs1 uint64
}

// runOptions shape one row's timeline.
type runOptions struct {
	warmup, duration time.Duration
	segment          time.Duration // default DefaultSegment
	// label and size describe the row to the progress callback, which is
	// called every progressEvery from the timeline goroutine while the
	// row runs, and once more with PhaseDone before stopped is closed.
	label    string
	size     int
	progress func(Progress)
}

// Phase is where a row is in its timeline.
type Phase string

const (
	PhaseWarmup  Phase = "warmup"
	PhaseMeasure Phase = "measure"
	PhaseDone    Phase = "done"
)

// Progress is a snapshot of a running row, for a live display.
type Progress struct {
	Row      string // e.g. "tcp stream 4KiB depth 16"
	Phase    Phase
	Elapsed  time.Duration // in this phase
	Duration time.Duration // of this phase
	// Count is what the row has measured so far, up to about 50ms ago
	// (recorders publish it that often), and PerSec and BytesPerSec the
	// average rate since measuring began; all zero while warming up.
	Count       uint64
	PerSec      float64
	BytesPerSec float64
}

// progressEvery is how often a running row reports progress.
const progressEvery = 250 * time.Millisecond

func startRun(ctx context.Context, o runOptions) *run {
	if o.segment <= 0 {
		o.segment = DefaultSegment
	}
	r := &run{clk: newClock(), opts: o, seg: int64(o.segment), started: make(chan struct{}), stopped: make(chan struct{})}
	r.nseg = int(o.duration/o.segment) + 2
	go r.timeline(ctx)
	return r
}

func (r *run) timeline(ctx context.Context) {
	defer close(r.stopped)
	var tick <-chan time.Time
	if r.opts.progress != nil {
		tk := time.NewTicker(progressEvery)
		defer tk.Stop()
		tick = tk.C
		defer r.report(PhaseDone, 0, time.Time{})
	}
	begin := time.Now()
	t := time.NewTimer(r.opts.warmup)
	defer t.Stop()
	for waiting := true; waiting; {
		select {
		case <-t.C:
			waiting = false
		case <-tick:
			r.report(PhaseWarmup, r.opts.warmup, begin)
		case <-ctx.Done():
			r.phase.Store(phaseStop)
			return
		}
	}
	r.allocs0 = heapAllocs()
	r.cpu0 = cpuTime()
	r.t0 = r.clk.now()
	r.phase.Store(phaseMeasure)
	close(r.started)
	begin = time.Now()
	t.Reset(r.opts.duration)
	for waiting := true; waiting; {
		select {
		case <-t.C:
			waiting = false
		case <-tick:
			r.report(PhaseMeasure, r.opts.duration, begin)
		case <-ctx.Done():
			waiting = false
		}
	}
	r.atLeastOne(ctx)
	r.phase.Store(phaseStop)
	r.t1 = r.clk.now()
	r.cpu1 = cpuTime()
	r.allocs1 = heapAllocs()
}

// atLeastOne keeps measuring past the row's duration until one message
// was counted, for up to ten durations (at least a second): a row of zeros
// says nothing. A loop that counts messages in batches (the raw libfabric
// baseline's, a call of up to 20ms each) can count none in a short
// interval on a machine whose other load starved it. The row's rates
// divide by the interval actually measured.
func (r *run) atLeastOne(ctx context.Context) {
	if r.live.Load() > 0 {
		return
	}
	limit := time.NewTimer(max(10*r.opts.duration, time.Second))
	defer limit.Stop()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for r.live.Load() == 0 {
		select {
		case <-poll.C:
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// report calls the progress callback with the live count.
func (r *run) report(ph Phase, d time.Duration, begin time.Time) {
	now := time.Now()
	n := r.live.Load()
	p := Progress{Row: r.opts.label, Phase: ph, Duration: d, Count: n}
	if !begin.IsZero() {
		p.Elapsed = now.Sub(begin)
		if s := p.Elapsed.Seconds(); s > 0 && ph == PhaseMeasure {
			p.PerSec = float64(n) / s
			p.BytesPerSec = p.PerSec * float64(r.opts.size)
		}
	}
	r.opts.progress(p)
}

// measuring reports whether a message handled now counts.
func (r *run) measuring() bool { return r.phase.Load() == phaseMeasure }

func (r *run) stopping() bool { return r.phase.Load() == phaseStop }

// elapsed is the measured interval in nanoseconds; after stopped.
func (r *run) elapsed() int64 { return r.t1 - r.t0 }

// row fills the rates of a finished run from its tallies.
func (r *run) row(transport string, mode Mode, size, depth int, ts ...*tally) Row {
	h, segs := merged(ts)
	secs := float64(r.elapsed()) / 1e9
	row := Row{
		Transport: transport, Mode: mode, Size: size, Depth: depth, Conns: 1,
		Msgs: h.Count(), Seconds: secs,
		P50Us:       float64(h.Quantile(0.50)) / 1e3,
		P99Us:       float64(h.Quantile(0.99)) / 1e3,
		P999Us:      float64(h.Quantile(0.999)) / 1e3,
		MaxUs:       float64(h.Max()) / 1e3,
		MeanUs:      h.Mean() / 1e3,
		CPUSeconds:  (r.cpu1 - r.cpu0).Seconds(),
		LatencyHist: h.Buckets(),
	}
	counts, width := wholeSegments(segs, r.seg, r.elapsed())
	bytes := make([]float64, len(counts))
	for i, c := range counts {
		bytes[i] = float64(c) * float64(size)
	}
	row.Segments = segmentStats(width, counts, bytes)
	if secs > 0 {
		row.MsgsPerSec = float64(row.Msgs) / secs
		row.BytesPerSec = row.MsgsPerSec * float64(size)
	}
	if row.Msgs > 0 {
		row.CPUUsPerMsg = row.CPUSeconds * 1e6 / float64(row.Msgs)
		row.AllocsPerMsg = float64(r.allocs1-r.allocs0) / float64(row.Msgs)
	}
	row.CPUSecPerGB = cpuPerGB(row.CPUSeconds, float64(row.Msgs)*float64(size))
	return row
}

// cpuPerGB is CPU seconds per 10^9 payload bytes moved; 0 when nothing
// was moved (a ping of empty messages, a stat).
func cpuPerGB(cpu, bytes float64) float64 {
	if bytes <= 0 {
		return 0
	}
	return cpu / (bytes / 1e9)
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapAllocs counts heap objects allocated so far, tiny ones included.
// runtime/metrics, unlike ReadMemStats, does not stop the world in the
// middle of a measurement.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}}
	metrics.Read(s)
	var n uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += v.Value.Uint64()
		}
	}
	return n
}

// window keeps at most depth messages in flight between one sender
// goroutine and any number of completers, without a channel operation
// per message: the sender counts what it sent, completers count what they
// finished, and the sender sleeps only when the window is full. It then
// asks to be woken once batch slots are free, so under load one wakeup
// (a futex round trip, microseconds) covers many messages instead of one.
type window struct {
	depth, batch int64
	sent         int64 // sender goroutine only
	done         atomic.Int64
	waitFor      atomic.Int64 // done count the sender sleeps for; 0 when awake
	wake         chan struct{}
}

func newWindow(depth, batch int) *window {
	return &window{depth: int64(depth), batch: int64(min(max(batch, 1), depth)), wake: make(chan struct{}, 1)}
}

// acquire takes a slot, sleeping while the window is full. It returns
// false if stop is closed first.
func (w *window) acquire(stop <-chan struct{}) bool {
	if w.sent-w.done.Load() >= w.depth {
		if !w.waitDone(w.sent-w.depth+w.batch, stop) {
			return false
		}
	}
	w.sent++
	return true
}

// full reports whether acquire would wait.
func (w *window) full() bool { return w.sent-w.done.Load() >= w.depth }

// unacquire gives back the slot of a message that was not sent after all.
func (w *window) unacquire() { w.sent-- }

// drain waits until every sent message completed.
func (w *window) drain(stop <-chan struct{}) bool { return w.waitDone(w.sent, stop) }

func (w *window) waitDone(target int64, stop <-chan struct{}) bool {
	for w.done.Load() < target {
		w.waitFor.Store(target)
		if w.done.Load() >= target {
			// Completed meanwhile. Withdraw the request, or, if a
			// completer already took it, take its token so the channel
			// is empty for the next wait.
			if !w.waitFor.CompareAndSwap(target, 0) {
				<-w.wake
			}
			return true
		}
		select {
		case <-w.wake:
		case <-stop:
			if !w.waitFor.CompareAndSwap(target, 0) {
				<-w.wake
			}
			return false
		}
	}
	return true
}

// complete marks one message finished, waking the sender if it waits for
// this one.
func (w *window) complete() {
	d := w.done.Add(1)
	if t := w.waitFor.Load(); t != 0 && d >= t && w.waitFor.CompareAndSwap(t, 0) {
		w.wake <- struct{}{} // capacity 1, and only the CAS winner sends
	}
}

// levelFloor drops records below min, for handing the messengers a logger
// that keeps their warnings but not a "listening" line for every row.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) WithAttrs(as []slog.Attr) slog.Handler {
	return levelFloor{h.Handler.WithAttrs(as), h.min}
}

func (h levelFloor) WithGroup(name string) slog.Handler {
	return levelFloor{h.Handler.WithGroup(name), h.min}
}
