package main

// Where data is and how full the OSDs are, as Ceph's `ceph osd map`,
// `ceph pg ls` and `ceph osd df`.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
)

// monRead runs the read-only mon command prefix and prints its output:
// with asJSON as the mon sent it (a newer mon's fields too), else decoded
// into T, by print.
func monRead[T any](cmd *cobra.Command, mf monFlags, prefix string, asJSON bool, print func(io.Writer, T) error) error {
	v, raw, err := monGet[T](cmd, mf, prefix)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(raw))
		return err
	}
	return print(cmd.OutOrStdout(), v)
}

// monGet runs the read-only mon command prefix and returns its output,
// decoded into T and as the mon sent it.
func monGet[T any](cmd *cobra.Command, mf monFlags, prefix string) (T, string, error) {
	var v T
	rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: prefix})
	if err != nil {
		return v, "", err
	}
	if err := json.Unmarshal([]byte(rep.Output), &v); err != nil {
		return v, "", fmt.Errorf("%s: the mon's answer: %w", prefix, err)
	}
	return v, rep.Output, nil
}

// newOSDMapCmd is `osprey osd map BUCKET/KEY...`, Ceph's `ceph osd map
// POOL OBJECT`: the PG and OSDs an object goes to, computed from the
// map as every client does it.
func newOSDMapCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "map BUCKET/KEY... | map BUCKET KEY",
		Short: "Show the PG and the OSDs an object is placed on",
		Long: `Computes where each object goes under the current cluster map, as every
client does before it sends an op: the pool, the PG (Ceph's POOL.SEED, the
seed in hex) and the PG's acting set, primary first. Nothing is asked of
the OSDs, so the object need not exist. An object put in parts keeps its
head (metadata, and its data up to the first part) there; each part lives
in the PG of its own key. Ceph's form, BUCKET KEY, is taken too when there
are exactly two arguments and the first has no "/".`,
		Example: `  osprey osd map photos/2024/photo.jpg
  osprey osd map photos 2024/photo.jpg --json`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var paths []remotePath
			if len(args) == 2 && !strings.Contains(strings.TrimPrefix(args[0], remoteScheme), "/") {
				args = []string{args[0] + "/" + args[1]}
			}
			for _, a := range args {
				rp, err := parseObject(a)
				if err != nil {
					return err
				}
				paths = append(paths, rp)
			}
			cl, err := connect(cmd.Context(), cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			w := cmd.OutOrStdout()
			for _, rp := range paths {
				loc, err := cl.Locate(rp.Bucket, rp.Key)
				if err != nil {
					return fmt.Errorf("%s: %w", rp, err)
				}
				if c.asJSON {
					json.NewEncoder(w).Encode(locationJSON(rp, loc))
					continue
				}
				fmt.Fprintf(w, "osdmap e%d pool '%s' (%d) object '%s' -> pg %s -> up (%s) acting (%s)\n",
					loc.Epoch, loc.Pool, loc.PoolID, rp.Bucket+"/"+rp.Key, loc.PG, actingText(loc.Up), actingText(loc.Acting))
			}
			return nil
		},
	}
	c.add(cmd)
	return cmd
}

// locationJSON is `osd map --json`'s object, with Ceph's field names.
func locationJSON(rp remotePath, loc client.Location) map[string]any {
	primary := int64(-1)
	if len(loc.Acting) > 0 {
		primary = int64(loc.Acting[0])
	}
	upPrimary := int64(-1)
	if len(loc.Up) > 0 {
		upPrimary = int64(loc.Up[0])
	}
	return map[string]any{"epoch": loc.Epoch, "pool": loc.Pool, "pool_id": loc.PoolID, "bucket": rp.Bucket, "key": rp.Key,
		"pgid": loc.PG.String(), "up": nonNil(loc.Up), "up_primary": upPrimary,
		"acting": nonNil(loc.Acting), "acting_primary": primary}
}

