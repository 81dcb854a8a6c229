package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/spf13/cobra"
)

// PG states, named as Ceph names the nearest state, with Osprey's
// meaning: writes need every member of the acting set (docs/osd.md).
const (
	pgActiveClean = "active+clean"      // every member answers: reads and writes
	pgUndersized  = "active+undersized" // fewer OSDs than the pool's size exist; all of those answer
	pgDegraded    = "degraded"          // a replica does not answer: reads only, writes fail until it returns (or the mon marks it down)
	pgDown        = "down"              // the primary does not answer: no I/O
)

type statusOSD struct {
	ID         uint32  `json:"id"`
	Up         bool    `json:"up"` // answered a map request just now
	In         bool    `json:"in"` // the map's in flag
	MapUp      bool    `json:"map_up"`
	Weight     float64 `json:"weight"`
	Public     string  `json:"public"`
	Cluster    string  `json:"cluster"`
	PGs        int     `json:"pgs"`
	PrimaryPGs int     `json:"primary_pgs"`
	RTTms      float64 `json:"rtt_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
}

type statusPool struct {
	ID       uint32         `json:"id"`
	Name     string         `json:"name"`
	Size     uint32         `json:"size"`
	MinSize  uint32         `json:"min_size"`
	PGCount  uint32         `json:"pg_count"`
	PGStates map[string]int `json:"pg_states"`
	MetaPG   string         `json:"meta_pg,omitempty"` // state of the bucket-record PG, for the pool that holds it
}

type statusReport struct {
	FSID        string       `json:"fsid"`
	Epoch       uint64       `json:"epoch"`
	Health      string       `json:"health"`
	Problems    []string     `json:"problems,omitempty"`
	OSDs        []statusOSD  `json:"osds"`
	Pools       []statusPool `json:"pools"`
	Buckets     int          `json:"buckets"`
	BucketError string       `json:"buckets_error,omitempty"`
}

func newStatusCmd() *cobra.Command {
	var (
		t       targetFlags
		asJSON  bool
		timeout time.Duration
		watch   bool
		every   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster map, which OSDs answer, and PG states",
		Long: `With a mon (--mon, $OSPREY_MON, or the one ` + "`osprey up`" + ` runs in this
directory), prints the mon's view as ` + "`ceph -s`" + ` does: HEALTH_OK, HEALTH_WARN or
HEALTH_ERR with reasons, the mons and their leader, OSDs up and in, PGs by
state (active+clean, peering, active+undersized+degraded, recovering,
undersized+degraded+peered, down, unknown), degraded and misplaced objects and
recovery throughput.

Without a mon (a cluster run from a map file) it fetches the cluster map, asks every OSD in it for the map on its public
address (an OSD is up when it answers within --timeout), and derives each
PG's state from its acting set:

  active+clean       every member answers: reads and writes work
  active+undersized  the pool wants more replicas than there are OSDs
  degraded           a replica does not answer, and the map still has it:
                     reads work; writes fail until it returns without a
                     mon, until the mon marks it down with one
  down               the primary does not answer: no I/O

The health line is HEALTH_OK when every OSD answers and every PG is
active, else HEALTH_WARN with the reasons. The exit code is 0 either way:
status reports, it does not judge; scripts read "health" from --json.`,
		Example: `  osprey status
  osprey status --seeds tcp://10.0.0.1:6800 --json | jq .health`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if watch && asJSON {
				return usageErrorf("--watch prints lines for people; a script polls status --json")
			}
			if every <= 0 {
				return usageErrorf("--watch-interval %v: want a positive duration", every)
			}
			// The same precedence as every command: a mon, when one is
			// named before any seeds or map, answers with its own view.
			if tg, err := resolveTarget(t, os.Getenv); err == nil && len(tg.Mons) > 0 {
				mf := t.mon // its keyring, timeout and --ms-client-mode
				mf.addrs = tg.Mons
				if watch {
					return watchStatus(cmd, mf, every)
				}
				return monStatus(cmd, mf, asJSON)
			}
			if watch {
				return usageErrorf("--watch needs a mon (--mon, $%s, or the one osprey up runs in this directory)", envMon)
			}
			cl, err := connect(ctx, cmd, t)
			if err != nil {
				return err
			}
			defer cl.Close()
			rep := clusterStatus(ctx, cmd, cl, t, timeout)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return writeStatus(cmd.OutOrStdout(), rep)
		},
	}
	addTargetFlags(cmd.Flags(), &t)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long each OSD has to answer")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "with a mon, print the status, then each change as it happens (ceph -w) until Ctrl-C")
	cmd.Flags().DurationVar(&every, "watch-interval", 2*time.Second, "with --watch, how often health and PG states are polled (map changes come at once)")
	return cmd
}

