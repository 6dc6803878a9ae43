package webhookclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/apimachinery/pkg/util/wait"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	sarwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"

	"github.com/lazyapi/lazyapi/internal/testing/reviewtest"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
)

// TestLoad: the two ways keep the client settings of k8s.io/apiserver's
// (delegating: QPS 200, burst 400, no client timeout of its own; the
// webhook configuration: its timeout on the client, v1beta1 by default),
// and the default backoff is the one of both of its webhooks.
func TestLoad(t *testing.T) {
	s := reviewtest.Start(t)
	dir := t.TempDir()
	kc := s.Kubeconfig(t, dir, "kubeconfig", "")
	wc := s.Kubeconfig(t, dir, "webhook", reviewtest.TokenReviewPath)

	c, err := webhookclient.Config{Kubeconfig: kc}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !c.Delegated || c.REST.QPS != 200 || c.REST.Burst != 400 || c.REST.Timeout != 0 || c.Timeout != webhookclient.DefaultKubeconfigTimeout {
		t.Errorf("kubeconfig: delegated %v, QPS %v, burst %d, client timeout %v, timeout %v", c.Delegated, c.REST.QPS, c.REST.Burst, c.REST.Timeout, c.Timeout)
	}
	if c.Backoff != *tokenwebhook.DefaultRetryBackoff() || c.Backoff != *sarwebhook.DefaultRetryBackoff() {
		t.Errorf("default backoff %+v, want k8s.io/apiserver's %+v", c.Backoff, *sarwebhook.DefaultRetryBackoff())
	}

	one := wait.Backoff{Steps: 1}
	c, err = webhookclient.Config{ConfigFile: wc, Timeout: 3 * time.Second, Backoff: &one}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Delegated || c.REST.Timeout != 3*time.Second || c.Timeout != 3*time.Second || c.Version != "v1beta1" || c.Backoff != one ||
		!strings.HasSuffix(c.REST.Host, reviewtest.TokenReviewPath) {
		t.Errorf("config file: delegated %v, client timeout %v, timeout %v, version %q, backoff %+v, host %q",
			c.Delegated, c.REST.Timeout, c.Timeout, c.Version, c.Backoff, c.REST.Host)
	}
	if c, err := (webhookclient.Config{ConfigFile: wc, Version: "v1"}).Load(); err != nil || c.Version != "v1" || c.Timeout != webhookclient.DefaultConfigFileTimeout {
		t.Errorf("config file v1: %+v, %v", c, err)
	}

	for _, cfg := range []webhookclient.Config{{}, {Kubeconfig: kc, ConfigFile: wc}} {
		if _, err := cfg.Load(); err == nil {
			t.Errorf("Load(%+v): no error, want one", cfg)
		}
	}
	if _, err := (webhookclient.Config{Kubeconfig: dir + "/missing"}).Load(); err == nil || !strings.Contains(err.Error(), "cannot load the kubeconfig") {
		t.Errorf("missing kubeconfig: %v", err)
	}
	if _, err := (webhookclient.Config{ConfigFile: dir + "/missing"}).Load(); err == nil || !strings.Contains(err.Error(), "cannot load the webhook configuration") {
		t.Errorf("missing webhook configuration: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	ms := metrics.NewSet()
	m := webhookclient.NewMetrics(ms, "lazyapi_test_webhook")
	m.RecordRequestTotal(context.Background(), "200")
	m.RecordRequestTotal(context.Background(), "200")
	m.RecordRequestTotal(context.Background(), "<error>")
	m.RecordRequestLatency(context.Background(), "200", 0.01)
	var b strings.Builder
	ms.WritePrometheus(&b)
	for _, want := range []string{
		`lazyapi_test_webhook_requests_total{code="200"} 2`,
		`lazyapi_test_webhook_requests_total{code="<error>"} 1`,
		`lazyapi_test_webhook_request_duration_seconds_count 1`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}
