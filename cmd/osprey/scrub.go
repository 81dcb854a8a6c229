package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// newPGCmd is `osprey pg`, the commands on placement groups.
func newPGCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pg",
		Short: "Placement group commands (ls, query, deep-scrub, repair, list-inconsistent)",
	}
	cmd.AddCommand(newPGLsCmd(), newPGQueryCmd(), newPGDeepScrubCmd(), newPGRepairCmd(), newPGListInconsistentCmd())
	return cmd
}

// newPGDeepScrubCmd is `osprey pg deep-scrub PGID...`, as `ceph pg
// deep-scrub`: every OSD of each PG's acting set scrubs its copy now.
func newPGDeepScrubCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "deep-scrub PGID...",
		Short: "Deep-scrub PGs now: every copy read back, checked, and repaired from another where damaged",
		Long: `Asks every OSD of each PG's acting set to deep-scrub its copy now, ahead of
its --deep-scrub-interval: every object read back and checked against its
CRC32Cs, a damaged one repaired from another member. The scrubs run in the
background; what they find goes to the OSDs' logs and metrics
(osprey_osd_scrub_*), and damage no member could repair to "osprey status"
(HEALTH_ERR, scrub errors). PG ids are Ceph's, POOL.SEED with the seed in hex
(1.1f), as the OSDs' logs name them; "meta" is the bucket records' PG. Needs
an admin keyring.`,
		Example: `  osprey pg deep-scrub 1.1f 1.20`,
		Args:    argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forEachPG(cmd, c, args, func(ctx context.Context, cl *client.Client, pg placement.PGID) (map[string]any, string, error) {
				osds, err := cl.DeepScrubPG(ctx, pg)
				names := make([]string, len(osds))
				for i, id := range osds {
					names[i] = "osd." + strconv.FormatUint(uint64(id), 10)
				}
				return map[string]any{"osds": osds}, fmt.Sprintf("instructing pg %s on %s to deep-scrub", pg, strings.Join(names, ", ")), err
			})
		},
	}
	c.add(cmd)
	return cmd
}

// newOSDDeepScrubCmd is `osprey osd deep-scrub ID...`, as `ceph osd
// deep-scrub`: each OSD scrubs every PG copy it holds now.
func newOSDDeepScrubCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "deep-scrub ID...",
		Short: "Deep-scrub every PG copy an OSD holds, now",
		Long: `Asks each OSD to deep-scrub every PG copy it holds now, one PG at a time at its
--scrub-bytes-per-sec (see "osprey pg deep-scrub"). Needs an admin keyring.`,
		Example: `  osprey osd deep-scrub 3`,
		Args:    argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseOSDIDs(args)
			if err != nil {
				return err
			}
			return adminEach(cmd, c, ids, func(ctx context.Context, cl *client.Client, id uint32) (map[string]any, string, error) {
				n, err := cl.DeepScrubOSD(ctx, id)
				return map[string]any{"osd": id, "queued": n}, fmt.Sprintf("instructing osd.%d to deep-scrub its %d pg copies", id, n), err
			})
		},
	}
	c.add(cmd)
	return cmd
}

// forEachPG runs do for each PG id of args (adminEach), naming the PG in
// its errors and JSON lines.
func forEachPG(cmd *cobra.Command, c commonFlags, args []string,
	do func(context.Context, *client.Client, placement.PGID) (asJSON map[string]any, text string, err error)) error {
	pgs, err := parsePGIDs(args)
	if err != nil {
		return err
	}
	return adminEach(cmd, c, pgs, func(ctx context.Context, cl *client.Client, pg placement.PGID) (map[string]any, string, error) {
		j, text, err := do(ctx, cl, pg)
		if err != nil {
			return nil, "", fmt.Errorf("pg %s: %w", pg, err)
		}
		j["pg"] = pg.String()
		return j, text, nil
	})
}

