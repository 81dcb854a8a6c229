package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/spf13/cobra"
)

// benchCleanup removes what `bench obj` wrote to an existing cluster, as
// rados bench and warp do: the bucket, with everything in it, when the run
// made it; else only the keys the run added to it.
type benchCleanup struct {
	cl      *client.Client
	bucket  string
	existed bool
	before  map[string]bool // with existed: its keys under bench.ObjKeyPrefix before the run
}

// prepareBenchCleanup notes, before the run, what the bucket holds.
func prepareBenchCleanup(ctx context.Context, cmd *cobra.Command, seeds []string, keyring *auth.Keyring, bucket string) (*benchCleanup, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := client.New(cctx, client.Options{Seeds: seeds, Keyring: keyring, Logger: cliLogger(cmd)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &unreachableError{target: clusterTarget{Seeds: client.ParseAddrs(seeds...), Source: "--seeds"}, err: err}
	}
	c := &benchCleanup{cl: cl, bucket: bucket}
	if c.existed, err = cl.BucketExists(ctx, bucket); err == nil && c.existed {
		c.before = map[string]bool{}
		for info, lerr := range cl.ListObjects(ctx, bucket, client.ListOptions{Prefix: bench.ObjKeyPrefix}) {
			if lerr != nil {
				err = lerr
				break
			}
			c.before[info.Key] = true
		}
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("%s: %w", remoteScheme+bucket, err)
	}
	return c, nil
}

// run removes the run's objects, and the bucket if the run made it.
func (c *benchCleanup) run(ctx context.Context) error {
	defer c.cl.Close()
	if !c.existed {
		// A put of an interrupted run may still land after the listing
		// that emptied the bucket (its op was on its way to the OSD when
		// the run ended): the bucket is then not empty, and is emptied
		// again, a few times at most.
		var err error
		for range 5 {
			err = removeBucket(ctx, c.cl, &printer{w: io.Discard, quiet: true}, c.bucket, true, 16)
			if !errors.Is(err, client.ErrBucketNotEmpty) {
				break
			}
		}
		if errors.Is(err, client.ErrNoSuchBucket) {
			return nil // the run never made it
		}
		return err
	}
	var keys []string
	for info, err := range c.cl.ListObjects(ctx, c.bucket, client.ListOptions{Prefix: bench.ObjKeyPrefix}) {
		if err != nil {
			return fmt.Errorf("%s: %w", remoteScheme+c.bucket, err)
		}
		if !c.before[info.Key] {
			keys = append(keys, info.Key)
		}
	}
	if err := c.cl.RemoveObjects(ctx, c.bucket, keys); err != nil {
		return fmt.Errorf("%s: %w", remoteScheme+c.bucket, err)
	}
	return nil
}
