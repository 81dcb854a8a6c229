//go:build race

package msgr_test

// raceEnabled: the race detector is on; goroutine stacks are larger.
const raceEnabled = true
