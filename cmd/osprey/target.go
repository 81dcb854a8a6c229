package main

// How a command finds the cluster, how it names objects, and how its
// failures become exit codes and error lines. Everything here is shared by
// the object commands (objects.go), status and completion.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Environment variables that name the cluster when no flag does.
const (
	envSeeds = "OSPREY_SEEDS"
	envMap   = "OSPREY_MAP"
)

// defaultDataDir is where `osprey up` keeps its cluster, relative to the
// directory it runs in; the object commands look for its map there last,
// so that `osprey up` in one shell and `osprey ls` in another, in the same
// directory, need no flags at all.
const defaultDataDir = "osprey-data"

// defaultMapPath is the map `osprey up` writes with its default --dir.
var defaultMapPath = filepath.Join(defaultDataDir, "map.json")

// targetFlags are the flags every command that talks to a cluster has.
type targetFlags struct {
	mon     monFlags
	seeds   []string
	mapPath string
	timeout time.Duration // to reach the cluster (fetch the map)
	retry   time.Duration // client.Options.RetryFor
}

func addTargetFlags(f *pflag.FlagSet, t *targetFlags) {
	addMonConnFlags(f, &t.mon) // object commands and status change nothing at the mon: no --request-id
	f.StringSliceVar(&t.seeds, "seeds", nil, "OSD public addresses, e.g. tcp://10.0.0.1:6800,tcp://10.0.0.2:6800 (env "+envSeeds+")")
	f.StringVar(&t.mapPath, "map", "", "cluster map file; its OSDs' public addresses are the seeds (env "+envMap+"; default ./"+defaultMapPath+" when it exists)")
	f.DurationVar(&t.timeout, "connect-timeout", 10*time.Second, "how long to try to reach the cluster")
	f.DurationVar(&t.retry, "retry-for", 60*time.Second, "how long to retry an op that fails for a reason that may pass (an OSD down, a map change)")
}

// clusterTarget is where a command will look for the cluster, and which
// flag, variable or file said so: error messages name it, since "cannot
// reach tcp://127.0.0.1:6800" is only actionable when the user knows where
// that address came from.
type clusterTarget struct {
	// Mons, when set, are the mons' addresses: the client takes its map
	// from them and subscribes. Otherwise Seeds are OSD public addresses.
	Mons   []string
	Seeds  []string
	Source string // "--mon", "--seeds", "OSPREY_MON", "OSPREY_SEEDS", "--map FILE", "OSPREY_MAP=FILE", "FILE"
}

// addrs are the addresses the target names, mons or seeds.
func (t clusterTarget) addrs() []string {
	if len(t.Mons) > 0 {
		return t.Mons
	}
	return t.Seeds
}

// errNoCluster says that nothing named a cluster.
var errNoCluster = errors.New("no cluster given: use --mon tcp://HOST:PORT[,...], --seeds tcp://HOST:PORT[,...] or --map FILE " +
	"(or set " + envMon + ", " + envSeeds + " or " + envMap + "), or start a local one in this directory with `osprey up`")

// resolveTarget applies the precedence documented in docs/cli.md: the
// --mon and --seeds flags, $OSPREY_MON, $OSPREY_SEEDS, the --map flag,
// $OSPREY_MAP, then what `osprey up` left in the current directory: its
// mon's address, else its map. The mons come first in each tier: they
// always have the current map, a map file may be stale. getenv is
// os.Getenv outside tests.
func resolveTarget(t targetFlags, getenv func(string) string) (clusterTarget, error) {
	mons := func(in []string, source string) (clusterTarget, error) {
		addrs, err := parseSeeds(in)
		if err != nil {
			err = fmt.Errorf("%s: %w", source, err)
		}
		return clusterTarget{Mons: addrs, Source: source}, err
	}
	if len(t.mon.addrs) > 0 {
		return mons(t.mon.addrs, "--mon")
	}
	if len(t.seeds) > 0 {
		seeds, err := parseSeeds(t.seeds)
		return clusterTarget{Seeds: seeds, Source: "--seeds"}, err
	}
	if v := getenv(envMon); strings.TrimSpace(v) != "" {
		return mons([]string{v}, envMon)
	}
	if v := getenv(envSeeds); strings.TrimSpace(v) != "" {
		seeds, err := parseSeeds([]string{v})
		if err != nil {
			err = fmt.Errorf("%s: %w", envSeeds, err)
		}
		return clusterTarget{Seeds: seeds, Source: envSeeds}, err
	}
	if t.mapPath != "" {
		return targetFromMap(t.mapPath, "--map "+t.mapPath)
	}
	if v := getenv(envMap); v != "" {
		return targetFromMap(v, envMap+"="+v)
	}
	if b, err := os.ReadFile(monAddrFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return mons([]string{string(b)}, "./"+monAddrFile)
	}
	if _, err := os.Stat(defaultMapPath); err == nil {
		return targetFromMap(defaultMapPath, "./"+defaultMapPath)
	}
	return clusterTarget{}, errNoCluster
}

