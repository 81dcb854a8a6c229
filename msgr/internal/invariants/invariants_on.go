//go:build invariants

package invariants

// Enabled is true in a build with the invariants tag.
const Enabled = true
