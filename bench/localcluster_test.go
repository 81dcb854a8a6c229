package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/placement"
)

// TestAddrInUseIsDetectable: StartLocalCluster retries when a port it chose
// was taken before it bound it, which it recognises with errors.Is through
// the OSD's and the messenger's wrapping.
func TestAddrInUseIsDetectable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	free, err := freePort("127.0.0.1")
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
