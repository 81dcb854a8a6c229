// Command osprey is the Osprey command-line tool. Osprey is an object store
// whose daemons (OSDs) keep objects in Pebble and replicate them to each
// other, talking through msgr, a Ceph-style asynchronous messenger that runs
// over TCP or RDMA. This one binary will carry every subcommand; today that
// is `osprey bench`, which measures the messenger.
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
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
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
		SilenceUsage: true, // a failed run is not a usage mistake
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
	root.AddCommand(newBenchCmd(), newOSDCmd())
	return root
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
