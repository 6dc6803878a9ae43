package proxy_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRenderCacheNotPoisonedByDeleted: a DELETED event of an object leaving
// a label selector carries the object's previous state at the change's
// revision; its rendering must not be kept as the rendering of the object
// at that revision. Before, a GET or LIST of the object at its new
// revision, after a GET and such a watch, was served the previous state (labels,
// data) with the new resourceVersion (found by the robustness suite,
// internal/robustness, seed 11: "a GET returns a version etcd stored").
func TestRenderCacheNotPoisonedByDeleted(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	cm := func(tier, data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", Labels: map[string]string{"tier": tier}},
			Data: map[string]string{"config": strings.Repeat(data, 2048)}}
	}
	r1 := e.put(t, "configmaps", cm("c", "x"))
	r2 := e.put(t, "configmaps", cm("b", "y")) // leaves tier=c
	tw.waitCached(t, r2)
	w := "/api/v1/namespaces/ns/configmaps?watch=1&labelSelector=tier%3Dc&timeoutSeconds=1&resourceVersion=" + strconv.FormatInt(r1, 10)
	// A rendering is kept on its second sight: the GET's first, then the
	// DELETED event's.
	e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps/cm?resourceVersion=0", "application/json")
	code, _, body := e.raw(t, "GET", w, "application/json")
	if code != 200 || !bytes.Contains(body, []byte(`"type":"DELETED"`)) {
		t.Fatalf("watch: %d %.200s", code, body)
	}
	for _, p := range []string{"/api/v1/namespaces/ns/configmaps/cm?resourceVersion=0", "/api/v1/namespaces/ns/configmaps/cm",
		"/api/v1/namespaces/ns/configmaps?resourceVersion=0"} {
		for range 2 {
			code, _, body := e.raw(t, "GET", p, "application/json")
			var o struct {
				Metadata metav1.ObjectMeta  `json:"metadata"`
				Data     map[string]string  `json:"data"`
				Items    []corev1.ConfigMap `json:"items"`
			}
			if code != 200 || json.Unmarshal(body, &o) != nil {
				t.Fatalf("GET %s: %d %.200s", p, code, body)
			}
			if len(o.Items) == 1 {
				o.Metadata, o.Data = o.Items[0].ObjectMeta, o.Items[0].Data
			}
			if o.Metadata.ResourceVersion != strconv.FormatInt(r2, 10) || o.Metadata.Labels["tier"] != "b" || !strings.HasPrefix(o.Data["config"], "y") {
				t.Fatalf("GET %s: resourceVersion %s, labels %v, data %.5q: want %d, tier=b, y...", p, o.Metadata.ResourceVersion, o.Metadata.Labels, o.Data["config"], r2)
			}
		}
	}
}
