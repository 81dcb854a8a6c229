package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const envMon = "OSPREY_MON"

// monAddrFile is where `osprey up` writes its mon's address, beside the map.
var monAddrFile = filepath.Join(defaultDataDir, "mon.addr")

// monFlags find the mons: --mon, $OSPREY_MON, then the file `osprey up`
// leaves in ./osprey-data.
type monFlags struct {
	addrs   []string
	timeout time.Duration
	keyring string
	modes   []msgr.Mode // --ms-client-mode
	// requestID is --request-id: a command that changes something and
	// timed out is rerun with the id it printed, so that the mon applies
	// it at most once over both runs.
	requestID string
}

const envKeyring = "OSPREY_KEYRING"

// adminKeyringFile is where `osprey up` leaves client.admin's keyring.
var adminKeyringFile = filepath.Join(defaultDataDir, "client.admin.keyring")

// addMonFlags adds the flags that reach the mons and, for the mon
// commands (which refuse it at run time when they only read),
// --request-id.
func addMonFlags(f *pflag.FlagSet, m *monFlags) {
	addMonConnFlags(f, m)
	f.StringVar(&m.requestID, "request-id", "", "the request id (32 hex digits) of a command that changes something: rerun one that timed out with the id it printed, and the mon applies it at most once (default a new one)")
}

// addMonConnFlags adds the flags that say how to reach the mons.
func addMonConnFlags(f *pflag.FlagSet, m *monFlags) {
	f.StringSliceVar(&m.addrs, "mon", nil, "mon addresses, e.g. tcp://10.0.0.1:3300,tcp://10.0.0.2:3300 (env "+envMon+"; default the one in ./"+monAddrFile+")")
	f.DurationVar(&m.timeout, "mon-timeout", 10*time.Second, "how long to try to reach a mon")
	f.Var(modesFlag{&m.modes}, "ms-client-mode", clientModeUsage)
	f.StringVar(&m.keyring, "keyring", "", "keyring file of the entity to act as (env "+envKeyring+"; default ./"+adminKeyringFile+" when it exists); 'none' to connect without authentication")
}

// loadKeyring is the keyring the command authenticates with: --keyring,
// $OSPREY_KEYRING, then the one `osprey up` leaves in ./osprey-data; nil
// when none is given or found (a cluster run with --auth none), or with
// --keyring none.
func (m monFlags) loadKeyring(getenv func(string) string) (*auth.Keyring, error) {
	path := m.keyringPath(getenv)
	if path == "" {
		return nil, nil
	}
	k, err := auth.LoadKeyring(path)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err) // a local file that cannot be read: exit 1
	}
	return k, nil
}

// keyringPath is the keyring file the flags, the environment or the
// current directory name; "" for none.
func (m monFlags) keyringPath(getenv func(string) string) string {
	path := cmp.Or(m.keyring, getenv(envKeyring))
	switch path {
	case "none":
		return ""
	case "":
		if _, err := os.Stat(adminKeyringFile); err != nil {
			return ""
		}
		return adminKeyringFile
	}
	return path
}

// resolveMons returns the mon addresses, and false when nothing names one;
// a malformed one is a usage error.
func resolveMons(m monFlags, getenv func(string) string) ([]string, bool, error) {
	in, source := m.addrs, "--mon"
	if len(in) == 0 {
		if v := getenv(envMon); strings.TrimSpace(v) != "" {
			in, source = []string{v}, envMon
		} else if b, err := os.ReadFile(monAddrFile); err == nil && strings.TrimSpace(string(b)) != "" {
			in, source = []string{string(b)}, "./"+monAddrFile
		} else {
			return nil, false, nil
		}
	}
	addrs, err := parseSeeds(in)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", source, err)
	}
	return addrs, true, nil
}

