//go:build race

package broker

// raceScale stretches the test groups' Raft timings under the race
// detector, which slows every replica several times over. At 100 ms a
// leader on a slow 2-core VM missed its lease in the detector's pauses,
// and elections moved the master in the middle of tests that do not test
// elections: on 2026-12-05 four broker tests failed in CI's race step,
// asking a replica that no longer led, or reading commitlogs while a new
// leader's first entries were appended (they failed at cd3aeee as well).
const raceScale = 3
