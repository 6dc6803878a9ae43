//go:build race

package proxy_test

// raceEnabled: the tests run under the race detector, which makes the
// server's work several times slower; heavy tests scale their sizes down
// with it and keep their assertions.
const raceEnabled = true
