// Package ratelimit admits requests against in-flight count and byte budgets,
// queuing those that do not fit fairly per client.
//
// # Budgets
//
// --memory-limit (ApplyMemoryLimit) sets GOMEMLIMIT; the cache
// budget defaults to a quarter of it (DefaultCacheBytes) and
// --max-inflight-bytes to half of it minus the cache budget
// (DefaultInflightBytes). Every admitted request holds a reservation of its
// estimated working set; the sum of reservations never exceeds
// --max-inflight-bytes (see Limiter for the one oversize request admitted
// alone, which reserves exactly the whole budget).
//
// # Use from an HTTP handler
//
//	est := pageItems*(2*avgValueBytes+256) + bufferBytes // the caller's estimate
//	t, err := lim.Admit(ctx, ratelimit.Request{Client: user, Class: "list/configmaps", Bytes: est})
//	if err != nil {
//		if secs, ok := ratelimit.RetryAfter(err); ok {
//			// 429 TooManyRequests Status; header Retry-After: secs when secs > 0
//		}
//		return // ctx ended while queued: nothing is reserved
//	}
//	// Release exactly once, where the response really ends. With a streamed
//	// body (fasthttp SetBodyStreamWriter) that is inside the stream writer,
//	// not in the handler, which returns before the body is written:
//	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
//		defer t.Release(0)
//		for each page {
//			t.Use(pageBytes + bufferBytes) // the peak, for the correction
//			... write items ...
//			ctx.SetWriteDeadline(time.Now().Add(writeTimeout))
//			if w.Flush() != nil { return }
//		}
//	})
//
// # Write deadlines: a stalled reader must not keep its reservation
//
// A reservation lives until the response is written, so a client that stops
// reading would hold it forever. The proxy therefore sets a write deadline on
// the connection before every flush (per flush, not per response: a watch or
// a long LIST may run for hours, but no single flush may wait more than the
// write timeout, e.g. 60 s). When the deadline passes, the connection write
// fails, fasthttp closes the body stream, the stream writer's next Write or
// Flush fails, it returns, and its deferred Release runs. A stalled reader
// thus holds its reservation at most one write timeout past its last
// successful flush. While queued, a request waits at most --max-queue-wait
// (fasthttp's RequestCtx is done only on server shutdown, so a client that
// disconnects while queued is noticed when the wait ends).
package ratelimit
