package main

import (
	"encoding/json"
	"fmt"

	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/ospreystore/osprey/mon"
	"github.com/spf13/cobra"
)

// version says which build this is (buildinfo.Line): the main module's
// version, the commit it was built from (or the executable's sum), the Go
// version and the platform; the daemons tell the mon the same build
// (`osprey versions`).
func version() string { return buildinfo.Line() }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version())
			return nil
		},
	}
}

// newVersionsCmd is `osprey versions`, Ceph's `ceph versions`: how many
// daemons up run each build, by kind, and overall, from the mon (each OSD
// says its build at boot, each mon when it registers).
func newVersionsCmd() *cobra.Command {
	var mf monFlags
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "Count the builds the mons and OSDs up run (ceph versions)",
		Long: `Prints, as ` + "`ceph versions`" + ` does, one JSON object: for "mon" and "osd" the
number of daemons up running each build (as ` + "`osprey version`" + ` names it: module
version and commit, or the executable's SHA-256 where the build recorded no
commit), and "overall". A daemon of a build from before daemons told theirs
counts as "unknown". During a rolling upgrade it shows what is left to
upgrade; ` + "`osprey health detail`" + ` names OSDs whose older build turns a feature off
(OSD_OLD_BUILD).`,
		Example: `  osprey versions
  osprey versions | jq '.osd | length'   # 1 once every OSD runs one build`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, _, err := monGet[*mon.Status](cmd, mf, "status")
			if err != nil {
				return err
			}
			if st.Versions == nil {
				return fmt.Errorf("versions: the mon's build is from before daemons told theirs: upgrade the mons first (docs/operations.md, Upgrading)")
			}
			out := map[string]map[string]int{"overall": {}}
			for kind, builds := range st.Versions {
				out[kind] = builds
				for v, n := range builds {
					out["overall"][v] += n
				}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "    ")
			return enc.Encode(out)
		},
	}
	addMonFlags(cmd.Flags(), &mf)
	return cmd
}