// clusterStatus probes every OSD of the client's map and derives the rest.
// The probes are clients made as cl was, from t (its keyring and
// connection modes: an OSD with auth on refuses any other), each seeded
// with one OSD.
func clusterStatus(ctx context.Context, cmd *cobra.Command, cl *client.Client, t targetFlags, timeout time.Duration) statusReport {
	m := cl.Map()
	rep := statusReport{FSID: m.FSID(), Epoch: m.Epoch()}
	for info := range m.OSDs() {
		rep.OSDs = append(rep.OSDs, statusOSD{ID: info.Id, In: info.In, MapUp: info.Up, Weight: info.Weight,
			Public: info.PublicAddr, Cluster: info.ClusterAddr})
	}
	// Probe concurrently: a down OSD costs --timeout, once.
	var wg sync.WaitGroup
	for i := range rep.OSDs {
		wg.Go(func() {
			o := &rep.OSDs[i]
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			// A client seeded with this one OSD fetches the map from it:
			// the same request a real client makes first, over whatever
			// transport the address names.
			pt := t
			pt.mon.addrs, pt.seeds, pt.mapPath, pt.timeout = nil, []string{o.Public}, "", timeout
			pc, err := connectWith(pctx, cmd, pt, client.Options{OpTimeout: timeout})
			if err != nil {
				o.Error = err.Error()
				return
			}
			o.Up, o.RTTms = true, float64(time.Since(start).Microseconds())/1000
			pc.Close()
		})
	}
	wg.Wait()
	up := map[uint32]bool{}
	for _, o := range rep.OSDs {
		up[o.ID] = o.Up
	}

	first := true
	for p := range m.Pools() { // ascending id: the first holds the meta PG
		// The effective min_size, as the mon reports it: the map's field
		// is 0 for "the default".
		sp := statusPool{ID: p.Id, Name: p.Name, Size: p.Size, MinSize: uint32(placement.MinSize(p)), PGCount: p.PgCount, PGStates: map[string]int{}}
		for pg := range p.PgCount {
			sp.PGStates[pgState(m.ActingSet(p.Id, pg), p.Size, up)]++
		}
		if first {
			// The meta PG's acting set is every OSD up and in, so it is
			// never undersized in the pool's sense.
			meta := m.ActingSet(p.Id, placement.MetaPG)
			sp.MetaPG = pgState(meta, uint32(len(meta)), up)
			first = false
		}
		for i := range rep.OSDs {
			o := &rep.OSDs[i]
			for _, role := range m.PGsOf(p.Id, o.ID) {
				o.PGs++
				if role.IsPrimary() {
					o.PrimaryPGs++
				}
			}
		}
		rep.Pools = append(rep.Pools, sp)
	}

	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if bs, err := cl.ListBuckets(bctx); err != nil {
		rep.BucketError = err.Error()
		rep.Buckets = -1
	} else {
		rep.Buckets = len(bs)
	}

	down := 0
	for _, o := range rep.OSDs {
		if !o.Up {
			down++
		}
	}
	if down > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d of %d OSDs do not answer", down, len(rep.OSDs)))
	}
	for _, p := range rep.Pools {
		for _, st := range slices.Sorted(maps.Keys(p.PGStates)) {
			if st != pgActiveClean && st != pgUndersized {
				rep.Problems = append(rep.Problems, fmt.Sprintf("pool %s: %d PGs %s", p.Name, p.PGStates[st], st))
			}
		}
		if p.MetaPG != "" && p.MetaPG != pgActiveClean {
			rep.Problems = append(rep.Problems, fmt.Sprintf("bucket records (meta PG of pool %s) %s", p.Name, p.MetaPG))
		}
	}
	rep.Health = "HEALTH_OK"
	if len(rep.Problems) > 0 {
		rep.Health = "HEALTH_WARN"
	}
	return rep
}

// pgState is the state of a PG with acting set acting in a pool of size,
// given which OSDs answer.
func pgState(acting []uint32, size uint32, up map[uint32]bool) string {
	if len(acting) == 0 || !up[acting[0]] {
		return pgDown
	}
	for _, id := range acting[1:] {
		if !up[id] {
			return pgDegraded
		}
	}
	if uint32(len(acting)) < size {
		return pgUndersized
	}
	return pgActiveClean
}

func writeStatus(w io.Writer, rep statusReport) error {
	fmt.Fprintf(w, "cluster  %s\n", rep.FSID)
	fmt.Fprintf(w, "epoch    %d\n", rep.Epoch)
	health := rep.Health
	if len(rep.Problems) > 0 {
		health += ": " + strings.Join(rep.Problems, "; ")
	}
	fmt.Fprintf(w, "health   %s\n", health)
	if rep.BucketError != "" {
		fmt.Fprintf(w, "buckets  unknown (%s)\n", rep.BucketError)
	} else {
		fmt.Fprintf(w, "buckets  %d\n", rep.Buckets)
	}

	nUp, nIn := 0, 0
	for _, o := range rep.OSDs {
		if o.Up {
			nUp++
		}
		if o.In {
			nIn++
		}
	}
	fmt.Fprintf(w, "\nosds: %d, %d up, %d in\n", len(rep.OSDs), nUp, nIn)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSTATUS\tIN\tWEIGHT\tPUBLIC\tCLUSTER\tPGS\tPRIMARY\tRTT")
	for _, o := range rep.OSDs {
		status, in, rtt := "up", "in", fmt.Sprintf("%.2fms", o.RTTms)
		if !o.Up {
			status, rtt = "down", "-"
		}
		if !o.In {
			in = "out"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%g\t%s\t%s\t%d\t%d\t%s\n", o.ID, status, in, o.Weight, o.Public, o.Cluster, o.PGs, o.PrimaryPGs, rtt)
	}
	tw.Flush()

	fmt.Fprintf(w, "\npools: %d\n", len(rep.Pools))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tNAME\tSIZE\tMIN_SIZE\tPGS\tPG STATES")
	for _, p := range rep.Pools {
		var states []string
		for _, st := range slices.Sorted(maps.Keys(p.PGStates)) {
			states = append(states, fmt.Sprintf("%d %s", p.PGStates[st], st))
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%s\n", p.ID, p.Name, p.Size, p.MinSize, p.PGCount, strings.Join(states, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range rep.Pools {
		if p.MetaPG != "" {
			fmt.Fprintf(w, "  bucket records (meta PG of pool %s, on every OSD): %s\n", p.Name, p.MetaPG)
		}
	}
	return nil
}
