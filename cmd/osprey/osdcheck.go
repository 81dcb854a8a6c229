package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
)

// newOSDCheckCmds are `osprey osd ok-to-stop` and `osprey osd
// safe-to-destroy`, Ceph's maintenance checks: each exits 0 when the
// answer is yes, 1 (with why) when it is no, so that a script can wait on
// one before it goes on.
func newOSDCheckCmds() []*cobra.Command {
	var (
		mf     monFlags
		asJSON bool
	)
	check := func(use, short, long string, answer func(w io.Writer, names, raw string) (string, error)) *cobra.Command {
		prefix := "osd " + strings.Fields(use)[0]
		c := &cobra.Command{
			Use:   use,
			Short: short,
			Long:  long,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				list, err := parseOSDIDs(args)
				if err != nil {
					return err
				}
				rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: prefix, Ids: list})
				if err != nil {
					return err
				}
				names := make([]string, len(list))
				for i, id := range list {
					names[i] = fmt.Sprintf("osd.%d", id)
				}
				w := cmd.OutOrStdout()
				if asJSON {
					fmt.Fprintln(w, strings.TrimSpace(rep.Output))
					w = io.Discard
				}
				no, err := answer(w, strings.Join(names, ", "), rep.Output)
				if err != nil {
					return fmt.Errorf("%s: the mon's answer: %w", prefix, err)
				}
				if no != "" {
					return &checkRefused{msg: no}
				}
				return nil
			},
		}
		addMonConnFlags(c.Flags(), &mf)
		c.Flags().BoolVar(&asJSON, "json", false, "print the mon's answer as one JSON object")
		return c
	}
	okToStop := check("ok-to-stop ID...", "Say whether stopping OSDs now keeps every PG active",
		`Says whether stopping the OSDs now (a reboot, an upgrade) keeps every PG
they serve active, as `+"`ceph osd ok-to-stop`"+`: each must keep min_size
acting members that hold a whole copy (a member being backfilled holds none
yet), and must be active now. Exits 0 when it is ok, saying how many PGs
would run degraded; otherwise 1, naming each PG that is or would become
inactive and why. It looks at the cluster as it is: another failure
meanwhile is not counted. Needs mon 'allow r'.`,
		func(w io.Writer, names, raw string) (string, error) {
			var r mon.OKToStop
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				return "", err
			}
			if r.OKToStop {
				fmt.Fprintf(w, "%s ok to stop: every PG they serve keeps min_size members with a whole copy (%d PGs would run degraded), provided nothing else fails meanwhile\n", names, len(r.OKBecomeDegraded))
				return "", nil
			}
			for _, d := range r.Detail {
				fmt.Fprintln(w, d)
			}
			return fmt.Sprintf("unsafe to stop %s now: %d PGs are or would become inactive", names, r.NumNotOKPGs), nil
		})
	safe := check("safe-to-destroy ID...", "Say whether OSDs can be destroyed without losing a copy of anything",
		`Says whether the OSDs' disks can be wiped or pulled without losing a copy
of anything, as `+"`ceph osd safe-to-destroy`"+`: no PG may map to them
(mark them out and wait for their PGs to move), a running one's store must
hold no PG copy any more (its strays are removed once their PGs are clean),
and of a stopped one every PG must be active+clean. Exits 0 when all are
safe; otherwise 1, saying why for each. Then osprey osd rm removes them.
Needs mon 'allow r'.`,
		func(w io.Writer, names, raw string) (string, error) {
			var r mon.SafeToDestroy
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				return "", err
			}
			if r.Safe() {
				fmt.Fprintf(w, "%s safe to destroy: no PG maps to them and no copy of anything lives only there\n", names)
				return "", nil
			}
			for _, d := range r.Detail {
				fmt.Fprintln(w, d)
			}
			return fmt.Sprintf("not safe to destroy yet: %s (why above)", names), nil
		})
	return []*cobra.Command{okToStop, safe}
}

// checkRefused is a maintenance check's "no": exit 1, its message on
// stderr after the reasons on stdout.
type checkRefused struct{ msg string }

func (e *checkRefused) Error() string { return e.msg }
