package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
  mon 'allow profile s3-gateway' osd 'allow profile s3-gateway'   an S3 gateway

Grants add up, and several go in one string separated by commas.
A keyring file is PEM (openssl reads it) and is written with mode 0600.

An entity may also hold S3 key pairs (auth s3-key add): S3 requests signed
with one, through osprey s3, act as the entity, with its osd caps.`,
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
				// A file that cannot be written fails before the mon
				// issues anything: a rotate would otherwise revoke the
				// old key and lose the new one.
				if err := checkKeyringPath(out); err != nil {
					return err
				}
				rep, err := monCommand(cmd, mf, req)
				if err != nil {
					return err
				}
				// The S3 keys after the PEM, as comment lines (a keyring
				// file with them still parses), and with -o in the file,
				// not on the terminal: they are as secret as the key.
				keyring := rep.Keyring
				var e mon.AuthEntry
				if json.Unmarshal([]byte(rep.Output), &e) == nil {
					for _, k := range e.S3Keys {
						keyring = fmt.Appendf(keyring, "# S3 key of %s: access key %s secret key %s\n", args[0], k.AccessKey, k.Secret)
					}
				}
				if err := writeKeyring(cmd.OutOrStdout(), out, args[0], keyring); err != nil {
					return fmt.Errorf("%w (the mon has issued it: osprey auth get %s -o FILE writes it again)", err, args[0])
				}
				return nil
			},
		}
		keyringOut(c, &out)
		addMonFlags(c.Flags(), &mf)
		return c
	}
	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the entities, their caps and S3 access key ids (--json: with the secrets)",
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
		Use:   "caps ENTITY SERVICE CAPS [SERVICE CAPS]...",
		Short: "Replace an entity's caps (services left out get none)",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := entityArgs(true)(cmd, args); err != nil {
				return err
			}
			// As Ceph's auth caps: a forgotten argument must not strip
			// every cap (client.admin's would lock the admin out).
			if len(args) < 3 {
				return usageErrorf("name the caps to set, e.g. osd 'allow r' (services left out get none; osd '' takes every cap away)")
			}
			return nil
		},
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
		ls, rm, caps, newS3KeyCmd(&mf),
	)
	return root
}

// newS3KeyCmd is `osprey auth s3-key`, radosgw-admin's "key create" and
// "key rm": S3 key pairs on an entity's record.
func newS3KeyCmd(mf *monFlags) *cobra.Command {
	root := &cobra.Command{
		Use:   "s3-key",
		Short: "Give an entity S3 key pairs, or take them away (osprey s3 checks them)",
		Long: `An S3 request signed with one of an entity's key pairs acts as the entity:
the S3 gateway (osprey s3) allows it what the entity's osd caps allow,
reads with r and writes with w, on the buckets the caps name. The access key
id is unique in the cluster; the secret is shown when the key is made and by
auth get. A key removed is refused by the gateways once the mon's push of
the change reaches them, within a round trip.`,
		Example: `  osprey auth get-or-create client.photos osd 'allow rw bucket=photos'
  osprey auth s3-key add client.photos
  osprey auth s3-key rm client.photos AKEXAMPLEEXAMPLEEXAM`,
	}
	add := &cobra.Command{
		Use:   "add ENTITY",
		Short: "Make a new S3 key pair for an entity and print it",
		Args:  entityArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := monCommand(cmd, *mf, &osdpb.MonCommand{Prefix: "auth s3-key add", Entity: args[0]})
			if err != nil {
				return err
			}
			var k mon.S3KeyEntry
			if err := json.Unmarshal([]byte(rep.Output), &k); err != nil {
				return fmt.Errorf("auth s3-key add: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "access key %s\nsecret key %s\n", k.AccessKey, k.Secret)
			return nil
		},
	}
	addMonFlags(add.Flags(), mf)
	rm := &cobra.Command{
		Use:   "rm ENTITY ACCESS_KEY",
		Short: "Remove one of an entity's S3 key pairs",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErrorf("%s takes an entity and an access key id", cmd.CommandPath())
			}
			if err := auth.ValidateS3AccessKey(args[1]); err != nil {
				return usageErrorf("%v", err)
			}
			return entityArgs(false)(cmd, args[:1])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := monCommand(cmd, *mf, &osdpb.MonCommand{Prefix: "auth s3-key rm", Entity: args[0], AccessKey: args[1]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed S3 key %s of %s\n", args[1], args[0])
			return nil
		},
	}
	addMonFlags(rm.Flags(), mf)
	root.AddCommand(add, rm)
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

// checkKeyringPath fails when writeKeyring could not write a file at
// path: its directory is missing or not writable.
func checkKeyringPath(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	if err := auth.CheckKeyringPath(path); err != nil {
		return fmt.Errorf("cannot write the keyring to %s: %w", path, err)
	}
	return nil
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
	fmt.Fprintln(tw, "ENTITY\tSERIAL\tS3 KEYS\tCAPS")
	for _, e := range entries {
		ids := make([]string, len(e.S3Keys))
		for i, k := range e.S3Keys {
			ids[i] = k.AccessKey
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Entity, e.Serial, cmp.Or(strings.Join(ids, ","), "-"), auth.FormatCaps(e.Caps))
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
