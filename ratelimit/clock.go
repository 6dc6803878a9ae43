package ratelimit

import "time"

// Clock is the source of time for a Limiter, so tests drive queue timeouts
// and rate limits without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed and a stop
	// function with the semantics of time.Timer.Stop.
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

// realClock is the Clock of the operating system.
type realClock struct{}

var _ Clock = realClock{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
