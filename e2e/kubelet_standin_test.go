package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/remotecommand"
)

// kubeletStandIn is the kubelet of a Node for kube-apiserver's connect
// subresources: it speaks the kubelet's side of exec, attach (SPDY
// remotecommand, protocols channel.k8s.io to v5.channel.k8s.io),
// port-forward (SPDY portforward.k8s.io: a data and an error stream per
// request ID, the data stream connected to 127.0.0.1:port as the pod's
// network namespace would be) and containerLogs (follow keeps the
// response open). kube-apiserver reaches it as it reaches a kubelet: the
// Node's address and status.daemonEndpoints.kubeletEndpoint.port, over
// TLS (no --kubelet-certificate-authority: kube-apiserver skips
// verification). What a container "runs" is a few fixed commands:
//
//	echo ARGS...   ARGS joined by spaces and a newline on stdout
//	cat            stdin copied to stdout
//	fail N MSG     MSG on stderr, exit code N
//
// attach writes "attached to CONTAINER\n" and then copies stdin to stdout.
type kubeletStandIn struct {
	srv  *httptest.Server
	host string // the address kube-apiserver dials
	port int
	// follows is the containerLogs?follow=true responses held open now.
	follows atomic.Int64
	// stop ends the held log streams.
	stop     chan struct{}
	stopOnce sync.Once
}

// startKubeletStandIn serves the stand-in on host (a non-loopback address
// of this machine) until t ends.
func startKubeletStandIn(t *testing.T, host string) *kubeletStandIn {
	t.Helper()
	k := &kubeletStandIn{host: host, stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/", func(w http.ResponseWriter, r *http.Request) { k.remoteCommand(w, r, false) })
	mux.HandleFunc("/attach/", func(w http.ResponseWriter, r *http.Request) { k.remoteCommand(w, r, true) })
	mux.HandleFunc("/portForward/", k.portForward)
	mux.HandleFunc("/containerLogs/", k.logs)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = httptest.NewUnstartedServer(mux)
	k.srv.Listener = ln
	k.srv.StartTLS()
	k.port = ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() {
		k.stopOnce.Do(func() { close(k.stop) })
		k.srv.CloseClientConnections()
		k.srv.Close()
	})
	return k
}

// release ends the held containerLogs streams.
func (k *kubeletStandIn) release() { k.stopOnce.Do(func() { close(k.stop) }) }

// remoteCommand is the kubelet's exec and attach: protocol handshake, SPDY
// upgrade, the streams the query asks for, the command, its status on the
// error stream (v4 and later: a JSON Status; earlier: the message).
func (k *kubeletStandIn) remoteCommand(w http.ResponseWriter, r *http.Request, attach bool) {
	protocols := []string{remotecommand.StreamProtocolV5Name, remotecommand.StreamProtocolV4Name,
		remotecommand.StreamProtocolV3Name, remotecommand.StreamProtocolV2Name, remotecommand.StreamProtocolV1Name}
	proto, err := httpstream.Handshake(r, w, protocols)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	want := map[string]bool{corev1.StreamTypeError: true}
	// kube-apiserver asks the kubelet with input, output and error (its
	// own query has stdin, stdout and stderr).
	for param, s := range map[string]string{"input": corev1.StreamTypeStdin, "output": corev1.StreamTypeStdout, "error": corev1.StreamTypeStderr} {
		if v := q.Get(param); v == "1" || v == "true" {
			want[s] = true
		}
	}
	if v := q.Get("tty"); v == "1" || v == "true" {
		want[corev1.StreamTypeResize] = true
		delete(want, corev1.StreamTypeStderr)
	}
	streams := make(chan httpstream.Stream, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replySent <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	conn.SetIdleTimeout(time.Minute)
	got := map[string]httpstream.Stream{}
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case s := <-streams:
			got[s.Headers().Get(corev1.StreamType)] = s
		case <-timeout:
			return
		}
	}
	stdin, stdout, stderr := got[corev1.StreamTypeStdin], got[corev1.StreamTypeStdout], got[corev1.StreamTypeStderr]
	code, msg := 0, ""
	if attach {
		fmt.Fprintf(writerOr(stdout), "attached to %s\n", pathPart(r.URL.Path, 4))
		if stdin != nil {
			io.Copy(writerOr(stdout), stdin)
		}
	} else {
		code, msg = runCommand(q["command"], stdin, writerOr(stdout), writerOr(stderr))
	}
	for _, s := range []httpstream.Stream{stdout, stderr} {
		if s != nil {
			s.Close()
		}
	}
	status := metav1.Status{Status: metav1.StatusSuccess}
	if code != 0 {
		status = metav1.Status{Status: metav1.StatusFailure, Reason: remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %s", msg),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(code)}}}}
	}
	e := got[corev1.StreamTypeError]
	switch proto {
	case remotecommand.StreamProtocolV4Name, remotecommand.StreamProtocolV5Name:
		b, _ := json.Marshal(status)
		e.Write(b)
	default:
		if code != 0 {
			io.WriteString(e, status.Message)
		}
	}
	e.Close()
}

