package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
)

// Memory budgets, all derived from --memory-limit (M):
//
//	GOMEMLIMIT (debug.SetMemoryLimit)  = M - headroom (GoMemoryLimit)
//	cache budget (DefaultCacheBytes)   = M / 4
//	--max-inflight-bytes               = M/2 - cache budget   (= M/4 with the default cache)
//	--max-single-request-bytes         = 2 × --max-inflight-bytes
//	--max-watch-bytes                  = --max-inflight-bytes (open watches: Watch)
//
// The watch budget is taken from the half of M the others leave: open
// watches are mostly stacks and connection buffers, little garbage. The
// rest of M is headroom for what no budget accounts: the Go
// runtime, goroutine stacks, the etcd client's gRPC buffers, garbage not yet
// collected (GOMEMLIMIT makes the collector work harder as the heap nears
// its limit rather than letting it double), and the one oversize request
// admitted alone (see Limiter). With --memory-limit=512Mi: cache 128 MiB,
// in-flight 128 MiB, GOMEMLIMIT 416 MiB. With no --memory-limit the
// derivations assume DefaultMemoryLimit.
//
// GOMEMLIMIT is below M because M bounds the resident set and Go's limit
// does not count all of it: the binary's mapped code and data (~40 MB of
// RSS for lazyapi's ~95 MB binary) and the memory of threads outside Go.
// With GOMEMLIMIT = M, a heap whose collector had let garbage grow to the
// limit made the RSS M + ~40 MiB (the hostile suite's 400 stalled GETs:
// 552 MiB at --memory-limit=512Mi, in 2 of 8 runs).
const DefaultMemoryLimit = 1 << 30

// GoMemoryLimit returns the Go runtime's soft limit for a resident-set
// bound of limit bytes: limit minus an eighth, at least 96 MiB, at most a
// quarter of limit. The floor: the binary's resident code and data (~40
// MB) do not grow with the limit, and the collector lets the heap reach
// its soft limit before it works harder (the hostile suite's 400 stalled
// GETs peaked at 426-478 MiB RSS with a 448 MiB GOMEMLIMIT).
func GoMemoryLimit(limit int64) int64 {
	headroom := min(max(limit/8, 96<<20), limit/4)
	return limit - headroom
}

// minInflightBytes is the smallest in-flight budget the derivation accepts.
const minInflightBytes = 1 << 20

// ApplyMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// GoMemoryLimit(limit) with debug.SetMemoryLimit and returns the previous
// limit. limit <= 0 changes nothing (a GOMEMLIMIT environment variable, if
// any, stays in force) and returns the current limit. It is the one
// function of this package with process-wide effect; call it once from
// main.
func ApplyMemoryLimit(limit int64) (previous int64) {
	if limit <= 0 {
		return debug.SetMemoryLimit(-1)
	}
	return debug.SetMemoryLimit(GoMemoryLimit(limit))
}

// DefaultCacheBytes returns the default cache budget for a memory limit:
// a quarter of it (of DefaultMemoryLimit when memoryLimit <= 0).
func DefaultCacheBytes(memoryLimit int64) int64 {
	if memoryLimit <= 0 {
		memoryLimit = DefaultMemoryLimit
	}
	return memoryLimit / 4
}

// DefaultInflightBytes returns the default MaxInflightBytes: half the
// memory limit minus the cache budget (memoryLimit <= 0 means
// DefaultMemoryLimit). It fails when that leaves less than 1 MiB.
func DefaultInflightBytes(memoryLimit, cacheBytes int64) (int64, error) {
	if memoryLimit <= 0 {
		memoryLimit = DefaultMemoryLimit
	}
	if cacheBytes < 0 {
		return 0, errors.New("ratelimit: cannot derive MaxInflightBytes: negative cache budget")
	}
	v := memoryLimit/2 - cacheBytes
	if v < minInflightBytes {
		return 0, fmt.Errorf("ratelimit: cannot derive MaxInflightBytes: half of the memory limit (%d) minus the cache budget (%d) is %d bytes, below 1Mi", memoryLimit/2, cacheBytes, v)
	}
	return v, nil
}

// satMul returns a×b, saturated at MaxInt64 (a, b >= 0).
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