// nonNil is ids, or an empty list for none: JSON's [] rather than null.
func nonNil(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}

// actingText is Ceph's "[1,0,2], p1", or "[], p-1" with no OSD up and in.
func actingText(acting []uint32) string {
	p := "-1"
	if len(acting) > 0 {
		p = strconv.FormatUint(uint64(acting[0]), 10)
	}
	return mon.ActingList(acting) + ", p" + p
}

// newPGLsCmd is `osprey pg ls [STATE...]`, Ceph's `ceph pg ls`.
func newPGLsCmd() *cobra.Command {
	var (
		mf      monFlags
		asJSON  bool
		pool    string
		osdArg  string // --osd: "3" or "osd.3"
		primArg string // --primary
	)
	cmd := &cobra.Command{
		Use:   "ls [STATE...]",
		Short: "List the PGs: state, objects, acting set, as the mon knows them",
		Long: `Lists every PG of every pool with the state ` + "`osprey status`" + ` counts it
under, its acting set (primary first), and what its primary last reported:
objects, degraded and misplaced copies, inconsistent objects (from its last
deep scrub) and the map epoch of that report. A PG with no OSD up to serve it is
"stale+" the state its primary last reported (its objects as then), or "down"
if none ever did; one with fewer than min_size "undersized+degraded+peered"; any other PG's
state is its primary's last report, made at the current epoch or at one
whose map gave it the same acting set, else "unknown" until its next.

STATE arguments keep the PGs in any of those states, a state matching when
all its "+"-joined words are in the PG's (so "degraded" matches
"active+undersized+degraded"), as ` + "`ceph pg ls degraded`" + `. --pool (a name
or id), --osd (Ceph's ls-by-osd: in the up or acting set) and --primary (ls-by-primary) narrow it
further.`,
		Example: `  osprey pg ls
  osprey pg ls degraded recovering
  osprey pg ls --osd 3 --json | jq -r .pgid`,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				for _, w := range strings.Split(a, "+") {
					if !slices.Contains(mon.PGStateWords, w) {
						return usageErrorf("%q is not a PG state: want words of %s, joined by +", a, strings.Join(mon.PGStateWords, ", "))
					}
				}
			}
			osd, primary := int64(-1), int64(-1) // -1: not asked
			for _, f := range []struct {
				name, arg string
				id        *int64
			}{{"--osd", osdArg, &osd}, {"--primary", primArg, &primary}} {
				if !cmd.Flags().Changed(f.name[2:]) {
					continue
				}
				ids, err := parseOSDIDs([]string{f.arg})
				if err != nil {
					return usageErrorf("%s %q: not an OSD id", f.name, f.arg)
				}
				*f.id = int64(ids[0])
				osds, _, err := monGet[[]mon.OSDTreeEntry](cmd, mf, "osd tree")
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(osds, func(o mon.OSDTreeEntry) bool { return int64(o.ID) == *f.id }) {
					return usageErrorf("%s %s: no osd.%d in the map", f.name, f.arg, *f.id)
				}
			}
			poolID := int64(-1)
			if pool != "" {
				id, err := resolvePool(cmd, mf, pool)
				if err != nil {
					return err
				}
				poolID = int64(id)
			}
			keep := func(p mon.PGStat) bool {
				return (len(args) == 0 || slices.ContainsFunc(args, func(s string) bool { return stateHas(p.State, s) })) &&
					(poolID < 0 || int64(p.Pool) == poolID) &&
					(osd < 0 || slices.Contains(p.Acting, uint32(osd)) || slices.Contains(p.Up, uint32(osd))) &&
					(primary < 0 || p.Primary == primary)
			}
			return monRead(cmd, mf, "pg ls", false, func(w io.Writer, pgs []mon.PGStat) error {
				pgs = slices.DeleteFunc(pgs, func(p mon.PGStat) bool { return !keep(p) })
				if asJSON {
					enc := json.NewEncoder(w)
					for _, p := range pgs {
						enc.Encode(p)
					}
					return nil
				}
				return printPGs(w, pgs)
			})
		},
	}
	addMonFlags(cmd.Flags(), &mf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per PG")
	cmd.Flags().StringVar(&pool, "pool", "", "only this pool's PGs (its name or id)")
	cmd.Flags().StringVar(&osdArg, "osd", "", "only the PGs whose up or acting set holds this OSD (3 or osd.3)")
	cmd.Flags().StringVar(&primArg, "primary", "", "only the PGs this OSD is primary of (3 or osd.3)")
	return cmd
}

