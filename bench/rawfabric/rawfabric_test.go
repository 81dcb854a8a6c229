//go:build rdma

package rawfabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// provider is the one the tests use: libfabric's tcp, which needs no
// hardware.
const provider = "tcp"

// minRecorded is the fewest latencies a run records before it stops.
const minRecorded = 10

// runFor runs a pair for at least d and until it has recorded at least
// minRecorded latencies (or 20 s passed: a loaded machine slows the pair
// down, and that is not what the tests check), and returns them.
func runFor(t *testing.T, cfg Config, d time.Duration) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	var lat []int64
	var n atomic.Int64
	start := time.Now()
	stopping := func() bool {
		return stop.Load() && n.Load() >= minRecorded || time.Since(start) > 20*time.Second
	}
	err = p.Run(ctx, Hooks{Stopping: stopping, Record: func(l []int64) { lat = append(lat, l...); n.Add(int64(len(l))) }})
	if err != nil {
		t.Fatal(err)
	}
	return lat
}

func TestPatterns(t *testing.T) {
	for _, pat := range []Pattern{Stream, PingPong} {
		for _, size := range []int{64, 64 << 10} {
			for _, depth := range []int{1, 16} {
				t.Run(fmt.Sprintf("%v/%d/%d", pat, size, depth), func(t *testing.T) {
					const d = 200 * time.Millisecond
					lat := runFor(t, Config{Provider: provider, Pattern: pat, Size: size, Depth: depth}, d)
					if len(lat) < minRecorded {
						t.Fatalf("%d messages in %v", len(lat), d)
					}
					for _, v := range lat {
						if v <= 0 || v > int64(10*time.Second) {
							t.Fatalf("latency %dns", v)
						}
					}
					slices.Sort(lat)
					rate := float64(len(lat)) / d.Seconds()
					t.Logf("%d msgs, %.0f msgs/s, %.1f MB/s, p50 %.1fµs, p99 %.1fµs", len(lat), rate, rate*float64(size)/1e6,
						float64(lat[len(lat)/2])/1e3, float64(lat[len(lat)*99/100])/1e3)
				})
			}
		}
	}
}

// TestRunAgain checks a pair can run twice (the second run starts from a
// drained state) and that a cgo call per message works too.
func TestRunAgain(t *testing.T) {
	for _, pat := range []Pattern{Stream, PingPong} {
		ctx := context.Background()
		p, err := Open(ctx, Config{Provider: provider, Pattern: pat, Size: 100, Depth: 4, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			var n int
			deadline := time.Now().Add(50 * time.Millisecond)
			err := p.Run(ctx, Hooks{Stopping: func() bool { return time.Now().After(deadline) }, Record: func(l []int64) {
				if len(l) != 1 {
					t.Errorf("%d latencies in a call with Batch 1", len(l))
				}
				n += len(l)
			}})
			if err != nil || n == 0 {
				t.Fatalf("%v: %d messages, err %v", pat, n, err)
			}
		}
		p.Close()
		p.Close()
		if err := p.Run(ctx, Hooks{Stopping: func() bool { return true }}); err == nil {
			t.Errorf("Run after Close succeeded")
		}
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Open(ctx, Config{Provider: provider, Pattern: PingPong, Size: 64, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := p.Run(ctx, Hooks{Stopping: func() bool { return false }}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestOpenErrors(t *testing.T) {
	if os.Getenv("FI_PROVIDER") != "" {
		t.Skip("FI_PROVIDER overrides the provider")
	}
	ctx := context.Background()
	lim, err := Probe(provider)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", lim)
	for _, c := range []Config{
		{Provider: "nosuchprovider", Size: 64, Depth: 1},
		{Provider: provider, Size: 64, Depth: lim.RxSize + lim.TxSize + 1},
		{Provider: provider, Size: -1, Depth: 1},
		{Provider: provider, Size: 64 << 20, Depth: 64},
	} {
		if p, err := Open(ctx, c); err == nil {
			p.Close()
			t.Errorf("Open(%+v) succeeded", c)
		} else {
			t.Logf("%+v: %v", c, err)
		}
	}
}
