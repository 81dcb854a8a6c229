package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ospreystore/osprey/bench/rawfabric"
)

// The raw libfabric baseline: for an rdma+PROVIDER transport, the same
// pattern over plain fi_send/fi_recv on PROVIDER, without the messenger
// (package rawfabric). Its rows are transport "raw-fabric" with the
// provider in Row.Provider, and the messenger's rdma+PROVIDER rows are
// compared with them, as the other rows are with raw TCP.

// FabricTransport names raw libfabric baseline rows.
const FabricTransport = rawfabric.Transport

// fabricProvider returns the libfabric provider an rdma+PROVIDER transport
// uses, PROVIDER, and false for other transports.
func fabricProvider(transport string) (string, bool) {
	p, ok := strings.CutPrefix(transport, "rdma+")
	if !ok || p == "" {
		return "", false
	}
	return p, true
}

// fabricProviders lists the distinct providers of the rdma+ transports.
func fabricProviders(transports []string) []string {
	var ps []string
	for _, tr := range transports {
		if p, ok := fabricProvider(tr); ok && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// checkFabricBaseline fails early when a raw libfabric row could not run:
// no such provider, or a depth or size beyond what it offers.
func checkFabricBaseline(o *MsgrOptions) error {
	for _, prov := range fabricProviders(o.Transports) {
		lim, err := rawfabric.Probe(prov)
		if err != nil {
			return fmt.Errorf("bench: raw libfabric baseline: %w", err)
		}
		for _, size := range o.Sizes {
			for _, depth := range o.Depths {
				if err := lim.Check(rawfabric.Config{Provider: prov, Size: size, Depth: depth}); err != nil {
					return fmt.Errorf("bench: raw libfabric baseline: %w", err)
				}
			}
		}
	}
	return nil
}

// runFabricRow runs one raw libfabric baseline row.
func runFabricRow(ctx context.Context, o *MsgrOptions, provider string, mode Mode, size, depth int) (Row, error) {
	pat := rawfabric.Stream
	if mode == PingPong {
		pat = rawfabric.PingPong
	}
	p, err := rawfabric.Open(ctx, rawfabric.Config{Provider: provider, Pattern: pat, Size: size, Depth: depth})
	if err != nil {
		return Row{}, err
	}
	defer p.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := startRun(rctx, o.runOptions(FabricTransport+"("+provider+")", mode, size, depth))
	t := run.newTally()
	// The loops run in C for up to 20ms a call and count a call's messages
	// if the run measured when it began, so they are kicked at both ends
	// of the measured interval for its edges to be exact.
	kicked := make(chan struct{})
	go func() {
		defer close(kicked)
		select {
		case <-run.started:
			p.Kick()
		case <-run.stopped:
		}
		<-run.stopped
		p.Kick()
	}()
	err = p.Run(ctx, rawfabric.Hooks{
		Stopping:  run.stopping,
		Measuring: run.measuring,
		Record: func(lat []int64) {
			// A batch is what one call of the C loop (at most 20ms)
			// completed; it is counted in the segment of its end.
			now := run.clk.now()
			for _, v := range lat {
				t.record(now, v)
			}
		},
		DrainTimeout: drainTimeout,
	})
	cancel() // after a failure, the timeline stops early
	<-kicked // the pair stays open until the last kick
	if err != nil {
		return Row{}, err
	}
	row := run.row(FabricTransport, mode, size, depth, t)
	row.Provider = provider
	if row.CPUSeconds < starvedCPU*row.Seconds {
		row.Starved = true
		o.Logger.Warn("bench: the raw libfabric baseline busy-polls with two threads but got less than 1.75 cores: "+
			"other load on this machine probably slowed it, and ratios to it flatter the messenger",
			"provider", provider, "mode", mode, "size", FormatSize(int64(size)), "depth", depth,
			"cpu_s", row.CPUSeconds, "seconds", row.Seconds)
	}
	return row, nil
}

// starvedCPU is the CPU seconds per second below which a raw libfabric
// row, two busy-polling threads, was short of its two cores. Undisturbed
// rows measured 1.78 to 1.95 on two cores; rows that other processes
// preempted measured 0.5 to 1.72.
const starvedCPU = 1.75
