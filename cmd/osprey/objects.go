package main

// The bucket and object commands, in the style of `aws s3` and MinIO's
// `mc`: mb, rb (buckets.go), ls (ls.go), put, get, cp (transfer.go), rm (rm.go)
// and stat (stat.go); this file holds what they share. Each one connects, does its
// work through the SDK and exits; output lines follow aws s3's wording
// ("upload: a to osprey://b/a") so that people and scripts that know it
// know this, and --json prints one object per result instead.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

// Argument validators that make a miscount a usage error (exit 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

func argsBetween(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || hi >= 0 && len(args) > hi {
			return usageErrorf("%s: wrong number of arguments (%d); usage: %s", cmd.CommandPath(), len(args), cmd.UseLine())
		}
		return nil
	}
}

// printer writes a command's results: a line of text per result, or with
// --json one JSON object per line. --quiet drops the text, never JSON.
type printer struct {
	w      io.Writer
	asJSON bool
	quiet  bool
	mu     sync.Mutex // results may come from concurrent workers (rm)
}

func (p *printer) result(text string, v any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asJSON {
		json.NewEncoder(p.w).Encode(v)
		return
	}
	if !p.quiet {
		fmt.Fprintln(p.w, printable(text))
	}
}

// printable is s for a terminal: a key may hold any character but NUL,
// and one holding a line break or an escape sequence must neither split a
// listing's line nor drive the terminal, so control characters (C0, DEL,
// C1), line and paragraph separators, the bidirectional overrides that
// reorder what a line shows, and bytes that are not UTF-8 are written as
// Go escapes (\n, \x1b, \u202e), and then a backslash as \\, so that no
// escape reads as a key's own characters. Other characters, spaces and
// joiners of every script included, stay. --json carries keys as they are.
func printable(s string) string {
	if strings.IndexFunc(s, unprintable) < 0 {
		return s
	}
	var b strings.Builder
	for s != "" {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", s[0])
		case r == '\\':
			b.WriteString(`\\`)
		case unprintable(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// unprintable: the characters printable escapes (utf8.RuneError stands
// for a byte that is not UTF-8, which printable tells from U+FFFD).
func unprintable(r rune) bool {
	return unicode.IsControl(r) || r == utf8.RuneError || r == '\u2028' || r == '\u2029' ||
		r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069'
}

// objectJSON is an object (or a common prefix) in --json output.
type objectJSON struct {
	Bucket       string            `json:"bucket"`
	Key          string            `json:"key,omitempty"`
	Prefix       string            `json:"prefix,omitempty"` // a common prefix of ls without --recursive
	Size         *int64            `json:"size,omitempty"`
	ETag         string            `json:"etag,omitempty"`
	CRC32C       string            `json:"crc32c,omitempty"`
	LastModified *time.Time        `json:"last_modified,omitempty"`
	ContentType  string            `json:"content_type,omitempty"`
	UserMetadata map[string]string `json:"metadata,omitempty"`
}

func toJSON(bucket string, o client.ObjectInfo) objectJSON {
	if o.IsPrefix {
		return objectJSON{Bucket: bucket, Prefix: o.Key}
	}
	size, mod := o.Size, o.LastModified
	return objectJSON{Bucket: bucket, Key: o.Key, Size: &size, ETag: o.ETag, CRC32C: fmt.Sprintf("%08x", o.CRC32C),
		LastModified: &mod, ContentType: o.ContentType, UserMetadata: o.UserMetadata}
}

// commonFlags are what every object command has.
type commonFlags struct {
	target targetFlags
	asJSON bool
}

func (c *commonFlags) add(cmd *cobra.Command) {
	addTargetFlags(cmd.Flags(), &c.target)
	cmd.Flags().BoolVar(&c.asJSON, "json", false, "print one JSON object per result")
}

func (c *commonFlags) printer(cmd *cobra.Command) *printer {
	return &printer{w: cmd.OutOrStdout(), asJSON: c.asJSON}
}

// lsTime is aws s3 ls's timestamp format, in local time.
const lsTime = "2006-01-02 15:04:05"

// transferJSON is put's, get's and cp's --json result.
type transferJSON struct {
	Op          string  `json:"op"` // upload, download, copy
	Source      string  `json:"source"`
	Target      string  `json:"target"`
	Size        int64   `json:"size"`
	ETag        string  `json:"etag,omitempty"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
}

// completeRemote completes bucket names, then keys one '/' level at a
// time, from the cluster the command's flags name. needScheme is cp's
// convention: only words starting with osprey:// are objects, others
// complete as local files. bucketsOnly stops at bucket names (rb).
// Completion must never hang a shell, so the cluster gets two seconds.
func completeRemote(t *targetFlags, needScheme, bucketsOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		scheme := ""
		switch {
		case strings.HasPrefix(toComplete, remoteScheme):
			scheme = remoteScheme
		case needScheme && strings.HasPrefix(remoteScheme, toComplete) && toComplete != "":
			return []string{remoteScheme}, cobra.ShellCompDirectiveNoSpace
		case needScheme:
			return nil, cobra.ShellCompDirectiveDefault
		}
		word := strings.TrimPrefix(toComplete, scheme)
		parent := cmd.Context()
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, 2*time.Second)
		defer cancel()
		tf := *t
		tf.timeout = 2 * time.Second
		cl, err := connect(ctx, cmd, tf)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cl.Close()
		bucket, prefix, hasSlash := strings.Cut(word, "/")
		var out []string
		if !hasSlash {
			bs, err := cl.ListBuckets(ctx)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			for _, b := range bs {
				if strings.HasPrefix(b.Name, bucket) {
					if bucketsOnly {
						out = append(out, scheme+b.Name)
					} else {
						out = append(out, scheme+b.Name+"/")
					}
				}
			}
			if bucketsOnly {
				return out, cobra.ShellCompDirectiveNoFileComp
			}
			return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
		if bucketsOnly {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		for info, err := range cl.ListObjects(ctx, bucket, client.ListOptions{Prefix: prefix, Delimiter: "/", MaxKeys: 1000}) {
			if err != nil {
				break
			}
			out = append(out, scheme+bucket+"/"+info.Key)
		}
		// A prefix completes without a space after it, so the user can
		// go on typing into it; a lone key with one.
		if len(out) == 1 && !strings.HasSuffix(out[0], "/") {
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}
