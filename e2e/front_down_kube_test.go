package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFrontKubeAPIServerDownAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1):
// issue 25's "kube-apiserver down, reads up" with kube-apiserver v1.37.2
// stopped (SIGSTOP: its connections stay open, nothing answers), then
// running again, then killed (SIGKILL: connections refused). While it does
// not answer, lazyapi serves reads from etcd at once, answers /apis with
// its own groups and a forwarded write with 503, Retry-After and a Status
// naming kube-apiserver within the connect bound (5 s), keeps /readyz
// ready within a kubelet probe's 1 s, and reports the upstream on
// /readyz/kube-apiserver; once kube-apiserver runs again, writes are
// forwarded again.
func TestFrontKubeAPIServerDownAgainstKubeAPIServer(t *testing.T) {
	f := startFront(t)
	const cm = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"down-"}}`
	if a := f.do(t, "POST", "/api/v1/namespaces/default/configmaps", cm); a.code != 201 {
		t.Fatalf("write with kube-apiserver up: %d %s", a.code, a.body)
	}
	if a := f.do(t, "GET", "/apis", ""); a.code != 200 || !strings.Contains(a.body, `"apiregistration.k8s.io"`) {
		t.Fatalf("/apis with kube-apiserver up: %d %.300s", a.code, a.body)
	}
	kube := f.k.pid
	down := func(how string) {
		t.Helper()
		connectBound := 5*time.Second + 2*time.Second // and a margin for 2 loaded cores
		if a := f.do(t, "GET", "/api/v1/namespaces/default/configmaps", ""); a.code != 200 || a.took > 2*time.Second {
			t.Errorf("%s: a read: %d in %v: %.200s; want 200 at once", how, a.code, a.took, a.body)
		}
		if a := f.do(t, "GET", "/apis", ""); a.code != 200 || !strings.Contains(a.body, `"apps"`) || a.took > connectBound {
			t.Errorf("%s: /apis: %d in %v: %.200s; want lazyapi's own groups within the connect bound", how, a.code, a.took, a.body)
		}
		a := f.do(t, "POST", "/api/v1/namespaces/default/configmaps", cm)
		if a.code != 503 || a.retryAfter != "1" || !strings.Contains(a.body, "kube-apiserver at "+f.k.url) || a.took > connectBound {
			t.Errorf("%s: a write: %d (Retry-After %q) in %v: %.300s; want 503 naming kube-apiserver within the connect bound", how, a.code, a.retryAfter, a.took, a.body)
		}
		if a := f.do(t, "GET", "/readyz", ""); a.code != 200 || a.took > time.Second {
			t.Errorf("%s: /readyz: %d in %v: %s; want ready within a probe's 1 s", how, a.code, a.took, a.body)
		}
		deadline := time.Now().Add(connectBound)
		for {
			a := f.do(t, "GET", "/readyz/kube-apiserver", "")
			if a.code != 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: /readyz/kube-apiserver still %d %s", how, a.code, a.body)
				break
			}
			time.Sleep(200 * time.Millisecond) // polling lazyapi's check to a deadline
		}
	}

	if err := syscall.Kill(kube, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(kube, syscall.SIGCONT)
		}
	}()
	down("kube-apiserver stopped")
	if err := syscall.Kill(kube, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		a := f.do(t, "POST", "/api/v1/namespaces/default/configmaps", cm)
		if a.code == 201 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver running again: a write still %d %s", a.code, a.body)
		}
	}
	if err := syscall.Kill(kube, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	down("kube-apiserver killed")
}
