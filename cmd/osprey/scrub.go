package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ospreystore/osprey/internal/placement"
)

// newPGCmd is `osprey pg`, the commands on placement groups.
func newPGCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pg",
		Short: "Placement group commands (deep-scrub)",
	}
	cmd.AddCommand(newPGDeepScrubCmd())
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
			var pgs []placement.PGID
			for _, a := range args {
				id, err := placement.ParsePGID(a)
				if err != nil {
					return usageErrorf("%v", err)
				}
				pgs = append(pgs, id)
			}
			ctx := cmd.Context()
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			for _, pg := range pgs {
				osds, err := cl.DeepScrubPG(ctx, pg)
				if err != nil {
					return fmt.Errorf("pg %s: %w", pg, err)
				}
				if c.asJSON {
					json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"pg": pg.String(), "osds": osds})
					continue
				}
				names := make([]string, len(osds))
				for i, id := range osds {
					names[i] = "osd." + strconv.FormatUint(uint64(id), 10)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "instructing pg %s on %s to deep-scrub\n", pg, strings.Join(names, ", "))
			}
			return nil
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
			ctx := cmd.Context()
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			for _, id := range ids {
				n, err := cl.DeepScrubOSD(ctx, id)
				if err != nil {
					return err
				}
				if c.asJSON {
					json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"osd": id, "queued": n})
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "instructing osd.%d to deep-scrub its %d pg copies\n", id, n)
			}
			return nil
		},
	}
	c.add(cmd)
	return cmd
}
