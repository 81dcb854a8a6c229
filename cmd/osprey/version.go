package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version says which build this is, from what the Go toolchain recorded
// in the binary: the main module's version, the VCS revision it was built
// from (and whether the tree had changes), and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	return versionLine(bi, ok)
}

func versionLine(bi *debug.BuildInfo, ok bool) string {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if !ok || bi == nil {
		return fmt.Sprintf("osprey (no build information) %s %s", runtime.Version(), platform)
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	line := "osprey " + v
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		line += ", commit " + rev
		if modified == "true" {
			line += " (modified)"
		}
	}
	return line + ", " + bi.GoVersion + " " + platform
}

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
