// Package dashboard is the mon's live status page, Ceph's mgr dashboard in
// small: health with its reasons, the OSD tree with each OSD's space and
// throughput, PGs by state, client and recovery throughput over the last
// minutes, and recent events. It serves plain HTML, CSS and JS embedded in
// the binary, and the JSON the page polls, on an admin listener of its own
// (osprey mon --dashboard-addr).
//
// A sampler asks the mon for a Report every Interval (any mon can answer:
// the beacons are in etcd), keeps each OSD's rates and the cluster's in
// rings of the last History, and turns the difference between two reports
// into events (osd down, out, peering, recovery done). The diff is a pure
// function of the two reports; the rings are bounded, so a long-running
// mon's memory does not grow with time, only with the number of OSDs.
//
// What it must never do: panic or stop serving on a request, whatever its
// path or query; write to the map (it only reads); fetch anything from
// outside the binary (the page loads nothing but its own assets, which the
// Content-Security-Policy enforces in the browser).
package dashboard
