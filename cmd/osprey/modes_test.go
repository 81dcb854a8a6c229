package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/msgr"
)

// TestModeFlags: `osprey osd --ms-cluster-mode/--ms-service-mode` reach
// the OSD's configuration per network, in Ceph's spellings; none is crc
// (nil); an unknown mode is a usage error naming the flag.
func TestModeFlags(t *testing.T) {
	dir, mapPath, osdConfig := captureOSDConfig(t)
	sec, crc := msgr.ModeSecure, msgr.ModeCRC
	for _, tc := range []struct {
		args              []string
		cluster, services []msgr.Mode
	}{
		{nil, nil, nil},
		{[]string{"--ms-cluster-mode", "secure"}, []msgr.Mode{sec}, nil},
		{[]string{"--ms-cluster-mode=secure", "--ms-service-mode", "prefer-secure"}, []msgr.Mode{sec}, []msgr.Mode{sec, crc}},
		{[]string{"--ms-service-mode", "crc,secure"}, nil, []msgr.Mode{crc, sec}},
	} {
		got := osdConfig(tc.args...)
		if !slices.Equal(got.ClusterModes, tc.cluster) || !slices.Equal(got.ServiceModes, tc.services) {
			t.Errorf("%v: cluster %v, service %v; want %v, %v", tc.args, got.ClusterModes, got.ServiceModes, tc.cluster, tc.services)
		}
	}
	_, _, err := run(t, "osd", "--map", mapPath, "--data", dir, "--ms-cluster-mode", "tls")
	if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "ms-cluster-mode") {
		t.Errorf("--ms-cluster-mode tls: %v (exit %d), want a usage error", err, exitCode(err))
	}
}
