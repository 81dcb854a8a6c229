package osd_test

import (
	"strings"
	"testing"

	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestReady: an OSD is ready (its /readyz) while it runs up in its map; a
// map that has it down, or its stop, makes it not ready, saying why.
func TestReady(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 2, PGs: 8})
	for _, o := range c.OSDs {
		if err := o.Ready(); err != nil {
			t.Fatalf("osd.%d serving: %v", o.ID(), err)
		}
	}
	down, err := c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[1].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.OSDs[1].AdoptMap(down); err != nil {
		t.Fatal(err)
	}
	if err := c.OSDs[1].Ready(); err == nil || !strings.Contains(err.Error(), "down in its map") {
		t.Fatalf("osd.1 down in its map: ready says %v", err)
	}
	o := c.OSDs[0]
	c.StopOSD(0)
	if err := o.Ready(); err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("a stopped OSD: ready says %v", err)
	}
}
