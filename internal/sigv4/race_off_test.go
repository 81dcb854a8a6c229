//go:build !race

package sigv4

const raceEnabled = false