// dialMons makes a mon client for m's mons and keyring (opts adds to
// its options), and returns the mons' addresses with it.
func dialMons(ctx context.Context, cmd *cobra.Command, m monFlags, opts monclient.Options) (*monclient.Client, []string, error) {
	addrs, ok, err := resolveMons(m, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, usageErrorf("no mon given: use --mon tcp://HOST:PORT or set %s (or run in the directory of `osprey up`)", envMon)
	}
	k, err := m.loadKeyring(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	opts.Addrs, opts.Keyring, opts.Modes, opts.Logger = addrs, k, m.modes, cliLogger(cmd)
	mc, err := monclient.New(ctx, opts)
	return mc, addrs, err
}

// monCommand sends one command to the mons and returns its reply.
func monCommand(cmd *cobra.Command, m monFlags, req *osdpb.MonCommand) (*osdpb.MonCommandReply, error) {
	if monclient.Mutating(req.Prefix) {
		id, err := hex.DecodeString(m.requestID)
		if err != nil || (m.requestID != "" && len(id) != monclient.RequestIDLen) {
			return nil, usageErrorf("--request-id %q: want %d hex digits", m.requestID, 2*monclient.RequestIDLen)
		}
		if len(id) == 0 {
			id = monclient.NewRequestID()
		}
		req.RequestId = id
	} else if m.requestID != "" {
		return nil, usageErrorf("--request-id is for commands that change something; %s only reads", req.Prefix)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), m.timeout)
	defer cancel()
	mc, addrs, err := dialMons(ctx, cmd, m, monclient.Options{})
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	rep, err := mc.Command(ctx, req)
	if err != nil && ctx.Err() != nil {
		var nm *monclient.NoMonError
		if req.RequestId != nil && errors.As(err, &nm) && nm.Sent {
			// A mon may have applied it and lost the reply: the same id
			// makes a rerun apply it at most once. Not said when no mon
			// can have it (none reached): a plain rerun is safe then.
			err = fmt.Errorf("%w; it may have been applied: rerun with --request-id %x to apply it at most once", err, req.RequestId)
		}
		return nil, &unreachableError{target: clusterTarget{Seeds: addrs, Source: "the mon addresses"}, err: err}
	}
	return rep, err
}

// parseOSDIDs parses OSD ids, "3" or "osd.3", each once, in order.
func parseOSDIDs(args []string) ([]uint32, error) {
	var out []uint32
	for _, a := range args {
		n, err := strconv.ParseUint(strings.TrimPrefix(a, "osd."), 10, 32)
		if err != nil {
			return nil, usageErrorf("%q is not an OSD id", a)
		}
		if !slices.Contains(out, uint32(n)) { // osd.1 1: one OSD, asked once
			out = append(out, uint32(n))
		}
	}
	return out, nil
}

// osdVerbOutcome says what `osd VERB ids` changed, from the mon's output
// (its changed OSDs): "done" when it changed them all; else which were
// already so, as Ceph says "osd.2 is already in".
func osdVerbOutcome(verb string, ids []uint32, output string) string {
	var res struct {
		Changed []uint32 `json:"changed"`
	}
	if json.Unmarshal([]byte(output), &res) != nil || res.Changed == nil {
		return "done" // a mon that does not say
	}
	var already []string
	for _, id := range ids {
		if !slices.Contains(res.Changed, id) {
			already = append(already, fmt.Sprintf("osd.%d", id))
		}
	}
	state := map[string]string{"out": "out", "in": "in", "down": "down", "rm": "removed", "lost": "lost"}[verb]
	switch {
	case len(already) == 0:
		return "done"
	case len(res.Changed) == 0:
		return fmt.Sprintf("nothing to change (%s already %s)", strings.Join(already, ", "), state)
	default:
		return fmt.Sprintf("done; %s already %s", strings.Join(already, ", "), state)
	}
}

