// Package multihost holds the tests that run Osprey as several hosts:
// mons, OSDs and the S3 gateway as separate `osprey` processes, each in a
// network namespace of its own (internal/netns), joined by bridges with
// private addresses, and clients in yet another namespace. They form a
// cluster from --mon addresses alone, with authentication on, cut an
// OSD's and a mon leader's links, and shape links with tc.
//
// The tests need root and iproute2 and are skipped without them (or with
// -short), unless OSPREY_REQUIRE_NETNS=1 (make test) makes that a
// failure. They must never reach beyond the lab's namespaces: every
// address they speak to is one the lab made. docs/multihost.md is the
// manual.
package multihost