// adminEach runs do for each of ids, in order, on one connection, and
// prints what it says: one JSON line or one text line each. The first
// error stops it.
func adminEach[T any](cmd *cobra.Command, c commonFlags, ids []T,
	do func(context.Context, *client.Client, T) (asJSON map[string]any, text string, err error)) error {
	ctx := cmd.Context()
	cl, err := connect(ctx, cmd, c.target)
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, id := range ids {
		j, text, err := do(ctx, cl, id)
		if err != nil {
			return err
		}
		if c.asJSON {
			json.NewEncoder(cmd.OutOrStdout()).Encode(j)
			continue
		}
		fmt.Fprintln(cmd.OutOrStdout(), text)
	}
	return nil
}

// parsePGIDs parses PG ids as Ceph writes them (POOL.SEED, seed in hex).
func parsePGIDs(args []string) ([]placement.PGID, error) {
	var pgs []placement.PGID
	for _, a := range args {
		id, err := placement.ParsePGID(a)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		pgs = append(pgs, id)
	}
	return pgs, nil
}

// newPGRepairCmd is `osprey pg repair PGID...`, as `ceph pg repair`.
func newPGRepairCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "repair PGID...",
		Short: "Repair PGs now: compare every copy and install the authoritative one where they differ",
		Long: `Asks each PG's primary to deep-scrub the PG now, comparing its copy of every
object with its replicas', and to install the authoritative copy (of the
copies at the newest version that read back intact, the bytes most of them
hold; the primary's on a tie) on every copy that differs or lacks the object.
Waits until the repair is done and prints how many objects were inconsistent
and how many were repaired; a scrub after it finds the PG consistent, and
"osprey status" turns HEALTH_OK again. Exits 1 when some object could not be
repaired (no copy read back intact): "osprey pg list-inconsistent" shows them.
Needs an admin keyring.`,
		Example: `  osprey pg repair 1.1f`,
		Args:    argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			left := 0
			err := forEachPG(cmd, c, args, func(ctx context.Context, cl *client.Client, pg placement.PGID) (map[string]any, string, error) {
				found, repaired, err := cl.RepairPG(ctx, pg)
				left += max(found-repaired, 0)
				return map[string]any{"inconsistent": found, "repaired": repaired},
					fmt.Sprintf("pg %s: %d inconsistent objects, %d repaired", pg, found, repaired), err
			})
			if err == nil && left > 0 {
				err = fmt.Errorf("%d inconsistent objects could not be repaired (no copy read back intact, or a member could not take the copy): osprey pg list-inconsistent shows them", left)
			}
			return err
		},
	}
	c.add(cmd)
	return cmd
}

// newPGListInconsistentCmd is `osprey pg list-inconsistent PGID`, as
// `rados list-inconsistent-obj`.
func newPGListInconsistentCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "list-inconsistent PGID",
		Short: "List the objects whose copies differ, as the PG's last deep scrub found them",
		Long: `Prints the objects the last deep scrub of the PG found inconsistent (as
"rados list-inconsistent-obj" does): per object, the kinds of error, and per
copy (OSD) its version, size and CRC32C, what is wrong with it, and which copy
is authoritative (the one "osprey pg repair" installs on the others). Error
kinds: missing (the copy lacks the object), stale_version (an older version),
size_mismatch and data_digest_mismatch (other bytes than the authoritative
copy's), read_error (the copy failed its own checksums). Needs an admin
keyring.`,
		Example: `  osprey pg list-inconsistent 1.1f
  osprey pg list-inconsistent 1.1f --json`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onePG(cmd, c, args[0], func(ctx context.Context, cl *client.Client, pg placement.PGID) error {
				r, err := cl.ListInconsistent(ctx, pg)
				if err != nil {
					return err
				}
				if c.asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(inconsistentJSON(pg, r))
				}
				printInconsistent(cmd.OutOrStdout(), pg, r)
				return nil
			})
		},
	}
	c.add(cmd)
	return cmd
}

