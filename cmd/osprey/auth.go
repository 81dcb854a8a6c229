package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
)

// newAuthCmd is `osprey auth`, Ceph's `ceph auth`: entities, their
// keyrings and caps, kept by the mon.
func newAuthCmd() *cobra.Command {
	var mf monFlags
	root := &cobra.Command{
		Use:   "auth",
		Short: "Manage entities, their keyrings and capabilities (as ceph auth)",
		Long: `Every daemon and client is an entity (mon.a, osd.3, client.backup) with a
keyring (a certificate the cluster's CA signed, and its private key) and
capabilities per service, in Ceph's syntax:

  mon 'allow r'                       read the map and status
  mon 'allow rw'                      also change the map (osd out, reweight, ...)
  mon 'allow *'                       also manage auth
  osd 'allow rw'                      read and write every bucket
  osd 'allow rw bucket=photos'        one bucket
  osd 'allow r bucket_prefix=logs-'   buckets whose names start so
  mon 'allow profile osd' osd 'allow profile osd'   an OSD daemon

Grants add up, and several go in one string separated by commas.
A keyring file is PEM (openssl reads it) and is written with mode 0600.`,
	}
	keyringOut := func(c *cobra.Command, out *string) {
		c.Flags().StringVarP(out, "output", "o", "", "write the keyring to this file (mode 0600) instead of printing it")
	}
	// issuing builds add, get-or-create, get and rotate: they hand out a
	// keyring.
	issuing := func(verb, use, short string, withCaps bool) *cobra.Command {
		var out string
		c := &cobra.Command{
			Use:   verb + " " + use,
			Short: short,
			Args:  entityArgs(withCaps),
			RunE: func(cmd *cobra.Command, args []string) error {
				req := &osdpb.MonCommand{Prefix: "auth " + verb, Entity: args[0]}
				if withCaps {
					req.Caps = capsArgs(args[1:])
				}
				rep, err := monCommand(cmd, mf, req)
				if err != nil {
					return err
				}
				return writeKeyring(cmd.OutOrStdout(), out, args[0], rep.Keyring)
			},
		}
		keyringOut(c, &out)
		addMonFlags(c.Flags(), &mf)
		return c
	}
	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the entities and their caps (no keys)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "auth ls"})
			if err != nil {
				return err
			}
			if lsJSON {
				fmt.Fprintln(cmd.OutOrStdout(), rep.Output)
				return nil
			}
			var entries []mon.AuthEntry
			if err := json.Unmarshal([]byte(rep.Output), &entries); err != nil {
				return fmt.Errorf("auth ls: %w", err)
			}
			printAuth(cmd.OutOrStdout(), entries)
			return nil
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON")
	addMonFlags(ls.Flags(), &mf)
	rm := &cobra.Command{
		Use:   "rm ENTITY",
		Short: "Remove an entity: its keyring stops working",
		Args:  entityArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "auth rm", Entity: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
	addMonFlags(rm.Flags(), &mf)
	caps := &cobra.Command{
		Use:   "caps ENTITY [SERVICE CAPS]...",
		Short: "Replace an entity's caps (services left out get none)",
		Args:  entityArgs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "auth caps", Entity: args[0], Caps: capsArgs(args[1:])})
			if err != nil {
				return err
			}
			var e mon.AuthEntry
			if err := json.Unmarshal([]byte(rep.Output), &e); err != nil {
				return fmt.Errorf("auth caps: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s caps: %s\n", e.Entity, auth.FormatCaps(e.Caps))
			return nil
		},
	}
	addMonFlags(caps.Flags(), &mf)
	root.AddCommand(
		issuing("rotate", "ENTITY", "Issue an entity a new keyring, caps unchanged, and print (or -o write) it; the old one is refused from its next session on", false),
		issuing("add", "ENTITY [SERVICE CAPS]...", "Create an entity and print (or -o write) its keyring; fails if it exists", true),
		issuing("get-or-create", "ENTITY [SERVICE CAPS]...", "Print (or -o write) an entity's keyring, creating the entity with these caps if it has none", true),
		issuing("get", "ENTITY", "Print (or -o write) an entity's keyring", false),
		ls, rm, caps,
	)
	return root
}

// entityArgs checks ENTITY [SERVICE CAPS]... (withCaps) or ENTITY alone.
func entityArgs(withCaps bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageErrorf("name an entity, e.g. client.backup")
		}
		if err := auth.ValidateEntity(args[0]); err != nil {
			return usageErrorf("%v", err)
		}
		rest := args[1:]
		switch {
		case !withCaps && len(rest) > 0:
			return usageErrorf("%s takes one entity", cmd.CommandPath())
		case len(rest)%2 != 0:
			return usageErrorf("caps come in pairs, SERVICE 'CAPS', e.g. osd 'allow rw bucket=photos'")
		}
		for i := 0; i < len(rest); i += 2 {
			if _, err := auth.ParseServiceCaps(rest[i], rest[i+1]); err != nil {
				return usageErrorf("%v", err)
			}
		}
		return nil
	}
}

// capsArgs pairs SERVICE CAPS arguments (entityArgs checked them); a
// service named twice gets both strings, joined as one list of grants.
func capsArgs(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(args); i += 2 {
		if prev := out[args[i]]; prev != "" {
			out[args[i]] = prev + ", " + args[i+1]
		} else {
			out[args[i]] = args[i+1]
		}
	}
	return out
}

// writeKeyring prints a keyring, or writes it to path with mode 0600.
func writeKeyring(w io.Writer, path, entity string, keyring []byte) error {
	if path == "" || path == "-" {
		_, err := w.Write(keyring)
		return err
	}
	if err := auth.WriteKeyringFile(path, keyring); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote the keyring of %s to %s\n", entity, path)
	return nil
}

func printAuth(w io.Writer, entries []mon.AuthEntry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENTITY\tSERIAL\tCAPS")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Entity, e.Serial, auth.FormatCaps(e.Caps))
	}
	tw.Flush()
}

// authFlag is --auth cert|none, as a NoAuth bool.
type authFlag struct{ noAuth *bool }

func (f authFlag) String() string {
	if f.noAuth != nil && *f.noAuth {
		return "none"
	}
	return "cert"
}

func (f authFlag) Set(v string) error {
	switch v {
	case "cert":
		*f.noAuth = false
	case "none":
		*f.noAuth = true
	default:
		return fmt.Errorf("want cert or none")
	}
	return nil
}

func (authFlag) Type() string { return "cert|none" }
