package osdtest

import (
	"fmt"

	"github.com/ospreystore/osprey/internal/placement"
	"golang.org/x/sys/unix"
)

// IgnoreHostDisk is the full ratio (nearfull, backfillfull and full in
// the first map; each OSD's failsafe too in the process and local
// clusters, not in Start's) of test clusters that are not about full
// disks. Their OSDs keep their data under TMPDIR, on the
// host's disk, whose fullness is none of the test's business: at the
// defaults a host disk 85% used makes every OSD nearfull and the
// cluster HEALTH_WARN. A ratio of 1 is reached only by the last byte.
// Tests about full disks keep the defaults and give every OSD a small
// filesystem of its own (internal/smallfs) instead.
const IgnoreHostDisk = 1.0

// HostDiskNote is, for the failure message of a test that waited for
// HEALTH_OK, a note on the filesystem holding dir when it is over the
// default nearfull ratio (an OSD whose data is there at Ceph's ratios
// reports nearfull or worse), else "".
func HostDiskNote(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return ""
	}
	used := 1 - float64(st.Bavail)/float64(st.Blocks)
	if used < placement.DefaultNearfullRatio {
		return ""
	}
	return fmt.Sprintf(" (the host's filesystem holding %s is %.1f%% used, over the default nearfull_ratio %g: OSDs with their data there at the default ratios report nearfull or worse; see osdtest.IgnoreHostDisk)",
		dir, 100*used, placement.DefaultNearfullRatio)
}