// The JSON of list-inconsistent, after rados list-inconsistent-obj's.
type (
	inconsistentOut struct {
		PG            string            `json:"pg"`
		Epoch         uint64            `json:"epoch"`
		Scrubbed      string            `json:"scrubbed,omitempty"`
		Inconsistents []inconsistentObj `json:"inconsistents"`
	}
	inconsistentObj struct {
		Bucket string       `json:"bucket"`
		Key    string       `json:"key"`
		Errors []string     `json:"union_shard_errors"`
		Shards []shardState `json:"shards"`
	}
	shardState struct {
		OSD           uint32   `json:"osd"`
		Errors        []string `json:"errors"`
		Missing       bool     `json:"missing,omitempty"`
		Version       string   `json:"version,omitempty"`
		Size          uint64   `json:"size"`
		DataDigest    string   `json:"data_digest,omitempty"`
		Authoritative bool     `json:"authoritative,omitempty"`
	}
)

func inconsistentJSON(pg placement.PGID, r *client.InconsistentPG) inconsistentOut {
	out := inconsistentOut{PG: pg.String(), Epoch: r.Epoch, Inconsistents: []inconsistentObj{}}
	if !r.Scrubbed.IsZero() {
		out.Scrubbed = r.Scrubbed.UTC().Format(time.RFC3339)
	}
	for _, io := range r.Objects {
		o := inconsistentObj{Bucket: io.Bucket, Key: io.Key, Errors: io.Errors}
		for _, sh := range io.Shards {
			s := shardState{OSD: sh.Osd, Errors: sh.Errors, Missing: sh.Missing, Authoritative: sh.Authoritative}
			if s.Errors == nil {
				s.Errors = []string{}
			}
			if !sh.Missing {
				s.Version, s.Size, s.DataDigest = versionString(sh.Version), sh.Size, fmt.Sprintf("0x%08x", sh.Crc32C)
			} else if sh.Version != nil {
				s.Version = versionString(sh.Version) // the logged delete that stands for the copy
			}
			o.Shards = append(o.Shards, s)
		}
		out.Inconsistents = append(out.Inconsistents, o)
	}
	return out
}

func versionString(v *osdpb.Version) string { return fmt.Sprintf("%d.%d", v.GetEpoch(), v.GetSeq()) }

func printInconsistent(w io.Writer, pg placement.PGID, r *client.InconsistentPG) {
	if len(r.Objects) == 0 && r.Scrubbed.IsZero() && pg.Seed == placement.MetaPG {
		// Its deep scrub checks each OSD's own records, never compares
		// them (osd compareScrub): saying "run deep-scrub" would loop.
		fmt.Fprintf(w, "pg %s: its copies (the bucket records, on every OSD) are not compared by deep scrub; each record carries a CRC32C checked whenever it is read\n", pg)
		return
	}
	if len(r.Objects) == 0 && r.Scrubbed.IsZero() {
		// As rados says "No scrub information available".
		fmt.Fprintf(w, "pg %s: no deep scrub has compared its copies yet (osprey pg deep-scrub %s)\n", pg, pg)
		return
	}
	found := "no inconsistent objects"
	if len(r.Objects) > 0 {
		found = fmt.Sprintf("%d inconsistent objects", len(r.Objects))
	}
	fmt.Fprintf(w, "pg %s: %s (scrubbed %s, epoch %d)\n", pg, found, r.Scrubbed.UTC().Format(time.RFC3339), r.Epoch)
	for _, io := range r.Objects {
		fmt.Fprintf(w, "%s/%s: %s\n", io.Bucket, io.Key, strings.Join(io.Errors, ", "))
		for _, sh := range io.Shards {
			line := fmt.Sprintf("  osd.%-3d", sh.Osd)
			switch {
			case sh.Missing && sh.Version != nil:
				line += " deleted at " + versionString(sh.Version) // a logged delete, authoritative
			case sh.Missing:
				line += " missing"
			default:
				line += fmt.Sprintf(" version %s  size %d  crc32c 0x%08x", versionString(sh.Version), sh.Size, sh.Crc32C)
			}
			if sh.Authoritative {
				line += "  authoritative"
			}
			if len(sh.Errors) > 0 {
				line += "  " + strings.Join(sh.Errors, ", ")
			}
			fmt.Fprintln(w, line)
		}
	}
}