// newOSDAdminCmds are `osprey osd out|in|down|rm|reweight|tree` and the
// set-*-ratio ones, Ceph's `ceph osd ...`.
func newOSDAdminCmds() []*cobra.Command {
	var mf monFlags
	ids := parseOSDIDs
	// The map-changing commands print the mon's result with --json.
	var (
		asJSON bool
		sure   bool
	)
	jsonFlag := func(c *cobra.Command) {
		c.Flags().BoolVar(&asJSON, "json", false, "print the mon's result as one JSON object: command, ids, changed, epoch, message")
	}
	printResult := func(cmd *cobra.Command, rep *osdpb.MonCommandReply, text string) {
		if asJSON {
			text = strings.TrimSpace(rep.Output)
		}
		fmt.Fprintln(cmd.OutOrStdout(), text)
	}
	simple := func(verb, short string) *cobra.Command {
		c := &cobra.Command{
			Use:   verb + " ID...",
			Short: short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				list, err := ids(args)
				if err != nil {
					return err
				}
				rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "osd " + verb, Ids: list, Sure: sure})
				if err != nil {
					return err
				}
				printResult(cmd, rep, fmt.Sprintf("osd %s %v: %s, map epoch %d", verb, args, osdVerbOutcome(verb, list, rep.Output), rep.Epoch))
				return nil
			},
		}
		addMonFlags(c.Flags(), &mf)
		jsonFlag(c)
		switch verb {
		case "rm":
			c.Flags().BoolVar(&sure, "yes-i-really-mean-it", false, "remove an OSD that is still in (its PGs not backfilled elsewhere), or while PGs are down or incomplete (they may wait for it): what only it holds is lost")
		case "lost":
			c.Long = `Declare down OSDs lost for good (a dead disk), as ` + "`ceph osd lost`" + `.

A PG whose past interval had only OSDs that are now down waits for one of
them to come back (state down in osprey pg ls; osprey pg query PGID names
them, blocked_by): it cannot know which writes that interval acknowledged.
Declaring
those OSDs lost tells peering to stop waiting: once every OSD a past
interval waits for is lost (or removed), the PG goes active on what its
other members hold, and writes only they held are gone. A lost OSD that
boots again is asked and waited for as any other; a later loss needs a new
osd lost.`
			c.Flags().BoolVar(&sure, "yes-i-really-mean-it", false, "required: writes that only these OSDs hold are given up")
		}
		return c
	}
	reweight := &cobra.Command{
		Use:   "reweight ID WEIGHT",
		Short: "Set an OSD's straw2 weight (0 drains it)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := ids(args[:1])
			if err != nil {
				return err
			}
			w, err := strconv.ParseFloat(args[1], 64)
			if err != nil || !(w >= 0 && w <= mon.MaxWeight) {
				return usageErrorf("weight %q: want a number from 0 to %d", args[1], mon.MaxWeight)
			}
			rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "osd reweight", Ids: list, Weight: w})
			if err != nil {
				return err
			}
			printResult(cmd, rep, fmt.Sprintf("osd.%d weight %g, map epoch %d", list[0], w, rep.Epoch))
			return nil
		},
	}
	addMonFlags(reweight.Flags(), &mf)
	jsonFlag(reweight)
	ratio := func(which, short string) *cobra.Command {
		c := &cobra.Command{
			Use:   "set-" + which + "-ratio RATIO",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				r, err := strconv.ParseFloat(args[0], 64)
				if err != nil || !(r > 0 && r <= 1) {
					return usageErrorf("ratio %q: want a fraction in (0, 1], such as 0.95", args[0])
				}
				rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "osd set-" + which + "-ratio", Ratio: r})
				if err != nil {
					return err
				}
				printResult(cmd, rep, fmt.Sprintf("%s_ratio %g, map epoch %d", which, r, rep.Epoch))
				return nil
			},
		}
		addMonFlags(c.Flags(), &mf)
		jsonFlag(c)
		return c
	}
	flag := func(verb, short string) *cobra.Command {
		c := &cobra.Command{
			Use:   verb + " noout|noin",
			Short: short,
			Long: short + `, as ` + "`ceph osd " + verb + "`" + `:

  noout  the mon marks no down OSD out, so its PGs stay degraded on the
         others instead of moving (maintenance: a host down for a reboot)
  noin   an OSD that is out stays out when it boots, and a new OSD enters
         out, until ` + "`osprey osd in`" + `

status warns while a flag is set (HEALTH_WARN "noout flag(s) set").`,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "osd " + verb, Var: args[0]})
				if err != nil {
					return err
				}
				text := fmt.Sprintf("%s is %s, map epoch %d", args[0], verb, rep.Epoch)
				if strings.Contains(rep.Output, `"nothing to change"`) {
					text = fmt.Sprintf("%s is %s already, map epoch %d", args[0], verb, rep.Epoch)
				}
				printResult(cmd, rep, text)
				return nil
			},
		}
		addMonFlags(c.Flags(), &mf)
		jsonFlag(c)
		return c
	}
	var treeJSON bool
	tree := &cobra.Command{
		Use:   "tree",
		Short: "List the OSDs: host, up/in, weight, addresses, PGs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return monRead(cmd, mf, "osd tree", treeJSON, printTree)
		},
	}
	addMonFlags(tree.Flags(), &mf)
	tree.Flags().BoolVar(&treeJSON, "json", false, "print JSON")
	return []*cobra.Command{
		simple("out", "Mark OSDs out: their PGs move to others (recovery)"),
		simple("in", "Mark OSDs in again"),
		simple("down", "Mark OSDs down (a running OSD boots again at once)"),
		simple("rm", "Remove down, out OSDs from the map, and their entities (osd.N keys), as ceph osd purge"),
		simple("lost", "Declare down OSDs lost: PGs stop waiting for them (what only they held is gone)"),
		reweight, tree,
		flag("set", "Set an osdmap flag"),
		flag("unset", "Unset an osdmap flag"),
		ratio("nearfull", "Set the fraction of an OSD's data disk over which health warns (default 0.85)"),
		ratio("backfillfull", "Set the fraction over which nothing backfills into an OSD (default 0.90)"),
		ratio("full", "Set the fraction over which writes to an OSD's PGs fail with StorageFull (default 0.95)"),
	}
}

