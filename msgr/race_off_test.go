//go:build !race

package msgr_test

const raceEnabled = false
