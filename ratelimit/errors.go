package ratelimit

import (
	"errors"
	"fmt"
)

// Sentinel errors carried by *RejectError. Test for them with errors.Is.
var (
	// ErrQueueFull: the request did not fit and the wait queue was full (or
	// the request was pushed out of it by a client with a shorter queue).
	ErrQueueFull = errors.New("ratelimit: queue full")
	// ErrQueueTimeout: the request waited Config.MaxQueueWait without fitting.
	ErrQueueTimeout = errors.New("ratelimit: timed out waiting in queue")
	// ErrTooLarge: the request's estimate exceeds Config.MaxSingleRequestBytes,
	// so it can never be admitted; retrying does not help.
	ErrTooLarge = errors.New("ratelimit: request larger than the in-flight byte budget")
	// ErrRateLimited: the client exceeded Config.PerClientQPS.
	ErrRateLimited = errors.New("ratelimit: client rate limit exceeded")
)

// Reason is the short, metric-label-safe name of a rejection.
type Reason string

// Rejection reasons, used as the `reason` label of
// lazyapi_ratelimit_rejected_total.
const (
	ReasonQueueFull    Reason = "queue_full"
	ReasonQueueTimeout Reason = "queue_timeout"
	ReasonTooLarge     Reason = "too_large"
	ReasonRateLimited  Reason = "rate_limited"
)

// sentinel returns the sentinel error of r.
func (r Reason) sentinel() error {
	switch r {
	case ReasonQueueFull:
		return ErrQueueFull
	case ReasonQueueTimeout:
		return ErrQueueTimeout
	case ReasonTooLarge:
		return ErrTooLarge
	case ReasonRateLimited:
		return ErrRateLimited
	}
	panic(fmt.Sprintf("BUG: unknown reason %q", string(r)))
}

// RejectError is the error Admit returns when it refuses a request. The proxy
// answers it with HTTP 429 and a metav1.Status of reason TooManyRequests, with
// a Retry-After header of RetryAfter seconds when RetryAfter > 0.
type RejectError struct {
	// Reason says why the request was refused.
	Reason Reason
	// RetryAfter is the number of seconds the client should wait before it
	// retries; 0 means retrying will not help (ErrTooLarge), so the proxy
	// should send no Retry-After header (client-go then does not retry).
	RetryAfter int
	// Client is the request's client key.
	Client string
	// Bytes is the reservation the request asked for (after correction).
	Bytes int64
}

// Error implements error.
func (e *RejectError) Error() string {
	return fmt.Sprintf("%s (client %q, working set %d bytes, retry after %ds)",
		e.Reason.sentinel(), e.Client, e.Bytes, e.RetryAfter)
}

// Unwrap returns the sentinel error of e.Reason.
func (e *RejectError) Unwrap() error { return e.Reason.sentinel() }

// RetryAfter returns the Retry-After seconds of a rejection returned by Admit
// and whether err is such a rejection. seconds == 0 with ok == true means the
// request can never be admitted; send 429 without a Retry-After header.
func RetryAfter(err error) (seconds int, ok bool) {
	var re *RejectError
	if errors.As(err, &re) {
		return re.RetryAfter, true
	}
	return 0, false
}