// resolvePool is the id of the pool named by name or id, from the mon.
func resolvePool(cmd *cobra.Command, mf monFlags, name string) (uint32, error) {
	pools, _, err := monGet[[]mon.PoolInfo](cmd, mf, "osd pool ls")
	if err != nil {
		return 0, err
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		if p.Name == name || strconv.FormatUint(uint64(p.ID), 10) == name {
			return p.ID, nil
		}
		names[i] = p.Name
	}
	return 0, fmt.Errorf("no pool %q (pools: %s)", name, strings.Join(names, ", "))
}

// stateHas reports whether every "+"-joined word of want is in state.
func stateHas(state, want string) bool {
	words := strings.Split(state, "+")
	for _, w := range strings.Split(want, "+") {
		if !slices.Contains(words, w) {
			return false
		}
	}
	return true
}

func printPGs(w io.Writer, pgs []mon.PGStat) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PG\tOBJECTS\tDEGRADED\tMISPLACED\tINCONSISTENT\tSTATE\tUP\tACTING\tREPORTED")
	for _, p := range pgs {
		reported := "-"
		if p.ReportedEpoch > 0 {
			reported = fmt.Sprintf("e%d", p.ReportedEpoch)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", p.PGID, p.Objects, p.Degraded, p.Misplaced, p.Inconsistent, p.State,
			actingText(p.Up), actingText(p.Acting), reported)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d pgs\n", len(pgs))
	return err
}

// newOSDDfCmd is `osprey osd df`, Ceph's `ceph osd df`.
func newOSDDfCmd() *cobra.Command {
	return monReadCmd("df", "Show each OSD's disk use, as its beacons report it, and its PGs",
		`Shows each OSD's data disk as its last beacon to the mon reported it: size,
used, available, %USE and VAR (its %USE over the cluster's), with its
weight, PG count and state, then the totals and the spread of VAR, as
`+"`ceph osd df`"+`. An OSD that is down has no current figures ("-"). The
space is the data directory's file system's: OSDs that share one disk each
report all of it.`, "osd df", printOSDDf)
}

// newOSDPerfCmd is `osprey osd perf`, Ceph's `ceph osd perf`.
func newOSDPerfCmd() *cobra.Command {
	return monReadCmd("perf", "Show each OSD's commit latency and load, as its beacons report them",
		`Shows, per OSD, the mean of its store's WAL syncs over its last beacons'
window (about a second), which every synced write waits for: Ceph's commit
latency, where a slow or failing disk stands out; then the ops per second
it served and its client bytes per second. An OSD that is down, or that
synced nothing in the window, shows "-" (osprey_osd_wal_fsync_duration_seconds
has the whole histogram). --json prints the mon's report of each OSD.`, "osd df", printOSDPerf)
}

