package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/dirlock"
	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/logbuf"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
)

// TestAddrInUseIsDetectable: Start retries when a port it chose
// was taken before it bound it, which it recognises with errors.Is through
// the OSD's and the messenger's wrapping.
func TestAddrInUseIsDetectable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	free, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := placement.NewLocal(placement.LocalOptions{
		PublicAddrs:  []string{fmt.Sprintf("tcp://127.0.0.1:%d", port)},
		ClusterAddrs: []string{fmt.Sprintf("tcp://127.0.0.1:%d", free)},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = osd.Start(context.Background(), osd.Config{ID: 0, Map: m, DataDir: t.TempDir()})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("starting on a taken port: %v, want EADDRINUSE", err)
	}
}

// TestStartAndRestart starts a cluster in a directory, stops it, and starts
// it again from the map it saved there: the same cluster, with its data.
func TestStartAndRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Start(ctx, Options{OSDs: 2, PGs: 8, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Seeds()) != 2 || c.MapPath != dir+"/map.json" {
		t.Fatalf("seeds %v, map %s", c.Seeds(), c.MapPath)
	}
	fsid := c.Map.FSID()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := placement.Load(dir + "/map.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err = Start(ctx, Options{Map: m, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if c.Map.FSID() != fsid || len(c.OSDs) != 2 {
		t.Fatalf("restart: fsid %s (was %s), %d OSDs", c.Map.FSID(), fsid, len(c.OSDs))
	}
}

// TestStartRefusesDirInUse: a second cluster on a directory a running one
// holds fails at once with *dirlock.InUseError, before it writes anything
// there (a new map would replace the running cluster's), and the
// directory is free again once the first is closed.
func TestStartRefusesDirInUse(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Start(ctx, Options{OSDs: 1, PGs: 8, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	fsid := c.Map.FSID()

	_, err = Start(ctx, Options{OSDs: 1, PGs: 8, Dir: dir})
	var inUse *dirlock.InUseError
	if !errors.As(err, &inUse) || inUse.Dir != dir || inUse.PID != os.Getpid() {
		t.Fatalf("second Start on %s: %v, want a *dirlock.InUseError naming it and this process", dir, err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the directory", err)
	}
	m, err := placement.Load(c.MapPath)
	if err != nil {
		t.Fatal(err)
	}
	if m.FSID() != fsid {
		t.Fatalf("after the refused Start the map has fsid %s, want the running cluster's %s", m.FSID(), fsid)
	}

	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err = Start(ctx, Options{Map: c.Map, Dir: dir})
	if err != nil {
		t.Fatalf("Start after the holder closed: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCloseStopsTogether: a cluster with a mon stops its OSDs without
// having the mon mark each down in turn (which had the OSDs not yet
// stopped peer again and warn of every PG going down, at the end of each
// `osprey up --demo`): neither at their request nor on their peers'
// reports of their refused connections (the mon stops first); a single
// OSD stopped alone still is.
func TestCloseStopsTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs logbuf.Buffer
	c, err := Start(ctx, Options{OSDs: 3, PGs: 16, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close(context.Background())
		}
	}()
	if err := c.StopOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), `msg="osds marked down"`); n != 1 {
		t.Fatalf("an OSD stopped alone: the mon marked OSDs down %d times, want once\n%s", n, logs.String())
	}
	closed = true
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, `msg="osds marked down"`); n != 1 {
		t.Errorf("Close had the mon mark OSDs down: %d marks in all, want only the lone stop's\n%s", n, out)
	}
	if n := strings.Count(out, `msg="osd stopped"`); n != 3 {
		t.Errorf("%d OSDs logged their stop, want 3", n)
	}
}
