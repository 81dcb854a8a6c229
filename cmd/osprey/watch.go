package main

// status --watch: Ceph's `ceph -w`, the status once and then each change
// as it happens.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
)

// watchStatus prints the mon's status, then until ctx ends one line per
// change: each new map's changes as the mon publishes it (mapChanges),
// and the health and PG states when a poll every interval finds them
// changed. Ctrl-C ends it.
func watchStatus(cmd *cobra.Command, mf monFlags, interval time.Duration) error {
	// ctx ends before the mon client closes, whatever ends the watch:
	// Close waits for the OnMap calls, which wait on ctx.
	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	maps := make(chan *placement.Map, 16)
	dctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	mc, addrs, err := dialMons(dctx, cmd, mf, monclient.Options{OnMap: func(m *placement.Map) {
		select { // one call at a time, in epoch order: none is dropped
		case maps <- m:
		case <-ctx.Done():
		}
	}})
	if err != nil {
		return err
	}
	defer func() {
		stop()
		mc.Close()
	}()
	prev, err := mc.Subscribe(dctx)
	if err != nil {
		if dctx.Err() != nil && ctx.Err() == nil {
			return &unreachableError{target: clusterTarget{Seeds: addrs, Source: "the mon addresses"}, err: err}
		}
		return err
	}
	w := cmd.OutOrStdout()
	status := func() (*mon.Status, error) {
		qctx, cancel := context.WithTimeout(ctx, mf.timeout)
		defer cancel()
		rep, err := mc.Command(qctx, &osdpb.MonCommand{Prefix: "status"})
		if err != nil {
			return nil, err
		}
		var s mon.Status
		return &s, json.Unmarshal([]byte(rep.Output), &s)
	}
	last, err := status()
	if err != nil {
		return err
	}
	printMonStatus(w, last)
	fmt.Fprintln(w)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-maps:
			if m.Epoch() <= prev.Epoch() {
				continue // the map Subscribe returned, or one before it
			}
			for _, line := range mapChanges(prev, m) {
				fmt.Fprintf(w, "%s e%d: %s\n", stamp(), m.Epoch(), line)
			}
			prev = m
		case <-tick.C:
			s, err := status()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintf(w, "%s status: %v\n", stamp(), err)
				continue
			}
			for _, line := range statusChanges(last, s) {
				fmt.Fprintf(w, "%s %s\n", stamp(), line)
			}
			last = s
		}
	}
}

func stamp() string { return time.Now().Format("2006-01-02T15:04:05.000Z07:00") }

// statusChanges are the lines that say how s differs from last: its
// mons (one up or down, a new leader, as Ceph's cluster log has its
// elections), its health, and its PG states with the I/O at the moment.
func statusChanges(last, s *mon.Status) []string {
	out := monChanges(last.Mons, s.Mons)
	if s.Health.Status != last.Health.Status || !slices.Equal(s.Health.Checks, last.Health.Checks) {
		line := "health " + s.Health.Status
		if len(s.Health.Checks) > 0 {
			line += ": " + strings.Join(s.Health.Checks, "; ")
		}
		out = append(out, line)
	}
	if !maps.Equal(s.PGs, last.PGs) || s.Objects != last.Objects {
		states := slices.Sorted(maps.Keys(s.PGs))
		parts := make([]string, len(states))
		for i, st := range states {
			parts[i] = fmt.Sprintf("%d %s", s.PGs[st], st)
		}
		line := fmt.Sprintf("pgs: %s; %d objects", strings.Join(parts, ", "), s.Objects)
		if s.DegradedObjects+s.MisplacedObjects > 0 {
			line += fmt.Sprintf(", %d degraded, %d misplaced", s.DegradedObjects, s.MisplacedObjects)
		}
		if s.RecoveryBytesPerSec > 0 {
			line += fmt.Sprintf("; recovery %s/s", humanBytes(int64(s.RecoveryBytesPerSec)))
		}
		if io := clientIO(s); io != "" {
			line += "; client " + io
		}
		out = append(out, line)
	}
	return out
}

