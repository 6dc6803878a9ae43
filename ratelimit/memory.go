package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
)

// Memory budgets, all derived from --memory-limit (M):
//
//	GOMEMLIMIT (debug.SetMemoryLimit)  = M
//	cache budget (DefaultCacheBytes)   = M / 4
//	--max-inflight-bytes               = M/2 - cache budget   (= M/4 with the default cache)
//	--max-single-request-bytes         = 2 × --max-inflight-bytes
//
// The other half of M is headroom for what no budget accounts: the Go
// runtime, goroutine stacks, the etcd client's gRPC buffers, garbage not yet
// collected (GOMEMLIMIT makes the collector work harder as the heap nears M
// rather than letting it double), and the one oversize request admitted alone
// (see Limiter). With --memory-limit=512Mi: cache 128 MiB, in-flight 128 MiB.
// With no --memory-limit the derivations assume DefaultMemoryLimit.
const DefaultMemoryLimit = 1 << 30

// minInflightBytes is the smallest in-flight budget the derivation accepts.
const minInflightBytes = 1 << 20

// ApplyMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// limit bytes with debug.SetMemoryLimit and returns the previous limit.
// limit <= 0 changes nothing (a GOMEMLIMIT environment variable, if any,
// stays in force) and returns the current limit. It is the one function of
// this package with process-wide effect; call it once from main.
func ApplyMemoryLimit(limit int64) (previous int64) {
	if limit <= 0 {
		return debug.SetMemoryLimit(-1)
	}
	return debug.SetMemoryLimit(limit)
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

// Estimate constants; see EstimateList.
const (
	// pageCopies is how many copies of a page's values are alive at once:
	// the gRPC response buffer and the decoded etcd KeyValues.
	pageCopies = 2
	// itemOverheadBytes covers an item's key, its mvccpb.KeyValue struct and
	// slice headers.
	itemOverheadBytes = 256
)

// EstimateList returns the working-set estimate of a LIST (or of a GET with
// pageItems = 1) that reads pages of pageItems values of avgValueBytes each
// and writes through write buffers totalling bufferBytes:
//
//	pageItems × (2 × avgValueBytes + 256) + bufferBytes
//
// Two copies of the page are alive at once (the gRPC message and the decoded
// values); 256 bytes per item cover key and struct overhead. The Limiter
// corrects it per class from what requests report they really used. Negative
// inputs count as 0; the result saturates at MaxInt64.
func EstimateList(avgValueBytes int64, pageItems int, bufferBytes int64) int64 {
	avg := max(avgValueBytes, 0)
	n := int64(max(pageItems, 0))
	buf := max(bufferBytes, 0)
	per := satAdd(satMul(pageCopies, avg), itemOverheadBytes)
	return satAdd(satMul(n, per), buf)
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