// monReadCmd is a command that prints what the read-only mon command
// prefix returns, with print or as JSON (--json).
func monReadCmd[T any](use, short, long, prefix string, print func(io.Writer, T) error) *cobra.Command {
	var (
		mf     monFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return monRead(cmd, mf, prefix, asJSON, print)
		},
	}
	addMonFlags(cmd.Flags(), &mf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printOSDPerf(w io.Writer, osds []mon.OSDReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	io.WriteString(tw, "OSD	COMMIT_LATENCY(ms)	OPS/s	READ/s	WRITE/s	STATUS	\n")
	for _, o := range osds {
		st := "down"
		if o.Up {
			st = "up"
		}
		lat := "-"
		if o.CommitLatencyMs > 0 {
			lat = fmt.Sprintf("%.2f", o.CommitLatencyMs)
		}
		if o.BeaconAt.IsZero() {
			fmt.Fprintf(tw, "osd.%d\t-\t-\t-\t-\t%s\t\n", o.ID, st)
			continue
		}
		fmt.Fprintf(tw, "osd.%d\t%s\t%.0f\t%s\t%s\t%s\t\n", o.ID, lat, o.OpsPerSec,
			humanBytes(int64(o.ReadBytesPerSec)), humanBytes(int64(o.WriteBytesPerSec)), st)
	}
	return tw.Flush()
}

func printOSDDf(w io.Writer, osds []mon.OSDReport) error {
	var used, size uint64
	for _, o := range osds {
		used += o.UsedBytes
		size += o.UsedBytes + o.AvailBytes
	}
	avg := 0.0
	if size > 0 {
		avg = float64(used) / float64(size)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	io.WriteString(tw, "ID\tWEIGHT\tSIZE\tUSE\tAVAIL\t%USE\tVAR\tPGS\tSTATUS\t\n")
	minVar, maxVar := math.Inf(1), math.Inf(-1)
	for _, o := range osds {
		st := "down"
		if o.Up {
			st = "up"
		}
		if !o.In {
			st += ",out"
		}
		if o.Fullness != "" && o.Fullness != "ok" {
			st += "," + o.Fullness
		}
		n := o.UsedBytes + o.AvailBytes
		if n == 0 {
			fmt.Fprintf(tw, "osd.%d\t%g\t-\t-\t-\t-\t-\t%d\t%s\t\n", o.ID, o.Weight, o.PGs, st)
			continue
		}
		pct := float64(o.UsedBytes) / float64(n)
		v := 0.0
		if avg > 0 {
			v = pct / avg
		}
		minVar, maxVar = min(minVar, v), max(maxVar, v)
		fmt.Fprintf(tw, "osd.%d\t%g\t%s\t%s\t%s\t%.2f\t%.2f\t%d\t%s\t\n", o.ID, o.Weight, humanBytes(int64(n)), humanBytes(int64(o.UsedBytes)),
			humanBytes(int64(o.AvailBytes)), 100*pct, v, o.PGs, st)
	}
	fmt.Fprintf(tw, "TOTAL\t\t%s\t%s\t%s\t%.2f\t\t\t\t\n", humanBytes(int64(size)), humanBytes(int64(used)), humanBytes(int64(size-used)), 100*avg)
	tw.Flush()
	if !math.IsInf(minVar, 1) {
		fmt.Fprintf(w, "MIN/MAX VAR: %.2f/%.2f\n", minVar, maxVar)
	}
	return nil
}

// newOSDPoolCmd is `osprey osd pool ls|get|set`, Ceph's `ceph osd pool`.
func newOSDPoolCmd() *cobra.Command {
	pool := &cobra.Command{
		Use:   "pool",
		Short: "List pools, show and change their replica counts (as ceph osd pool)",
	}
	var (
		mf     monFlags
		asJSON bool
		sure   bool
	)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the pools: id, name, size, min_size, PG count",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return monRead(cmd, mf, "osd pool ls", asJSON, printPools)
		},
	}
	get := &cobra.Command{
		Use:   "get POOL size|min_size|pg_num|all",
		Short: "Show one of a pool's variables",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return monRead(cmd, mf, "osd pool ls", false, func(w io.Writer, pools []mon.PoolInfo) error {
				i := slices.IndexFunc(pools, func(p mon.PoolInfo) bool { return p.Name == args[0] })
				if i < 0 {
					return fmt.Errorf("no pool %q", args[0])
				}
				p := pools[i]
				vals := map[string]any{"size": p.Size, "min_size": p.MinSize, "pg_num": p.PGCount}
				names := []string{"size", "min_size", "pg_num"}
				switch {
				case args[1] == "all":
				case vals[args[1]] != nil:
					names = []string{args[1]}
				default:
					return usageErrorf("%q: want size, min_size, pg_num or all", args[1])
				}
				if asJSON {
					out := map[string]any{"pool": p.Name, "pool_id": p.ID}
					for _, n := range names {
						out[n] = vals[n]
					}
					return json.NewEncoder(w).Encode(out)
				}
				for _, n := range names {
					fmt.Fprintf(w, "%s: %v\n", n, vals[n])
				}
				return nil
			})
		},
	}
	set := &cobra.Command{
		Use:   "set POOL size|min_size N",
		Short: "Change a pool's replica count (size) or how many must be up for writes (min_size)",
		Long: `Sets a pool's size (replicas, 1 to 10) or min_size (members that must be up
for the PG to take writes, 1 to size), as ` + "`ceph osd pool set`" + `. The new map
moves each PG's acting set at once: a larger size adds members, which the
primaries backfill (status shows the PGs degraded, then active+clean); a
smaller one drops members, whose copies become strays the OSDs remove. A
new size sets min_size back to its default (size - size/2), as in Ceph.
The mon refuses without --yes-i-really-mean-it size 1 (a single copy of
every object) and a change that leaves min_size above the OSDs in (no PG
could take a write). pg_num is fixed when the cluster is made.`,
		Example: `  osprey osd pool set default size 2
  osprey osd pool set default min_size 1`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The form here, as every command's (exit 2); what depends
			// on the cluster (min_size against size, pg_num) the mon says.
			switch args[1] {
			case "size", "min_size":
				n, err := strconv.Atoi(args[2])
				switch {
				case err != nil:
					return usageErrorf("%s %q: not a whole number", args[1], args[2])
				case n < 1 || n > mon.MaxPoolSize:
					return usageErrorf("%s %d: want 1..%d", args[1], n, mon.MaxPoolSize)
				}
			case "pg_num", "pgp_num":
			default:
				return usageErrorf("%q: osd pool set takes size or min_size", args[1])
			}
			rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "osd pool set", Pool: args[0], Var: args[1], Val: args[2], Sure: sure})
			if err != nil {
				return err
			}
			var res struct {
				Message string `json:"message"`
			}
			text := strings.TrimSpace(rep.Output)
			if json.Unmarshal([]byte(rep.Output), &res) == nil && res.Message != "" && !asJSON {
				text = res.Message
				if res.Message == "nothing to change" {
					text = fmt.Sprintf("pool %s %s is %s already, map epoch %d", args[0], args[1], args[2], rep.Epoch)
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			return nil
		},
	}
	for _, c := range []*cobra.Command{ls, get, set} {
		addMonFlags(c.Flags(), &mf)
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	set.Flags().BoolVar(&sure, "yes-i-really-mean-it", false, "allow size 1, or a min_size above the OSDs in")
	pool.AddCommand(ls, get, set)
	return pool
}

