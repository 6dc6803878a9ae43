package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// refusedEndpoint returns an http endpoint on a loopback port nothing
// listens on.
func refusedEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestEtcdUnreachableNamesCause: an etcd that cannot be reached fails the
// start with each endpoint's cause, within the 5 s bound (issue 28: a
// refused port and a DNS failure both read "no answer within 5s" after
// 5.2 s); with two dead endpoints the warning does not say it reads from
// them.
func TestEtcdUnreachableNamesCause(t *testing.T) {
	refused := refusedEndpoint(t)
	const noDNS = "http://nonexistent.invalid:2379"
	// A listener that answers in plain text: a TLS client's handshake fails.
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	notTLS := "https://" + plain.Addr().String()
	for _, tc := range []struct {
		name      string
		endpoints string
		want      []string
	}{
		{"refused", refused, []string{refused + ": connection refused"}},
		{"dns", noDNS, []string{noDNS + `: DNS: no such host "nonexistent.invalid"`}},
		{"both", refused + "," + noDNS, []string{refused + ": connection refused", noDNS + ": DNS: no such host"}},
		{"tls", notTLS, []string{notTLS + ": TLS handshake: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &logSink{serving: make(chan string, 1)}
			start := time.Now()
			err := run(context.Background(), []string{"--etcd-servers=" + tc.endpoints, freePortFlag(t)}, &lockedBuffer{}, sink)
			took := time.Since(start)
			if err == nil {
				t.Fatal("run = nil, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("run = %v, want it to contain %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), "--etcd-servers") || strings.Contains(err.Error(), "\n") {
				t.Errorf("run = %q, want one line naming --etcd-servers", err)
			}
			if took > etcdProbeTimeout+time.Second {
				t.Errorf("run failed after %v, want within %v", took, etcdProbeTimeout)
			}
			if logs := sink.String(); strings.Contains(logs, `"reading from"`) && strings.Contains(logs, "not answering") &&
				!strings.Contains(logs, "no member answers") {
				t.Errorf("the warning says it reads from members that do not answer:\n%s", logs)
			}
		})
	}
}
