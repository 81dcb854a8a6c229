package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/smallfs"
)

// TestFullRatioOptions: Options' full ratios become the new cluster's map
// ratios, and its failsafe the OSDs': with the cluster's directory on a
// disk of its own filled to 70%, a put fails StorageFull at the OSD's
// failsafe 0.6, naming the map's full_ratio 0.9.
func TestFullRatioOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	const disk = 256 << 20
	dir := smallfs.Mount(t, disk)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := Start(ctx, Options{OSDs: 1, PGs: 8, WithMon: true, NoAuth: true, Dir: dir, Logger: quiet,
		NearfullRatio: 0.5, BackfillfullRatio: 0.7, FullRatio: 0.9, FailsafeFullRatio: 0.6})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if near, back, full := c.Mon.Map().FullRatios(); near != 0.5 || back != 0.7 || full != 0.9 {
		t.Fatalf("the map's ratios %v %v %v, want Options' 0.5 0.7 0.9", near, back, full)
	}
	cl, err := client.New(ctx, client.Options{Mon: []string{c.Mon.Addr()}, Logger: quiet, RetryFor: 2 * time.Second, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "full"); err != nil {
		t.Fatal(err)
	}
	smallfs.Fill(t, dir, disk*30/100)
	// A put measures the disk again once the last measure is 100 ms old.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := cl.PutObject(ctx, "full", "k", bytes.NewReader([]byte("x")), 1, client.PutOptions{})
		if errors.Is(err, client.ErrStorageFull) {
			if !strings.Contains(err.Error(), "full_ratio 0.9, failsafe 0.6") {
				t.Fatalf("put on a disk 70%% used: %v, want the map's full_ratio 0.9 and the failsafe 0.6", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put on a disk 70%% used with failsafe 0.6: %v, want StorageFull", err)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}