func printPools(w io.Writer, pools []mon.PoolInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSIZE\tMIN_SIZE\tPGS")
	for _, p := range pools {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\n", p.ID, p.Name, p.Size, p.MinSize, p.PGCount)
	}
	return tw.Flush()
}

// newDFCmd is `osprey df`, Ceph's `ceph df`.
func newDFCmd() *cobra.Command {
	var (
		mf     monFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "df",
		Short: "Show the cluster's raw space and each pool's stored bytes, objects and room left",
		Long: `As ` + "`ceph df`" + `: the raw space of the up OSDs' data disks, then per pool the bytes
stored (one copy of each object, as the PGs' primaries last reported), the
objects, the space their copies use (stored times the copies each PG has),
%USED, and MAX AVAIL: how much more the pool can store before the first of
its OSDs reaches the full ratio, each OSD taking its weight's share of
every copy.
OSDs that share one file system each report all of it, so on one host the
raw figures and MAX AVAIL count that disk once per OSD.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return monRead(cmd, mf, "df", asJSON, printDF)
		},
	}
	addMonFlags(cmd.Flags(), &mf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printDF(w io.Writer, df *mon.DF) error {
	pct := 0.0
	if df.TotalBytes > 0 {
		pct = 100 * float64(df.UsedBytes) / float64(df.TotalBytes)
	}
	fmt.Fprintln(w, "--- RAW STORAGE ---")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	io.WriteString(tw, "SIZE\tAVAIL\tUSED\t%RAW USED\n")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\n", humanBytes(int64(df.TotalBytes)), humanBytes(int64(df.AvailBytes)), humanBytes(int64(df.UsedBytes)), pct)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n--- POOLS ---")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	io.WriteString(tw, "POOL\tID\tPGS\tSTORED\tOBJECTS\tUSED\t%USED\tMAX AVAIL\n")
	for _, p := range df.Pools {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%.2f\t%s\n", p.Name, p.ID, p.PGCount, humanBytes(int64(p.Stored)), p.Objects,
			humanBytes(int64(p.Used)), p.PercentUsed, humanBytes(int64(p.MaxAvail)))
	}
	return tw.Flush()
}

// newHealthCmd is `osprey health [detail]`, Ceph's `ceph health`.
func newHealthCmd() *cobra.Command {
	var (
		mf     monFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "health [detail]",
		Short: "Print the cluster's health in one line, or with detail what each problem is about",
		Long: `As ` + "`ceph health`" + `: HEALTH_OK, HEALTH_WARN or HEALTH_ERR and the mon's
checks, on one line. With detail, as ` + "`ceph health detail`" + `: then each check
with its severity and Ceph's code (OSD_DOWN, PG_DEGRADED, PG_AVAILABILITY,
...), and under it what it is about: each OSD down, each PG with its state
and acting set, each pool or full OSD. The exit code is 0 whatever the
health, as status; scripts read the first word or --json.`,
		Example: `  osprey health
  osprey health detail`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			detail := len(args) == 1
			if detail && args[0] != "detail" {
				return usageErrorf("%q: want detail or nothing", args[0])
			}
			w := cmd.OutOrStdout()
			if detail {
				h, _, err := monGet[mon.Health](cmd, mf, "health detail")
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(w).Encode(h)
				}
				printHealthDetail(w, h)
				return nil
			}
			st, _, err := monGet[mon.Status](cmd, mf, "status")
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(w).Encode(st.Health)
			}
			_, err = fmt.Fprintln(w, healthLine(st.Health))
			return err
		},
	}
	addMonFlags(cmd.Flags(), &mf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the mon's JSON: status and checks (with detail, each check's code, severity, summary and detail lines too)")
	return cmd
}

// healthLine is h on one line, as `ceph health`.
func healthLine(h mon.Health) string {
	if len(h.Checks) == 0 {
		return h.Status
	}
	return h.Status + " " + strings.Join(h.Checks, "; ")
}

// printHealthDetail prints h as `ceph health detail`: the one-line
// health, then each check with its severity and code, and indented under
// it what it is about.
func printHealthDetail(w io.Writer, h mon.Health) {
	fmt.Fprintln(w, healthLine(h))
	for _, c := range h.Detail {
		sev := "WRN"
		if c.Severity == mon.HealthErr {
			sev = "ERR"
		}
		fmt.Fprintf(w, "[%s] %s: %s\n", sev, c.Code, c.Summary)
		for _, d := range c.Detail {
			fmt.Fprintf(w, "    %s\n", d)
		}
	}
}
