//go:build race

package msgr

// raceDetector: the race detector is on (it allocates on its own).
const raceDetector = true