// newPGQueryCmd is `osprey pg query PGID`, Ceph's `ceph pg PGID query`.
func newPGQueryCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "query PGID",
		Short: "Show a PG as its primary sees it: state, interval, log, each replica, what blocks it",
		Long: `Asks the PG's primary for its view of the PG, as "ceph pg PGID query": its
state, the map epoch it answered at (and its peering machine's), the acting
set, the current interval's first epoch and last_epoch_started, its log's
newest and oldest versions (epoch'seq), objects, bytes, degraded and
inconsistent counts; each replica's last_update and whether it is caught up,
recovering or unknown (not heard from since the primary started); the OSDs
a down or incomplete PG waits for (blocked_by); and a pull of the primary's
own copy, if one runs. --json prints the primary's answer as it came. Needs
an admin keyring.`,
		Example: `  osprey pg query 1.1f
  osprey pg query 1.1f --json | jq .peers`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onePG(cmd, c, args[0], func(ctx context.Context, cl *client.Client, pg placement.PGID) error {
				out, err := cl.QueryPG(ctx, pg)
				if err != nil {
					return err
				}
				var q osd.PGQuery
				if err := json.Unmarshal([]byte(out), &q); err != nil {
					return fmt.Errorf("the primary's answer: %w", err)
				}
				if c.asJSON {
					fmt.Fprintln(cmd.OutOrStdout(), out)
					return nil
				}
				return printPGQuery(cmd.OutOrStdout(), &q)
			})
		},
	}
	c.add(cmd)
	return cmd
}

func printPGQuery(w io.Writer, q *osd.PGQuery) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pg\t%s\n", q.PGID)
	fmt.Fprintf(tw, "state\t%s\n", q.State)
	fmt.Fprintf(tw, "epoch\t%d (peering machine at %d)\n", q.Epoch, q.MachineEpoch)
	fmt.Fprintf(tw, "up\t%s\n", actingText(q.Up))
	fmt.Fprintf(tw, "acting\t%s\n", actingText(q.Acting))
	fmt.Fprintf(tw, "interval\tsince e%d; last_epoch_started %d\n", q.IntervalStart, q.LastEpochStarted)
	fmt.Fprintf(tw, "log\tlast_update %s, log_tail %s\n", q.LastUpdate, q.LogTail)
	fmt.Fprintf(tw, "objects\t%d (%s), degraded %d, misplaced %d, inconsistent %d\n", q.Objects, humanBytes(int64(q.Bytes)), q.Degraded, q.Misplaced, q.Inconsistent)
	for i, p := range q.Peers {
		label := ""
		if i == 0 {
			label = "peers"
		}
		fmt.Fprintf(tw, "%s\tosd.%d %s %s\n", label, p.OSD, p.State, p.LastUpdate)
	}
	if len(q.BlockedBy) > 0 {
		fmt.Fprintf(tw, "blocked_by\t%v\n", q.BlockedBy)
	}
	if r := q.Recovering; r != nil {
		fmt.Fprintf(tw, "recovering\tfrom osd.%d, have %s, want %s\n", r.From, r.Have, r.Want)
	}
	return tw.Flush()
}

// onePG runs do for the PG arg names, with a client of the cluster c's
// flags name; an error names the PG.
func onePG(cmd *cobra.Command, c commonFlags, arg string, do func(context.Context, *client.Client, placement.PGID) error) error {
	pgs, err := parsePGIDs([]string{arg})
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	cl, err := connect(ctx, cmd, c.target)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := do(ctx, cl, pgs[0]); err != nil {
		return fmt.Errorf("pg %s: %w", pgs[0], err)
	}
	return nil
}
