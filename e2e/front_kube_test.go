package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
)

// standIns are the servers kube-apiserver reaches for requests lazyapi
// forwards to it: an aggregated API server registered by an APIService
// (its Service of type ExternalName naming the stand-in's address, as the
// aggregator resolves it without kube-proxy) and the kubelet of Node
// "standin", where pod default/p (container c) runs.
type standIns struct {
	agg     *aggregatedStandIn
	kubelet *kubeletStandIn
	// echoPort is the pod's port for port-forward: a server on loopback
	// answering each line with "pong " and the line.
	echoPort int
}

// startStandIns starts the stand-ins and makes the objects that name them
// at kube-apiserver (as its admin), and waits for the APIService to be
// Available.
func startStandIns(t *testing.T, f *frontEnv) *standIns {
	t.Helper()
	host := hostAddress()
	if host == "" {
		t.Skip("no non-loopback IPv4 address on this machine: kube-apiserver refuses loopback node and endpoint addresses, so the stand-ins cannot be reached")
	}
	s := &standIns{agg: startAggregatedStandIn(t, host), kubelet: startKubeletStandIn(t, host), echoPort: startEcho(t)}
	manifest := filepath.Join(t.TempDir(), "standins.yaml")
	writeFile(t, manifest, fmt.Appendf(nil, `apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: default}
---
apiVersion: v1
kind: Service
metadata: {name: widgets, namespace: default}
spec: {type: ExternalName, externalName: "%[1]s"}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: %[3]s.%[4]s}
spec: {group: %[4]s, version: %[3]s, service: {namespace: default, name: widgets, port: %[2]d}, insecureSkipTLSVerify: true, groupPriorityMinimum: 1000, versionPriority: 15}
---
apiVersion: v1
kind: Node
metadata: {name: standin}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec: {nodeName: standin, automountServiceAccountToken: false, containers: [{name: c, image: standin}]}
`, host, s.agg.port, aggVersion, aggGroup))
	admin := func(args ...string) string {
		t.Helper()
		out, errs, code := kubectlRun(t, f.k.url, bench.KubeAPIServerToken, nil, args...)
		if code != 0 {
			t.Fatalf("kubectl %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	admin("apply", "-f", manifest)
	admin("patch", "node", "standin", "--subresource=status", "--type=merge", "-p",
		fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":%d}}}}`, host, s.kubelet.port))
	admin("patch", "pod", "p", "--subresource=status", "--type=merge", "-p",
		`{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"containerStatuses":[{"name":"c","ready":true,"restartCount":0,"image":"standin","imageID":"","started":true,"state":{"running":{"startedAt":"2026-12-05T00:00:00Z"}}}]}}`)
	deadline := time.Now().Add(2 * time.Minute)
	for admin("get", "apiservice", aggVersion+"."+aggGroup, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`) != "True" {
		if time.Now().After(deadline) {
			t.Fatalf("APIService %s.%s not Available within 2m:\n%s", aggVersion, aggGroup, admin("get", "apiservice", aggVersion+"."+aggGroup, "-o", "yaml"))
		}
		time.Sleep(time.Second)
	}
	return s
}

// kubectlRun's answer.
type kubectlAnswer struct {
	stdout, stderr string
	code           int
}

// same runs kubectl with args (stdin, extra environment) as alice through
// lazyapi and directly at kube-apiserver, fails the test unless the two
// answers are equal, and returns lazyapi's.
func (f *frontEnv) same(t *testing.T, stdin string, env []string, args ...string) kubectlAnswer {
	t.Helper()
	run := func(server string) kubectlAnswer {
		var a kubectlAnswer
		a.stdout, a.stderr, a.code = kubectlRunIn(t, server, frontAlice, stdin, env, args...)
		return a
	}
	through, direct := run(f.lazyURL), run(f.k.url)
	if through != direct {
		t.Errorf("kubectl %s (env %v):\nthrough lazyapi: exit %d\nstdout:\n%s\nstderr:\n%s\nkube-apiserver: exit %d\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), env, through.code, through.stdout, through.stderr, direct.code, direct.stdout, direct.stderr)
	}
	return through
}

// startEcho serves "pong LINE" for every LINE on a loopback port (the
// pod's port for port-forward) and returns the port.
func startEcho(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "pong %s\n", sc.Text())
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestFrontStandInsAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1): kubectl
// as alice through lazyapi (startFront) and directly at kube-apiserver,
// on the requests lazyapi forwards that reach a third server through
// kube-apiserver: an aggregated API (get --raw, get, api-resources,
// api-versions, aggregated discovery) and the kubelet's connect
// subresources (exec, attach, port-forward, logs; over WebSocket, as
// kubectl 1.32+ first tries, and over SPDY). Every answer equal, byte for
// byte; the aggregated server sees alice as the caller of what came
// through lazyapi.
func TestFrontStandInsAgainstKubeAPIServer(t *testing.T) {
	needKubectl(t)
	f := startFront(t)
	si := startStandIns(t, f)

	t.Run("aggregated", func(t *testing.T) {
		gv := "/apis/" + aggGroup + "/" + aggVersion
		for _, p := range []string{"/apis/" + aggGroup, gv, gv + "/namespaces/default/widgets", gv + "/namespaces/default/widgets/alpha"} {
			r := f.same(t, "", nil, "get", "--raw", p)
			if r.code != 0 || !strings.Contains(r.stdout, aggGroup) {
				t.Errorf("get --raw %s through lazyapi: exit %d, %s%s", p, r.code, r.stdout, r.stderr)
			}
		}
		if r := f.same(t, "", nil, "get", "--raw", gv+"/namespaces/default/widgets/nope"); r.code == 0 {
			t.Errorf("get --raw of a widget the aggregated server does not have: exit 0, %s", r.stdout)
		}
		r := f.same(t, "", nil, "get", "widgets", "-n", "default", "-o", "json")
		if !strings.Contains(r.stdout, `"alpha"`) || !strings.Contains(r.stdout, `"beta"`) {
			t.Errorf("kubectl get widgets through lazyapi: %s%s", r.stdout, r.stderr)
		}
		r = f.same(t, "", nil, "api-resources")
		if !regexp.MustCompile(`(?m)^widgets\s+wd\s+` + regexp.QuoteMeta(aggGroup+"/"+aggVersion) + `\s+true\s+Widget\s*$`).MatchString(r.stdout) {
			t.Errorf("kubectl api-resources through lazyapi does not list widgets:\n%s%s", r.stdout, r.stderr)
		}
		r = f.same(t, "", nil, "api-versions")
		if !strings.Contains(r.stdout, aggGroup+"/"+aggVersion+"\n") {
			t.Errorf("kubectl api-versions through lazyapi does not list %s/%s:\n%s", aggGroup, aggVersion, r.stdout)
		}
		if users := si.agg.remoteUsers(); len(users) == 0 || slices.ContainsFunc(users, func(u string) bool { return u != "alice" }) {
			t.Errorf("X-Remote-User the aggregated server got: %q, want alice's only", users)
		}
	})

	for _, proto := range []struct {
		name string
		env  []string
	}{
		{"websocket", nil},
		{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}},
	} {
		t.Run("exec/"+proto.name, func(t *testing.T) {
			if r := f.same(t, "", proto.env, "exec", "p", "-c", "c", "--", "echo", "hello", "through", "lazyapi"); r.code != 0 || r.stdout != "hello through lazyapi\n" {
				t.Errorf("exec echo through lazyapi: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			in := strings.Repeat("0123456789abcdef\n", 4096) // 68 KiB both ways
			if r := f.same(t, in, proto.env, "exec", "-i", "p", "-c", "c", "--", "cat"); r.code != 0 || r.stdout != in {
				t.Errorf("exec -i cat through lazyapi: exit %d, %d bytes back of %d, stderr %q", r.code, len(r.stdout), len(in), r.stderr)
			}
			if r := f.same(t, "", proto.env, "exec", "p", "-c", "c", "--", "fail", "3", "boom"); r.code != 3 || !strings.HasPrefix(r.stderr, "boom\n") {
				t.Errorf("exec fail 3 through lazyapi: exit %d, stderr %q; want 3 and boom", r.code, r.stderr)
			}
		})
		t.Run("attach/"+proto.name, func(t *testing.T) {
			if r := f.same(t, "typed\n", proto.env, "attach", "-i", "p", "-c", "c"); r.code != 0 || !strings.HasPrefix(r.stdout, "attached to c\ntyped\n") {
				t.Errorf("attach -i through lazyapi: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
		t.Run("port-forward/"+proto.name, func(t *testing.T) {
			through := portForward(t, f.lazyURL, si.echoPort, proto.env)
			direct := portForward(t, f.k.url, si.echoPort, proto.env)
			if through != direct || through != "pong ping 1\npong ping 2\n" {
				t.Errorf("port-forward through lazyapi: %q, kube-apiserver: %q", through, direct)
			}
		})
	}

	t.Run("logs", func(t *testing.T) {
		if r := f.same(t, "", nil, "logs", "p", "-c", "c"); r.code != 0 || r.stdout != "c line 0\nc line 1\nc line 2\n" {
			t.Errorf("logs through lazyapi: exit %d, %q %q", r.code, r.stdout, r.stderr)
		}
	})
}

// portForward runs kubectl port-forward pod/p to the echo port, sends two
// lines through the forwarded port and returns what came back.
func portForward(t *testing.T, server string, port int, env []string) string {
	t.Helper()
	path := needKubectl(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfig, []byte("apiVersion: v1\nkind: Config\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := []string{"--kubeconfig", kubeconfig, "--server", server, "--insecure-skip-tls-verify", "--token", frontAlice,
		"port-forward", "-n", "default", "pod/p", ":" + strconv.Itoa(port)}
	cmd := exec.CommandContext(ctx, path, full...)
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "KUBECONFIG="+kubeconfig), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("kubectl port-forward: %q, %v; stderr %s", line, err, errb.String())
	}
	go io.Copy(io.Discard, stdout)
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var got strings.Builder
	r := bufio.NewReader(c)
	for i := 1; i <= 2; i++ {
		fmt.Fprintf(c, "ping %d\n", i)
		l, err := r.ReadString('\n')
		if err != nil {
			t.Errorf("port-forward read: %v (stderr %s)", err, errb.String())
			break
		}
		got.WriteString(l)
	}
	return got.String()
}