// runCommand runs one of the stand-in's commands and returns its exit code and,
// when it is not 0, why.
func runCommand(argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, string) {
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "no command")
		return 126, "no command"
	}
	switch argv[0] {
	case "echo":
		fmt.Fprintln(stdout, strings.Join(argv[1:], " "))
		return 0, ""
	case "cat":
		if stdin != nil {
			io.Copy(stdout, stdin)
		}
		return 0, ""
	case "fail":
		if len(argv) >= 3 {
			n, err := strconv.Atoi(argv[1])
			if err == nil && n > 0 {
				fmt.Fprintln(stderr, strings.Join(argv[2:], " "))
				return n, "error: exit status " + argv[1]
			}
		}
	}
	fmt.Fprintf(stderr, "%s: not found\n", argv[0])
	return 127, "error: exit status 127"
}

func writerOr(s httpstream.Stream) io.Writer {
	if s == nil {
		return io.Discard
	}
	return s
}

// pathPart is the i-th segment of a path ("/exec/ns/pod/ctr": 1 ns, 2
// pod, 3 ctr; 4 past it: the container of /attach/ns/pod/uid?/ctr is the last).
func pathPart(p string, i int) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if i >= len(parts) {
		return parts[len(parts)-1]
	}
	return parts[i]
}

// portForward is the kubelet's SPDY port-forward: each request ID brings
// an error and a data stream; the data stream is connected to
// 127.0.0.1:port until either side is done.
func (k *kubeletStandIn) portForward(w http.ResponseWriter, r *http.Request) {
	if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	type pair struct{ data, errs httpstream.Stream }
	var mu sync.Mutex
	pairs := map[string]*pair{}
	ready := make(chan *pair, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replySent <-chan struct{}) error {
		id := s.Headers().Get(corev1.PortForwardRequestIDHeader)
		mu.Lock()
		defer mu.Unlock()
		p := pairs[id]
		if p == nil {
			p = &pair{}
			pairs[id] = p
		}
		switch s.Headers().Get(corev1.StreamType) {
		case corev1.StreamTypeData:
			p.data = s
		case corev1.StreamTypeError:
			p.errs = s
		default:
			return fmt.Errorf("unexpected stream type %q", s.Headers().Get(corev1.StreamType))
		}
		if p.data != nil && p.errs != nil {
			delete(pairs, id)
			ready <- p
		}
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	conn.SetIdleTimeout(time.Minute)
	for {
		select {
		case p := <-ready:
			go func() {
				defer p.errs.Close()
				defer p.data.Close()
				port := p.data.Headers().Get(corev1.PortHeader)
				c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second)
				if err != nil {
					fmt.Fprintf(p.errs, "error forwarding port %s to pod: %v", port, err)
					return
				}
				defer c.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(c, p.data); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(p.data, c); done <- struct{}{} }()
				<-done
				<-done
			}()
		case <-conn.CloseChan():
			return
		}
	}
}

// logs is the kubelet's containerLogs: three lines, then, with
// follow=true, the response held open (flushed) until release or the
// client goes.
func (k *kubeletStandIn) logs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	ctr := pathPart(r.URL.Path, 3)
	for i := range 3 {
		fmt.Fprintf(w, "%s line %d\n", ctr, i)
	}
	if r.URL.Query().Get("follow") != "true" {
		return
	}
	w.(http.Flusher).Flush()
	k.follows.Add(1)
	defer k.follows.Add(-1)
	select {
	case <-r.Context().Done():
	case <-k.stop:
	}
}

// hostAddress is a non-loopback IPv4 address of this machine (Endpoints,
// EndpointSlices and Nodes name one: kube-apiserver refuses loopback
// endpoints), or "" when there is none.
func hostAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0"))
		if err != nil {
			continue
		}
		ln.Close()
		return n.IP.String()
	}
	return ""
}
