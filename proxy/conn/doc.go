// Package conn owns the connection layer under the HTTP server: what a
// served connection holds and writes before and beside the handlers.
//
//   - The header gate (Listener, Gate): each request's header is read
//     into a buffer that grows with the bytes that arrived and handed to
//     fasthttp only once complete; bodies are withheld from fasthttp and
//     read by the handlers that take one, after authorization
//     (Gate.Body), or skipped or end the connection (Gate.BodyEndsConn).
//     Grown header buffers are bounded by a Budget shared by all
//     connections; a header that cannot grow is answered 429.
//   - Write progress (Progress, CountWrites): the bytes the kernel took
//     from a connection, counted as they go so that a write guard can
//     tell a slow reader from a stopped one, and under TLS the records of
//     one chunk of a stream coalesced into one socket write (Hold,
//     Release).
//   - Write guards (WriteGuard, HeldBody; "No progress, no seat" in
//     writeguard.go): every write of a response under a deadline that
//     moves while the client takes bytes, and ends at once when the
//     request's context ends; a whole body handed to fasthttp keeps what
//     its request holds until written. A response ended by a deadline is
//     reported to the handler's Aborter.
//   - Response compression (AcceptsGzip, GzipWhole, ServeGzipStream):
//     kube-apiserver's gzip rule (responses over GzipThreshold, when
//     Accept-Encoding names gzip), a whole body compressed at once or a
//     streamed one collected until it passes the threshold, then
//     compressed chunk by chunk on the connection's goroutine
//     (ChunkWriter: one HTTP chunk per write, its TLS records coalesced).
//   - Clear-text marking (ClearText, ClearMode): connections of a
//     listener without TLS, on which credentials are refused unless the
//     listener accepts tokens.
//
// It knows nothing of requests beyond their framing: package proxy wraps
// its listener in a Listener, reads withheld bodies through GateOf, and
// guards its streamed writes with GuardWrites and its whole bodies with
// NewHeldBody.
package conn