func printTree(w io.Writer, osds []mon.OSDTreeEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tSTATUS\tIN\tWEIGHT\tPGS\tPRIMARY\tDISK\tPUBLIC\tCLUSTER")
	for _, o := range osds {
		st, in := "down", "out"
		switch {
		case o.Up:
			st = "up"
		case o.Lost:
			st = "lost"
		}
		if o.In {
			in = "in"
		}
		host, disk, pub, clu := o.Host, cmp.Or(o.Fullness, "ok"), o.PublicAddr, o.ClusterAddr
		if !o.Up {
			disk = "-" // what its last beacon said is not current
		}
		if o.NeverBooted {
			// Created (osd create) but no daemon booted as it: no
			// host, disk or addresses to show.
			host, disk, pub, clu = cmp.Or(host, "-"), "-", "never-booted", "-"
		}
		fmt.Fprintf(tw, "osd.%d\t%s\t%s\t%s\t%g\t%d\t%d\t%s\t%s\t%s\n", o.ID, host, st, in, o.Weight, o.PGs, o.PrimaryPGs, disk, pub, clu)
	}
	return tw.Flush()
}

// clientIO is the status's client I/O as ceph -s says it, "" when idle.
func clientIO(s *mon.Status) string {
	if s.OpsPerSec == 0 && s.ReadBytesPerSec == 0 && s.WriteBytesPerSec == 0 {
		return ""
	}
	return fmt.Sprintf("%s/s rd, %s/s wr, %.0f op/s", humanBytes(int64(s.ReadBytesPerSec)), humanBytes(int64(s.WriteBytesPerSec)), s.OpsPerSec)
}

// printMonStatus prints the mon's status as `ceph -s` does.
func printMonStatus(w io.Writer, s *mon.Status) error {
	fmt.Fprintf(w, "  cluster:\n    id:     %s\n    health: %s\n", s.FSID, s.Health.Status)
	for _, c := range s.Health.Checks {
		fmt.Fprintf(w, "            %s\n", c)
	}
	fmt.Fprintf(w, "\n  services:\n    mon: %d daemons", len(s.Mons))
	var up, down []string
	for _, m := range s.Mons {
		if m.Up {
			up = append(up, m.Name)
		} else {
			down = append(down, m.Name)
		}
	}
	if len(down) > 0 {
		// Ceph's "quorum b,c, out of quorum: a".
		fmt.Fprintf(w, ", up %s, down %s", strings.Join(up, ","), strings.Join(down, ","))
	}
	for _, m := range s.Mons {
		if m.Leader {
			fmt.Fprintf(w, ", leader %s (%s)", m.Name, m.Addr)
		}
	}
	fmt.Fprintf(w, "\n    osd: %d osds: %d up, %d in; epoch %d\n", s.OSDs.Total, s.OSDs.Up, s.OSDs.In, s.Epoch)
	if len(s.Flags) > 0 {
		fmt.Fprintf(w, "         flags %s\n", strings.Join(s.Flags, ","))
	}
	fmt.Fprintf(w, "\n  data:\n    pools:   %d pools, %d pgs\n    objects: %d objects, %s\n", len(s.Pools), s.PGTotal, s.Objects, humanBytes(int64(s.StoredBytes)))
	if s.DegradedObjects+s.MisplacedObjects > 0 {
		fmt.Fprintf(w, "             %d degraded, %d misplaced\n", s.DegradedObjects, s.MisplacedObjects)
	}
	if s.UsedBytes+s.AvailBytes > 0 {
		fmt.Fprintf(w, "    usage:   %s used, %s avail\n", humanBytes(int64(s.UsedBytes)), humanBytes(int64(s.AvailBytes)))
	}
	states := make([]string, 0, len(s.PGs))
	for k := range s.PGs {
		states = append(states, k)
	}
	slices.Sort(states)
	fmt.Fprintf(w, "    pgs:    ")
	for i, k := range states {
		if i > 0 {
			fmt.Fprintf(w, "\n            ")
		}
		fmt.Fprintf(w, "%d %s", s.PGs[k], k)
	}
	fmt.Fprintln(w)
	client := clientIO(s)
	recovery := s.RecoveryBytesPerSec > 0
	if client != "" || recovery {
		fmt.Fprintf(w, "\n  io:\n")
	}
	if client != "" {
		fmt.Fprintf(w, "    client:   %s\n", client)
	}
	if recovery {
		fmt.Fprintf(w, "    recovery: %s/s\n", humanBytes(int64(s.RecoveryBytesPerSec)))
	}
	return nil
}

// monStatus is `osprey status` with a mon: its health, as `ceph -s`.
func monStatus(cmd *cobra.Command, mf monFlags, asJSON bool) error {
	return monRead(cmd, mf, "status", asJSON, printMonStatus)
}