// parseSeeds splits comma- or space-separated addresses and gives a bare
// HOST:PORT the tcp:// scheme, as the SDK does (client.ParseAddrs); none
// at all is a usage error.
func parseSeeds(in []string) ([]string, error) {
	out := client.ParseAddrs(in...)
	if len(out) == 0 {
		return nil, usageErrorf("no seed addresses given")
	}
	// A typo is a usage error, not 10 s of dialling a name no transport
	// can reach.
	for _, a := range out {
		ad, err := msgr.ParseAddr(a)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		if _, port, err := net.SplitHostPort(ad.Host); err != nil || !validPort(port) {
			return nil, usageErrorf("address %q: want [SCHEME://]HOST:PORT, e.g. tcp://127.0.0.1:6800", a)
		}
	}
	return out, nil
}

// validPort: a decimal TCP port, 1 to 65535.
func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 1<<16
}

// targetFromMap takes the seeds from a map file: the public addresses of
// the OSDs it says are up, or of all of them if it says none is (a stale
// file is still a better guess than nothing; the client fetches the
// current map from whichever answers).
func targetFromMap(path, source string) (clusterTarget, error) {
	m, err := placement.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return clusterTarget{}, &noMapError{source: source, err: err}
	}
	if err != nil {
		return clusterTarget{}, err
	}
	var up, all []string
	for info := range m.OSDs() {
		all = append(all, info.PublicAddr)
		if info.Up {
			up = append(up, info.PublicAddr)
		}
	}
	if len(up) == 0 {
		up = all
	}
	return clusterTarget{Seeds: up, Source: source}, nil
}

// noMapError: the map file that names the cluster does not exist, so
// nothing names one (exit 4, as with no flag at all).
type noMapError struct {
	source string // "--map FILE", "OSPREY_MAP=FILE"
	err    error
}

func (e *noMapError) Error() string {
	return e.source + ": the cluster map file does not exist (name the cluster with --mon or --seeds, or start one with `osprey up`)"
}

func (e *noMapError) Unwrap() error { return e.err }

// connect resolves the target and opens a client on it.
func connect(ctx context.Context, cmd *cobra.Command, t targetFlags) (*client.Client, error) {
	return connectWith(ctx, cmd, t, client.Options{Logger: cliLogger(cmd)})
}

// connectWith is connect with more client options (its target, RetryFor
// and a missing Logger come from the flags).
func connectWith(ctx context.Context, cmd *cobra.Command, t targetFlags, opts client.Options) (*client.Client, error) {
	tg, err := resolveTarget(t, os.Getenv)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	opts.Seeds, opts.Mon, opts.RetryFor = tg.Seeds, tg.Mons, t.retry
	if opts.Logger == nil {
		opts.Logger = cliLogger(cmd)
	}
	if opts.Keyring == nil {
		if opts.Keyring, err = t.mon.loadKeyring(os.Getenv); err != nil {
			return nil, err
		}
	}
	if opts.Modes == nil {
		opts.Modes = t.mon.modes
	}
	cl, err := client.New(cctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, msgr.ErrAuth) || errors.Is(err, msgr.ErrMode) || errors.Is(err, msgr.ErrSecureNeedsAuth) || errors.Is(err, ops.ErrAccessDenied) {
			return nil, err // reached, and refused: say why, not "unreachable"
		}
		return nil, &unreachableError{target: tg, err: err}
	}
	return cl, nil
}

