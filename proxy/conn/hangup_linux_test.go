//go:build linux

package conn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"
)

// acceptPairs returns n connected pairs over loopback TCP: the client's
// side and the server's (under TLS when tlsConf is set, handshaken).
func acceptPairs(t *testing.T, n int, tlsConf *tls.Config) (clients, servers []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range n {
		var c net.Conn
		var derr error
		dialed := make(chan struct{})
		go func() {
			defer close(dialed)
			if tlsConf != nil {
				c, derr = tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
			} else {
				c, derr = net.Dial("tcp", ln.Addr().String())
			}
		}()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if tlsConf != nil {
			ts := tls.Server(s, tlsConf)
			if err := ts.Handshake(); err != nil {
				t.Fatal(err)
			}
			s = ts
		}
		<-dialed
		if derr != nil {
			t.Fatal(derr)
		}
		clients, servers = append(clients, c), append(servers, s)
	}
	t.Cleanup(func() {
		for i := range clients {
			clients[i].Close()
			servers[i].Close()
		}
	})
	return clients, servers
}

func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// TestHangupsNotice: of 100 registered connections (plain and TLS, the
// server's side wrapped as Progress), the 50 whose clients close or reset
// them are reported, once each, and the others are not, even those
// whose clients send bytes (left unread); a stopped registration is not
// reported; after Close nothing is registered.
func TestHangupsNotice(t *testing.T) {
	h, err := NewHangups()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	pc, ps := acceptPairs(t, 50, nil)
	tc, ts := acceptPairs(t, 50, selfSigned(t))
	clients, servers := append(pc, tc...), append(ps, ts...)
	for i, s := range servers[:50] {
		if i%2 == 0 {
			servers[i] = NewProgress(s, false)
		}
	}
	var mu sync.Mutex
	got := map[int]int{}
	reported := make(chan int, len(servers))
	stops := make([]func(), len(servers))
	for i, s := range servers {
		stop, ok := h.Notify(s, func() {
			mu.Lock()
			got[i]++
			mu.Unlock()
			reported <- i
		})
		if !ok {
			t.Fatalf("Notify(%T) = false, want a socket found", s)
		}
		stops[i] = stop
	}
	if n := h.Registered(); n != len(servers) {
		t.Fatalf("Registered() = %d, want %d", n, len(servers))
	}
	// Stopped before its client closes: never reported.
	stops[1]()
	clients[1].Close()
	want := map[int]bool{}
	for i := range clients {
		switch {
		case i == 1:
		case i%2 == 0: // closed (FIN, or a TLS close_notify then FIN)
			clients[i].Close()
			want[i] = true
		case i%4 == 1: // reset
			if tc, ok := clients[i].(*net.TCPConn); ok {
				tc.SetLinger(0)
				tc.Close()
				want[i] = true
			}
		default: // sends bytes and stays open
			clients[i].Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		}
	}
	deadline := time.After(10 * time.Second)
	for range want {
		select {
		case <-reported:
		case <-deadline:
			mu.Lock()
			t.Fatalf("after 10 s, %d of %d closed connections reported: %v", len(got), len(want), got)
		}
	}
	// Anything else reported would show within a moment: none may be.
	select {
	case i := <-reported:
		t.Errorf("connection %d reported, its client did not close it (closed: %v)", i, want)
	case <-time.After(300 * time.Millisecond):
	}
	mu.Lock()
	for i := range want {
		if got[i] != 1 {
			t.Errorf("connection %d reported %d times, want once", i, got[i])
		}
	}
	mu.Unlock()
	if n, open := h.Registered(), len(servers)-len(want)-1; n != open {
		t.Errorf("Registered() = %d, want %d still open", n, open)
	}
	for i, stop := range stops {
		if i != 1 {
			stop()
		}
	}
	if n := h.Registered(); n != 0 {
		t.Errorf("Registered() = %d after every stop, want 0", n)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Notify(servers[3], func() {}); ok {
		t.Errorf("Notify after Close = true, want false")
	}
}

// TestHangupsNotSocket: a connection with no socket under it is refused
// (the caller notices the close itself), as is any with a nil Hangups.
func TestHangupsNotSocket(t *testing.T) {
	h, err := NewHangups()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := h.Notify(a, func() {}); ok {
		t.Errorf("Notify(net.Pipe) = true, want false")
	}
	var nilH *Hangups
	if _, ok := nilH.Notify(a, func() {}); ok {
		t.Errorf("nil Hangups: Notify = true, want false")
	}
}
