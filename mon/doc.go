// Package mon is the monitor: the single authority over the cluster map,
// as Ceph's mons are. The map lives in etcd; the mon is its only writer.
//
// OSDs boot through it (MSG_MON_BOOT: an id by uuid, addresses, up), keep
// an etcd lease alive with beacons (MSG_MON_BEACON, which also carry their
// PGs' states for "status"), and report peers they cannot reach
// (MSG_MON_FAILURE). The mon marks an OSD down when its lease expires, when
// MinDownReporters hosts report it for the grace, at once when a peer's
// connection was refused, and at once when the OSD, stopping cleanly, asks
// for itself (MSG_MON_MARK_ME_DOWN); and out when it stayed down for the
// down-out interval. Operators change the map with commands (MSG_MON_COMMAND: "osd
// out", "osd in", "osd down", "osd rm", "osd reweight", "osd create") and
// read it ("status", "osd tree", "get map"). Everyone may subscribe
// (MSG_MON_SUBSCRIBE) and then gets every newer map pushed (MSG_MON_MAP).
//
// # etcd
//
// Every map change is one etcd transaction that compares the current map's
// revision and writes map N+1 and its history entry (store.go has the
// layout); on a conflict the change is computed again on the newer map, so
// two maps never share an epoch. Several mons may share one etcd: they
// elect a leader (concurrency.Election, whose value is the leader's msgr
// address). Only the leader boots OSDs, takes beacons and reports, runs the
// down-out clock and applies map-changing commands; its writes also compare
// its election key, so a leader that lost the election without noticing
// cannot write. A standby answers those requests NOT_LEADER with the
// leader's address, and answers subscriptions and read commands itself:
// every mon watches the map key. The leader's memory (failure reports, the
// beacon rates) is rebuilt by its successor from etcd and from new reports.
//
// The map edits (edits.go), the failure tracker (failure.go) and the health
// computation (status.go) are pure functions of the map, the request and
// the time; the I/O is at the edges (store.go, leader.go, dispatch.go).
//
// # What the mon must never do
//
//   - Write a map outside a transaction that compares the current one, or
//     two maps of one epoch.
//   - Mark an OSD back in that an operator marked out (only a mon's own
//     auto-out is undone by a boot), or give an OSD's id to another uuid.
//   - Panic, or stop serving, on what arrives: a malformed or unknown
//     request gets an INVALID_ARGUMENT reply (or is dropped, when it is not
//     a request at all).
//   - Block a connection's dispatch on etcd: each request runs on its own
//     goroutine, bounded by requestTimeout.
package mon
