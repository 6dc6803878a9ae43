package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEtcdDialAddresses: etcdDial reaches the addresses grpc-go gives a
// dialer: host:port, unix://absolute-path and unix:relative-path.
func TestEtcdDialAddresses(t *testing.T) {
	dir := t.TempDir()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	sock := filepath.Join(dir, "etcd.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		ln   net.Listener
	}{
		{tcp.Addr().String(), tcp},
		{"unix://" + sock, unix},
		{"unix:" + rel, unix},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := etcdDial(ctx, tc.addr)
		cancel()
		if err != nil {
			t.Fatalf("etcdDial(%q): %v", tc.addr, err)
		}
		s, err := tc.ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2)
		if _, err := c.Read(b); err != nil || string(b) != "ok" {
			t.Fatalf("etcdDial(%q): read %q, %v", tc.addr, b, err)
		}
		c.Close()
		s.Close()
	}
}
