//go:build !invariants

// Package invariants switches on the messenger's extra self-checks, as
// pebble's internal/invariants does: code guarded by Enabled asserts what
// must always hold (credits within the window, each sequence number
// delivered once, a message released once) and panics with a clear
// message where it does not. A build without the invariants tag compiles
// the checks away; CI runs the tests with it (make test). It must never
// change behaviour beyond panicking on a broken invariant.
package invariants

// Enabled is true in a build with the invariants tag.
const Enabled = false