// cliLogger is the logger for the SDK under a one-shot command: warnings
// and up unless --log-level was given, because the info lines a daemon
// wants (sessions opening) are noise around `osprey ls`.
func cliLogger(cmd *cobra.Command) *slog.Logger {
	if f := cmd.Flag("log-level"); f != nil && f.Changed {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// unreachableError: no seed answered with a map.
type unreachableError struct {
	target clusterTarget
	err    error
}

func (e *unreachableError) Error() string {
	// The SDK joins one error per seed with newlines; an error line is
	// one line.
	msg := strings.ReplaceAll(e.err.Error(), "\n", "; ")
	hint := ""
	switch {
	case strings.Contains(msg, "etcdserver: no leader"), strings.Contains(msg, "etcdserver: request timed out"):
		// The mons answered: it is their etcd cluster that has no quorum.
		return fmt.Sprintf("the mons at %s (from %s) answer, but their etcd cluster has no quorum: bring its members back (etcdctl endpoint status --cluster): %s",
			strings.Join(e.target.addrs(), ","), e.target.Source, msg)
	case e.target.Source == "./"+defaultMapPath || e.target.Source == "./"+monAddrFile:
		hint = " (is `osprey up` running in this directory?)"
	}
	return fmt.Sprintf("cannot reach the cluster at %s (from %s): %s%s", strings.Join(e.target.addrs(), ","), e.target.Source, msg, hint)
}

func (e *unreachableError) Unwrap() error { return e.err }

// Remote object names. Commands whose argument can only be remote (ls, rm,
// stat, mb, rb, and put's destination and get's source) take BUCKET/KEY with
// or without the scheme; cp, whose arguments may be local files, treats an
// argument as remote exactly when it starts with the scheme, as aws s3 cp
// does with s3://.
const remoteScheme = "osprey://"

// remotePath is a bucket and a key (possibly empty, or a prefix).
type remotePath struct {
	Bucket, Key string
}

func (p remotePath) String() string { return remoteScheme + p.Bucket + "/" + p.Key }

// isRemote reports whether a cp argument names an object.
func isRemote(s string) bool { return strings.HasPrefix(s, remoteScheme) }

// parseRemote splits "[osprey://]BUCKET[/KEY]" at the first slash: a key
// may hold slashes, a bucket may not. "bucket" and "bucket/" both have an
// empty key.
func parseRemote(s string) (remotePath, error) {
	rest := strings.TrimPrefix(s, remoteScheme)
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return remotePath{}, usageErrorf("%q: want BUCKET/KEY or %sBUCKET/KEY", s, remoteScheme)
	}
	return remotePath{Bucket: bucket, Key: key}, nil
}

// parseObject is parseRemote for arguments that must name an object.
func parseObject(s string) (remotePath, error) {
	p, err := parseRemote(s)
	if err == nil && p.Key == "" {
		err = usageErrorf("%q names a bucket; want BUCKET/KEY", s)
	}
	return p, err
}

// Exit codes; docs/cli.md has the table.
const (
	exitOK          = 0
	exitError       = 1   // anything else: a local file, a bad digest, a bucket not empty...
	exitUsage       = 2   // bad flags or arguments
	exitNotFound    = 3   // NoSuchBucket, NoSuchKey, NoSuchUpload
	exitUnavailable = 4   // no cluster given, none reachable, or ServiceUnavailable after retries
	exitInterrupted = 130 // SIGINT or SIGTERM, as a shell reports a command killed by SIGINT
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode maps a command's error to the process's exit status.
func exitCode(err error) int {
	var (
		oe *ops.Error
		ue *usageError
		re *unreachableError
		me *noMapError
		be *bench.OptionsError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.As(err, &ue) || isCobraUsage(err) || errors.As(err, &be):
		return exitUsage
	case errors.As(err, &oe):
		switch oe.Status {
		case osdpb.Status_NO_SUCH_BUCKET, osdpb.Status_NO_SUCH_KEY, osdpb.Status_NO_SUCH_UPLOAD:
			return exitNotFound
		case osdpb.Status_SERVICE_UNAVAILABLE:
			return exitUnavailable
		}
		return exitError
	case errors.As(err, &re) || errors.As(err, &me) || errors.Is(err, errNoCluster):
		return exitUnavailable
	}
	return exitError
}

// isCobraUsage recognises cobra's own argument errors, which are plain
// fmt errors (flag errors are wrapped by the root's FlagErrorFunc).
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "accepts ", "requires at least", "requires at most", "invalid argument",
		"if any flags in the group"} { // MarkFlagsMutuallyExclusive and its kin
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// errorLine is what the CLI prints for err: "osprey: <S3 code>: <message>"
// when the cluster answered with an error (the code first, so scripts can
// match it), else "osprey: <message>".
// Keys in it are printable's, but for its line breaks: errors.Join's
// (a daemon's close, a benchmark's cleanup) keep their lines. An error
// already printed (reportedError) is "".
func errorLine(err error) string {
	if _, ok := err.(*reportedError); ok {
		return ""
	}
	lines := strings.Split(errorText(err), "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

func errorText(err error) string {
	var (
		oe *ops.Error
		re *unreachableError
	)
	if errors.As(err, &re) {
		// Whatever each seed answered is in the message; no one code
		// speaks for all of them.
		return "osprey: " + err.Error()
	}
	if errors.As(err, &oe) {
		// The context our commands add ("osprey://b/k: ") precedes the
		// wrapped *ops.Error in the text; move the code in front of it.
		msg := strings.TrimSuffix(strings.TrimSuffix(err.Error(), oe.Error()), ": ")
		if oe.Message != "" {
			if msg != "" {
				msg += ": "
			}
			msg += oe.Message
		}
		if msg == "" {
			return "osprey: " + ops.Code(oe.Status)
		}
		return "osprey: " + ops.Code(oe.Status) + ": " + msg
	}
	if errors.Is(err, context.Canceled) {
		return "osprey: interrupted"
	}
	return "osprey: " + err.Error()
}
