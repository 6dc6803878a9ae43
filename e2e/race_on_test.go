//go:build race

package e2e

// raceEnabled: the tests run under the race detector; TestMain then builds
// lazyapi with -race too, and a data race it reports fails the test that
// ran it (run).
const raceEnabled = true
