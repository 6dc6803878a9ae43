package proxy

import (
	"io"
	"net"

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
	rc.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	s.handle(&rc)
	err := rc.Response.BodyWriteTo(w)
	return rc.Response.StatusCode(), err
}
