// Command osprey is the Osprey command-line tool. Osprey is an object store
// whose daemons (OSDs) keep objects in Pebble and replicate them to each
// other, talking through msgr, a Ceph-style asynchronous messenger that runs
// over TCP or RDMA. This one binary carries every subcommand: `osprey up`
// starts a local cluster in process, `osprey osd` runs one daemon of a real
// one, the object commands (mb, rb, ls, put, get, cp, rm, stat, status) use
// a cluster through the SDK in the style of aws s3 and mc, and `osprey
// bench` measures the messenger and the object store. docs/cli.md is the
// user's guide, with the exit codes (target.go) scripts rely on.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful stop; a second one takes the
		// default action and ends the process at once, whatever the stop
		// is waiting for.
		<-ctx.Done()
		stop()
	}()
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(exitCode(err))
	}
}

func newRootCmd() *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:   "osprey",
		Short: "Osprey: an RDMA-capable object store",
		Long: `Osprey is an object store: OSD daemons keep objects in Pebble and replicate
them to each other, clients reach them through an S3-like SDK, and every byte
between any two of them travels through msgr, an asynchronous messenger with
TCP and RDMA (libfabric) transports.`,
		SilenceUsage:  true, // a failed run is not a usage mistake
		SilenceErrors: true, // main prints them, as "osprey: CODE: message"
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			level, err := parseLevel(logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
			return nil
		},
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.Version = version()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newVersionCmd())
	// Help lists commands by what they are for, as kubectl's does.
	root.AddGroup(&cobra.Group{ID: "objects", Title: "Buckets and objects:"},
		&cobra.Group{ID: "cluster", Title: "Clusters:"})
	for _, c := range []*cobra.Command{newMbCmd(), newRbCmd(), newLsCmd(), newPutCmd(), newGetCmd(), newCpCmd(), newSyncCmd(), newRmCmd(), newStatCmd()} {
		c.GroupID = "objects"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newUpCmd(), newS3Cmd(), newStatusCmd(), newMonCmd(), newOSDCmd(), newPGCmd(), newAuthCmd(), newGCCmd(), newBenchCmd()} {
		c.GroupID = "cluster"
		root.AddCommand(c)
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%v (see %s --help)", err, cmd.CommandPath())
	})
	return root
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
