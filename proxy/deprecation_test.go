package proxy_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// warnings collects what client-go's warning handler is given.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if code == 299 {
		w.msgs = append(w.msgs, text)
	}
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// TestDeprecationWarning: every response for a deprecated version (v1
// Endpoints, deprecated in 1.33) carries kube-apiserver's Warning header,
// errors included, in JSON and protobuf, and client-go hands it to its
// warning handler; a version that is not deprecated gets none.
func TestDeprecationWarning(t *testing.T) {
	e := startEnv(t)
	e.put(t, "services/endpoints", &corev1.Endpoints{ObjectMeta: ometa("ns1", "ep1", nil)})
	const want = "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
	ctx := context.Background()
	for _, base := range []*rest.Config{e.jsonCfg, e.protCfg} {
		w := &warnings{}
		cfg := rest.CopyConfig(base)
		cfg.WarningHandler = w
		cs := kubernetes.NewForConfigOrDie(cfg)
		ep := cs.CoreV1().Endpoints("ns1")
		if _, err := ep.Get(ctx, "ep1", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: get: %v", base.ContentType, err)
		}
		if _, err := ep.List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("%s: list: %v", base.ContentType, err)
		}
		if _, err := ep.Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("%s: get missing = %v, want NotFound", base.ContentType, err)
		}
		wi, err := ep.Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatalf("%s: watch: %v", base.ContentType, err)
		}
		<-wi.ResultChan()
		wi.Stop()
		if got := w.take(); !slices.Equal(got, []string{want, want, want, want}) {
			t.Errorf("%s: warnings = %q, want %q 4 times (get, list, 404, watch)", base.ContentType, got, want)
		}
		if _, err := cs.CoreV1().ConfigMaps("ns1").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := w.take(); len(got) != 0 {
			t.Errorf("%s: configmaps warnings = %q, want none", base.ContentType, got)
		}
	}
}
