package proxy

import (
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/valyala/fasthttp"
)

// Whole response bodies (a GET's object, a LIST encoded whole), held
// until fasthttp has written them; compression is proxy/conn's (gzip.go
// there, --enable-response-compression here).

// connBufs are the proxy's write buffers, lent to proxy/conn's
// compressed streams.
var connBufs = conn.Buffers{Get: getBuf, Put: putBuf, Size: flushSize}

// setBody sets a whole response body: compressed when the request asked
// for it and b is larger than conn.GzipThreshold. b is copied. An admitted
// request's body holds its admission (conn.HeldBody): its seat is given back
// now (the handler's work is done) and its bytes when fasthttp has
// written the body. A body larger than the request's reservation (an
// object far above its resource's average size) first reserves the
// excess (reqState.reserve); when that is refused, setBody answers the
// refusal's 429 in ef and returns false.
func (st *reqState) setBody(rc *fasthttp.RequestCtx, ef encoding.Format, b []byte) bool {
	return st.setBodyOwned(rc, ef, b, nil)
}

// setBodyOwned is setBody where b is *buf, a pooled buffer the caller
// puts back: when the body is held (not compressed, admitted), it takes
// the buffer instead of a copy of b and leaves *buf empty (putBuf then
// pools nothing).
func (st *reqState) setBodyOwned(rc *fasthttp.RequestCtx, ef encoding.Format, b []byte, buf *[]byte) bool {
	compress := st.gzip && len(b) > conn.GzipThreshold
	if st.release == nil {
		if !compress {
			rc.SetBody(b)
			return true
		}
		rc.Response.ResetBody()
		conn.GzipWhole(rc.Response.BodyWriter(), b)
		conn.SetGzipHeaders(rc)
		return true
	}
	if st.reserve != nil {
		if err := st.reserve(int64(len(b)) + heldBodyOverhead); err != nil {
			st.fail(rc, ef, tooManyRequests(err))
			return false
		}
	}
	var held *[]byte
	switch {
	case buf != nil && !compress:
		owned := b
		held = &owned
		*buf = nil
	case compress:
		held = getBuf()
		conn.GzipWhole((*conn.AppendWriter)(held), b)
		conn.SetGzipHeaders(rc)
	default:
		held = getBuf()
		*held = append((*held)[:0], b...)
	}
	rc.Response.SetBodyStream(conn.NewHeldBody(held, putBuf, st.release, st.s.aborted, clientKey(rc)), len(*held))
	st.release = nil
	if st.drain != nil {
		st.drain()
		st.drain = nil
	}
	return true
}

// heldBodyOverhead is what a held body costs beside its bytes: fasthttp's
// write buffer of the connection, its request and response state, the
// connection's goroutine (measured: 16 stalled GETs of 1 MiB held 13 KiB
// each beside their bodies; TestEstimateHoldsStalled).
const heldBodyOverhead = 32 << 10
