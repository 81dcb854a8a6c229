// Package netns builds throwaway IP networks out of Linux network
// namespaces, so that tests can run Osprey's daemons as separate hosts on
// one machine: each host is a namespace of its own, joined to the others
// by veth pairs on a bridge, with private addresses, and its programs run
// under `ip netns exec`. Links can be cut (set down) and shaped (tc tbf).
//
// It must never touch the host's own network: every bridge, link and
// address it makes lives inside namespaces it created (the bridges in a
// "switch" namespace of their own), so no packet leaves the machine and no
// host route changes. Every namespace carries the lab's name, which holds
// the creating process's id, so Close, or a later run's RemoveStale after
// a crash, finds and removes all of it.
//
// It builds only on Linux; elsewhere the package is empty.
package netns
