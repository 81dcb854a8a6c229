package local

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
)

// TestReadCacheSizeReachesTheOSDs: Options.ReadCacheSize (bench obj
// --read-cache-mib) is each OSD's read cache: off, a get of an object in
// a data file leaves nothing cached; by default it is cached and the
// next get is a hit.
func TestReadCacheSizeReachesTheOSDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := bytes.Repeat([]byte("osprey"), 200_000) // 1.2 MB: a data file, not Pebble
	for _, tc := range []struct {
		name   string
		size   int64
		cached bool
	}{{"off", -1, false}, {"default", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(ctx, Options{OSDs: 1, Replicas: 1, PGs: 4, Dir: t.TempDir(), ReadCacheSize: tc.size})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			cl, err := client.New(ctx, client.Options{Seeds: c.Seeds()})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			putGet(ctx, t, cl, "cache", body, 2)
			st := c.OSDs[0].Store().ReadCacheStats()
			if (st.Hits > 0) != tc.cached || (st.Extents > 0) != tc.cached {
				t.Fatalf("read cache %+v, want cached=%v", st, tc.cached)
			}
		})
	}
}

// putGet makes bucket, puts body in it as "k" and gets it back gets times.
func putGet(ctx context.Context, t *testing.T, cl *client.Client, bucket string, body []byte, gets int) {
	t.Helper()
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutObject(ctx, bucket, "k", bytes.NewReader(body), int64(len(body)), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for range gets {
		o, err := cl.GetObject(ctx, bucket, "k", client.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(o)
		o.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("get: %v (%d bytes)", err, len(got))
		}
	}
}
