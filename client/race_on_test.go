//go:build race

package client_test

// raceEnabled: the race detector is on; sync.Pool then drops buffers at
// random, so allocation figures mean nothing.
const raceEnabled = true
