// Package loopback gives tests the two ends of a real loopback TCP
// connection.
package loopback

import (
	"net"
	"testing"
)

// TCPPair returns the accepted and the dialled end of a loopback TCP
// connection, closed when the test ends.
func TCPPair(t testing.TB) (accepted, dialled *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	dc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ac := <-ch
	if ac == nil {
		dc.Close()
		t.Fatal("accept failed")
	}
	accepted, dialled = ac.(*net.TCPConn), dc.(*net.TCPConn)
	t.Cleanup(func() { accepted.Close(); dialled.Close() })
	return accepted, dialled
}
