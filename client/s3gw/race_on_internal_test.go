//go:build race

package s3gw

// raceEnabled: the race detector is on; sync.Pool then drops buffers at
// random, so allocation figures mean nothing.
const raceEnabled = true
