//go:build !race

package broker

// raceScale: 1 without the race detector (race_test.go).
const raceScale = 1
