//go:build race

package sigv4

// raceEnabled: the race detector is on; sync.Pool then drops what it
// holds at random, so allocation figures mean nothing.
const raceEnabled = true
