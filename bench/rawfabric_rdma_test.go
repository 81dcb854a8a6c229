//go:build rdma

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestFabricRow runs the raw libfabric baseline on the tcp provider for
// both modes at a small and a large size and checks each row is complete.
// Like TestRunMsgr it checks no speed.
func TestFabricRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := MsgrOptions{Duration: 200 * time.Millisecond, Warmup: 30 * time.Millisecond}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{Stream, PingPong} {
		for _, size := range []int{64, 64 << 10} {
			for _, depth := range []int{1, 8} {
				t.Run(fmt.Sprintf("%s/%d/%d", mode, size, depth), func(t *testing.T) {
					r, err := runFabricRow(ctx, &o, "tcp", mode, size, depth)
					if err != nil {
						t.Fatal(err)
					}
					if r.Transport != FabricTransport || r.Provider != "tcp" || r.Mode != mode || r.Size != size || r.Depth != depth {
						t.Errorf("row %+v", r)
					}
					for name, v := range map[string]float64{
						"msgs": float64(r.Msgs), "seconds": r.Seconds, "msgs_per_sec": r.MsgsPerSec,
						"bytes_per_sec": r.BytesPerSec, "p50_us": r.P50Us, "p99_us": r.P99Us,
						"p999_us": r.P999Us, "max_us": r.MaxUs, "mean_us": r.MeanUs, "cpu_s": r.CPUSeconds,
						"cpu_us_per_msg": r.CPUUsPerMsg,
					} {
						if !(v > 0) {
							t.Errorf("%s = %v, want > 0", name, v)
						}
					}
					if !(r.P50Us <= r.P99Us && r.P99Us <= r.P999Us && r.P999Us <= r.MaxUs) {
						t.Errorf("%+v: percentiles out of order", r)
					}
					if r.Seconds < 0.15 || r.Seconds > 1.5 {
						t.Errorf("measured %.3fs of 0.2s", r.Seconds)
					}
					// The process's allocations: none is the baseline's, but
					// the runtime and the test allocate a little meanwhile,
					// which a row slowed to a few dozen messages on a loaded
					// machine spreads over few: a fixed slack of 200.
					if allocs := r.AllocsPerMsg * float64(r.Msgs); allocs > 0.5*float64(r.Msgs)+200 {
						t.Errorf("%.3f allocations per message (%.0f in %d messages)", r.AllocsPerMsg, allocs, r.Msgs)
					}
					t.Logf("%s, %.0f msgs/s, p50 %.1fµs, p99 %.1fµs", FormatRate(r.BytesPerSec), r.MsgsPerSec, r.P50Us, r.P99Us)
				})
			}
		}
	}
}

// TestRunMsgrFabricBaseline runs a messenger row over rdma+tcp with its
// baselines and checks the rdma row is compared with raw-fabric.
func TestRunMsgrFabricBaseline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := RunMsgr(ctx, MsgrOptions{
		Transports: []string{"rdma+tcp"}, Sizes: []int{4 << 10}, Depths: []int{4}, Modes: []Mode{Stream, PingPong},
		Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond, Baseline: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Transport+"/"+r.Provider)
		if r.Transport == "rdma+tcp" && (r.VsRawP50 <= 0 || r.VsRawBytesPerSec <= 0) {
			t.Errorf("%+v: no ratio to the raw-fabric baseline", r)
		}
	}
	if want := "[rdma+tcp/tcp raw-tcp/ raw-fabric/tcp rdma+tcp/tcp raw-tcp/ raw-fabric/tcp]"; fmt.Sprint(got) != want {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// TestRunMsgrFabricBaselineTooDeep fails before anything runs.
func TestRunMsgrFabricBaselineTooDeep(t *testing.T) {
	start := time.Now()
	_, err := RunMsgr(context.Background(), MsgrOptions{
		Transports: []string{"rdma+tcp"}, Depths: []int{1, 1 << 20}, Duration: time.Second, Baseline: true,
	})
	if err == nil {
		t.Fatal("a depth beyond the provider's queues was accepted")
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("failed after %v, not up front", time.Since(start))
	}
	t.Log(err)
}
