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
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	if stdoutClosed(err) {
		// `osprey pg ls --json | head`: end as a program killed by
		// SIGPIPE does, silently (the rdma build ignores SIGPIPE for its
		// provider's sockets, so the write failed instead).
		os.Exit(exitBrokenPipe)
	}
	if err != nil {
		if line := errorLine(err); line != "" {
			fmt.Fprintln(os.Stderr, line)
		}
		os.Exit(exitCode(err))
	}
}

// exitBrokenPipe is a shell's status for a process killed by SIGPIPE.
const exitBrokenPipe = 128 + 13

// stdoutClosed reports whether err is a write to our stdout whose reader
// went away.
func stdoutClosed(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Path == os.Stdout.Name() && errors.Is(pe.Err, syscall.EPIPE)
}

// negativeArg finds a negative number pflag took for shorthand flags.
var negativeArg = regexp.MustCompile(`shorthand flag: '\d' in (-\d+)$`)

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
			if err := checkPositive(cmd); err != nil {
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
	for _, c := range []*cobra.Command{newUpCmd(), newS3Cmd(), newStatusCmd(), newHealthCmd(), newDFCmd(), newVersionsCmd(), newMonCmd(), newOSDCmd(), newPGCmd(), newAuthCmd(), newGCCmd(), newBenchCmd()} {
		c.GroupID = "cluster"
		root.AddCommand(c)
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// "osd out -1" reads to pflag as the flags -1 ("unknown
		// shorthand flag: '1' in -1"): say what it is.
		if m := negativeArg.FindStringSubmatch(err.Error()); m != nil {
			return usageErrorf("%s: not a flag, and not an id or a count (those are 0 or more; see %s --help)", m[1], cmd.CommandPath())
		}
		return usageErrorf("%v (see %s --help)", err, cmd.CommandPath())
	})
	// Cobra adds its completion command as it executes; added now, it is
	// in the tree rejectUnknownSubcommands walks, and cobra keeps it. It
	// writes its scripts to the root's output as it is when it is added:
	// for that moment, a writer that looks the output up at each write,
	// so that a SetOut after newRootCmd (the tests') still holds.
	root.SetOut(outputOf{root})
	root.InitDefaultCompletionCmd()
	root.SetOut(nil)
	root.SetHelpCommand(newHelpCmd())
	rejectUnknownSubcommands(root)
	return root
}

// newHelpCmd is `osprey help [command]`. Cobra's own printed "Unknown help
// topic" and the root's usage with exit 0, and for `help osd bogus` the
// osd's help, as if bogus were a command: a script checking that a
// command exists took both for yes.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the help of any command: osprey help [path to command].",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usageErrorf("unknown help topic %q (see %s --help)", strings.Join(args, " "), c.Root().Name())
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// outputOf writes to cmd's output as it is at each write.
type outputOf struct{ cmd *cobra.Command }

func (o outputOf) Write(b []byte) (int, error) { return o.cmd.OutOrStdout().Write(b) }

// rejectUnknownSubcommands makes each command under c that only groups
// subcommands (auth, auth s3-key, pg, bench, completion) refuse one it
// does not have as a usage error, exit 2, as the root does and as osd
// does by taking no arguments. Cobra's default for a command that does
// not run is to print its help and exit 0, so a typo (`osprey auth
// s3-key ls` for list) looked to a script like success. With no
// subcommand such a command still prints its help.
func rejectUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		rejectUnknownSubcommands(sub)
	}
	// "help" after a command group is its help, as git's; a daemon's
	// command with subcommands (osd, mon) takes it too.
	isHelp := func(args []string) bool { return len(args) == 1 && args[0] == "help" }
	if c.HasSubCommands() && c.Runnable() && c.HasParent() && c.RunE != nil {
		check, run := c.Args, c.RunE
		c.Args = func(cmd *cobra.Command, args []string) error {
			if isHelp(args) || check == nil {
				return nil
			}
			return check(cmd, args)
		}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if isHelp(args) {
				return cmd.Help()
			}
			return run(cmd, args)
		}
	}
	// The root has cobra's own check, which runs only for the root;
	// a command that runs checks its own arguments.
	if !c.HasSubCommands() || c.Runnable() || !c.HasParent() {
		return
	}
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default, which it sets on the root only
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 || isHelp(args) {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, " or ") + "?"
		}
		return usageErrorf("%s (see %s --help)", msg, cmd.CommandPath())
	}
	c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
}

// positiveAnnotation marks a flag whose value must be above zero
// (markPositive): 0 or less given is a usage error, not silently the
// default.
const positiveAnnotation = "osprey_positive"

// markPositive marks the flags names of f as positive.
func markPositive(f *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := f.SetAnnotation(n, positiveAnnotation, []string{"true"}); err != nil {
			panic(err) // a flag name the code misspelled
		}
	}
}

// checkPositive refuses a positive flag that was given a value of zero or
// less (a count, or a duration).
func checkPositive(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if _, ok := f.Annotations[positiveAnnotation]; !ok || err != nil {
			return
		}
		v := f.Value.String()
		if d, derr := time.ParseDuration(v); derr == nil {
			if d <= 0 {
				err = usageErrorf("--%s %s: must be positive", f.Name, v)
			}
			return
		}
		for _, one := range strings.Split(strings.Trim(v, "[]"), ",") {
			if n, perr := strconv.ParseInt(strings.TrimSpace(one), 10, 64); perr == nil && n <= 0 {
				err = usageErrorf("--%s %s: must be positive", f.Name, v)
				return
			}
		}
	})
	return err
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, usageErrorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
