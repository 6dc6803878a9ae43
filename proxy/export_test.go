package proxy

import (
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// ServeInMemory runs the server's handler for a GET of uri with the given
// Accept header on a request context built in memory (no socket, no HTTP
// parsing or framing) and writes the response body to w as fasthttp would
// write it to the connection. It returns the response's status code.
// Benchmarks use it to measure the serving path without the transfer.
func (s *Server) ServeInMemory(uri, accept string, w io.Writer) (int, error) {
	var req fasthttp.Request
	req.SetRequestURI(uri)
	req.Header.Set("Accept", accept)
	var rc fasthttp.RequestCtx
	// Not rc.Init: its connection panics on SetWriteDeadline, which every
	// flush of a streamed LIST calls (proxy/conn/writeguard.go).
	rc.Init2(memConn{}, nopLogger{}, true)
	req.CopyTo(&rc.Request)
	s.handle(&rc)
	err := rc.Response.BodyWriteTo(w)
	return rc.Response.StatusCode(), err
}

// memConn is ServeInMemory's connection: an address and deadlines that
// change nothing; nothing reads or writes it.
type memConn struct{ net.Conn }

func (memConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6443} }
func (memConn) SetDeadline(time.Time) error      { return nil }
func (memConn) SetReadDeadline(time.Time) error  { return nil }
func (memConn) SetWriteDeadline(time.Time) error { return nil }

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// SetEtcdDown records an etcd failure at t, as a request that found etcd
// unavailable would, and returns a func reporting the recorded time.
func (s *Server) SetEtcdDown(t time.Time) (recorded func() time.Time) {
	s.etcdDownAt.Store(t.UnixNano())
	return func() time.Time { return time.Unix(0, s.etcdDownAt.Load()) }
}

// ObservedResponse returns the largest response of the collection key seen
// in the last minute (estimate.Stats.ObservedResponse).
func (s *Server) ObservedResponse(key string) int64 {
	return s.stats.ObservedResponse(key, time.Now())
}

// SetSizeHint sets the average value size the LISTs of the resource whose
// hint key (etcd prefix + "/" + key prefix + "/") is key assume, as a
// LIST's first page read from etcd does (estimate.Stats.SetHint).
func (s *Server) SetSizeHint(key string, avg int) { s.stats.SetHint(key, avg) }

// DisableSharedScans makes every watch with initial events from etcd read
// its own list (sharedscan.go), the path before shared scans; call it
// before the server serves.
func (s *Server) DisableSharedScans() { s.scans = nil }

// SetScanWindowBytes sets the shared scans' window (sharedscan.go) and
// returns a func restoring it.
func SetScanWindowBytes(n int64) (restore func()) {
	old := scanWindowBytes
	scanWindowBytes = n
	return func() { scanWindowBytes = old }
}

// DisableSharedLists makes every LIST from etcd read its own (the path
// before shared LISTs, sharedlist.go); call it before the server serves.
func (s *Server) DisableSharedLists() { s.lists = nil }

// SetProtoBufferBytes sets the bound of a protobuf list kept encoded during
// its size pass (protoBufferBytes, 2 MiB) to n and returns a func that
// restores it. Call it before starting the servers of a test and restore
// after they stop (no test runs in parallel in this package).
func SetProtoBufferBytes(n int) (restore func()) {
	old := protoBufferBytes
	protoBufferBytes = n
	return func() { protoBufferBytes = old }
}

// SetCachePageItems sets how many items a page of a cache read holds
// (cachePageItems, 256) to n and returns a func that restores it; as
// SetProtoBufferBytes, around the servers of a test.
func SetCachePageItems(n int) (restore func()) {
	old := cachePageItems
	cachePageItems = n
	return func() { cachePageItems = old }
}