// monChanges says which mons came up or went down between two statuses,
// and who leads now if that changed.
func monChanges(last, now []mon.MonStatus) []string {
	var out []string
	was := map[string]mon.MonStatus{}
	oldLeader, leader := "", ""
	for _, m := range last {
		was[m.Name] = m
		if m.Leader {
			oldLeader = m.Name
		}
	}
	for _, m := range now {
		if m.Leader {
			leader = m.Name
		}
		switch p, ok := was[m.Name]; {
		case m.Up && (!ok || !p.Up):
			out = append(out, fmt.Sprintf("mon.%s up (%s)", m.Name, m.Addr))
		case !m.Up && ok && p.Up:
			out = append(out, fmt.Sprintf("mon.%s down", m.Name))
		}
	}
	switch {
	case leader == oldLeader:
	case leader == "":
		out = append(out, fmt.Sprintf("no mon leads (mon.%s did): an election is under way", oldLeader))
	case oldLeader == "":
		out = append(out, fmt.Sprintf("mon.%s leads", leader))
	default:
		out = append(out, fmt.Sprintf("mon.%s leads (was mon.%s)", leader, oldLeader))
	}
	return out
}

// mapChanges says what the map next changed from prev, a line per
// change, as Ceph's cluster log does: OSDs added, removed, up, down, in,
// out, reweighted or over a full ratio; pools' sizes; the full ratios.
func mapChanges(prev, next *placement.Map) []string {
	var out []string
	old := map[uint32]*osdpb.OSDInfo{}
	for o := range prev.OSDs() {
		old[o.Id] = o
	}
	for o := range next.OSDs() {
		name := fmt.Sprintf("osd.%d", o.Id)
		p, ok := old[o.Id]
		delete(old, o.Id)
		if !ok {
			out = append(out, name+" created")
			p = &osdpb.OSDInfo{Id: o.Id, Weight: o.Weight, PublicAddr: o.PublicAddr}
		}
		switch {
		case o.Up && ok && p.UpFrom != 0 && o.Born > p.Born:
			// Peering gives up what only its old store held.
			out = append(out, fmt.Sprintf("%s boot on a new store (%s): what only its old store held is gone", name, o.PublicAddr))
		case o.Up && (!p.Up || o.UpFrom != p.UpFrom):
			out = append(out, fmt.Sprintf("%s boot (%s)", name, o.PublicAddr))
		case !o.Up && p.Up:
			out = append(out, name+" marked down")
		}
		switch {
		case o.In && !p.In:
			out = append(out, name+" marked in")
		case !o.In && p.In && o.AutoOut:
			out = append(out, name+" marked out (down for longer than the down-out interval)")
		case !o.In && p.In:
			out = append(out, name+" marked out")
		}
		if o.Weight != p.Weight {
			out = append(out, fmt.Sprintf("%s weight %g -> %g", name, p.Weight, o.Weight))
		}
		if o.Fullness != p.Fullness {
			out = append(out, fmt.Sprintf("%s disk %s (was %s)", name, ops.FullnessWord(o.Fullness), ops.FullnessWord(p.Fullness)))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(old)) {
		out = append(out, fmt.Sprintf("osd.%d removed", id))
	}
	oldPools := map[uint32]*osdpb.Pool{}
	for p := range prev.Pools() {
		oldPools[p.Id] = p
	}
	for p := range next.Pools() { // in id order
		q, ok := oldPools[p.Id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("pool '%s' (%d) created: size %d, min_size %d, %d pgs", p.Name, p.Id, p.Size, placement.MinSize(p), p.PgCount))
			continue
		case q.Size != p.Size:
			out = append(out, fmt.Sprintf("pool '%s' size %d -> %d", p.Name, q.Size, p.Size))
		}
		if a, b := placement.MinSize(q), placement.MinSize(p); a != b {
			out = append(out, fmt.Sprintf("pool '%s' min_size %d -> %d", p.Name, a, b))
		}
	}
	for _, f := range placement.Flags {
		switch was, is := prev.HasFlag(f), next.HasFlag(f); {
		case is && !was:
			out = append(out, f+" flag set")
		case was && !is:
			out = append(out, f+" flag unset")
		}
	}
	pn, pb, pf := prev.FullRatios()
	nn, nb, nf := next.FullRatios()
	for _, r := range []struct {
		name     string
		was, now float64
	}{{"nearfull_ratio", pn, nn}, {"backfillfull_ratio", pb, nb}, {"full_ratio", pf, nf}} {
		if r.was != r.now {
			out = append(out, fmt.Sprintf("%s %g -> %g", r.name, r.was, r.now))
		}
	}
	return out
}
