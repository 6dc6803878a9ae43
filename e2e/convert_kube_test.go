package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestConvertedVersionsAgainstKubeAPIServer: Events and
// HorizontalPodAutoscalers written through kube-apiserver v1.37.2 (its
// defaulting, its storage, HPA status written through /status) are read
// at events.k8s.io/v1 and autoscaling/v1, the versions lazyapi serves by
// conversion, from kube-apiserver and from lazyapi on the same etcd: GET
// and LIST, JSON and protobuf, byte for byte (LAZYAPI_KUBEAPISERVER=1).
func TestConvertedVersionsAgainstKubeAPIServer(t *testing.T) {
	script, _ := needKubeAPIServer(t)
	etcd := etcdtest.Start(t)
	k := startKubeAPIServer(t, script, etcd.Endpoint)
	kube, create := k.do, k.create
	create("/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"conv"}}`)
	create("/api/v1/namespaces/conv/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"core-1"},
		"involvedObject":{"kind":"Pod","namespace":"conv","name":"web-0","uid":"u1","apiVersion":"v1","fieldPath":"spec.containers{web}"},
		"reason":"Pulled","message":"pulled <image> & started","source":{"component":"kubelet","host":"node-1"},
		"firstTimestamp":"2026-12-01T10:00:00Z","lastTimestamp":"2026-12-01T10:05:00Z","count":3,"type":"Normal"}`)
	create("/apis/events.k8s.io/v1/namespaces/conv/events", `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"new-1"},
		"eventTime":"2026-12-01T10:00:00.123456Z","series":{"count":4,"lastObservedTime":"2026-12-01T10:09:00.654321Z"},
		"reportingController":"example.com/ctrl","reportingInstance":"ctrl-0","action":"Reconcile","reason":"Synced",
		"regarding":{"kind":"Deployment","namespace":"conv","name":"web","apiVersion":"apps/v1"},
		"related":{"kind":"Node","name":"node-1","apiVersion":"v1"},"note":"synced","type":"Warning"}`)
	create("/apis/autoscaling/v2/namespaces/conv/horizontalpodautoscalers", `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler",
		"metadata":{"name":"all","annotations":{"owner":"a <b>"}},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web","apiVersion":"apps/v1"},
		"minReplicas":2,"maxReplicas":20,"metrics":[
		{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"512Mi"}}},
		{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":70}}},
		{"type":"ContainerResource","containerResource":{"name":"cpu","container":"app","target":{"type":"Utilization","averageUtilization":80}}},
		{"type":"Pods","pods":{"metric":{"name":"pps","selector":{"matchLabels":{"a":"b"}}},"target":{"type":"AverageValue","averageValue":"1k"}}},
		{"type":"Object","object":{"describedObject":{"kind":"Ingress","name":"main","apiVersion":"networking.k8s.io/v1"},"metric":{"name":"rps"},"target":{"type":"Value","value":"10k"}}},
		{"type":"External","external":{"metric":{"name":"queue"},"target":{"type":"AverageValue","averageValue":"30"}}}],
		"behavior":{"scaleDown":{"stabilizationWindowSeconds":120,"policies":[{"type":"Percent","value":10,"periodSeconds":60}]}}}}`)
	create("/apis/autoscaling/v1/namespaces/conv/horizontalpodautoscalers", `{"apiVersion":"autoscaling/v1","kind":"HorizontalPodAutoscaler",
		"metadata":{"name":"v1"},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"api","apiVersion":"apps/v1"},"maxReplicas":5,"targetCPUUtilizationPercentage":55}}`)
	// Status through /status (what the HPA controller writes).
	code, cur := kube("GET", "/apis/autoscaling/v2/namespaces/conv/horizontalpodautoscalers/all", "application/json", nil)
	if code != 200 {
		t.Fatalf("GET hpa: %d %s", code, cur)
	}
	status := `"status":{"observedGeneration":1,"lastScaleTime":"2026-12-01T10:05:00Z","currentReplicas":4,"desiredReplicas":5,
		"currentMetrics":[{"type":"Resource","resource":{"name":"cpu","current":{"averageUtilization":75,"averageValue":"300m"}}},
		{"type":"External","external":{"metric":{"name":"queue"},"current":{"value":"42","averageValue":"7"}}}],
		"conditions":[{"type":"AbleToScale","status":"True","lastTransitionTime":"2026-12-01T10:05:00Z","reason":"SucceededRescale","message":"ok"}]}`
	body := append(bytes.TrimSuffix(bytes.TrimSpace(cur), []byte("}")), []byte(","+status+"}")...)
	body = bytes.Replace(body, []byte(`"status":{}`), []byte(`"x-dropped":{}`), 1)
	if code, b := kube("PUT", "/apis/autoscaling/v2/namespaces/conv/horizontalpodautoscalers/all/status", "application/json", body); code != 200 {
		t.Fatalf("PUT hpa status: %d %s", code, b)
	}

	// A CRD with two versions and conversion strategy None, its object
	// created at the storage version v1.
	create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
		"metadata":{"name":"gizmos.example.com"},"spec":{"group":"example.com","scope":"Namespaced",
		"names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","listKind":"GizmoList"},
		"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
		{"name":"v2","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`)
	deadline := time.Now().Add(time.Minute)
	for {
		code, b := kube("POST", "/apis/example.com/v1/namespaces/conv/gizmos", "application/json",
			[]byte(`{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g1","labels":{"a":"b"}},"spec":{"size":3,"color":"<red>"}}`))
		if code == 201 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create gizmo: %d %s", code, b)
		}
		time.Sleep(200 * time.Millisecond)
	}

	p := start(t, "--etcd-servers="+etcd.Endpoint)
	lazy := func(path, accept string) (int, []byte) { t.Helper(); return getAs(t, p.URL, path, accept) }
	paths := []string{
		"/apis/events.k8s.io/v1/namespaces/conv/events", "/apis/events.k8s.io/v1/namespaces/conv/events/core-1",
		"/apis/events.k8s.io/v1/namespaces/conv/events/new-1",
		"/apis/autoscaling/v1/namespaces/conv/horizontalpodautoscalers", "/apis/autoscaling/v1/namespaces/conv/horizontalpodautoscalers/all",
		"/apis/autoscaling/v1/namespaces/conv/horizontalpodautoscalers/v1",
		"/apis/autoscaling/v1/namespaces/conv/horizontalpodautoscalers/all/status",
	}
	for _, path := range paths {
		for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			kc, kb := kube("GET", path, accept, nil)
			lc, lb := lazy(path, accept)
			if kc != 200 || lc != 200 || !bytes.Equal(kb, lb) {
				t.Errorf("GET %s (%s): kube-apiserver %d, lazyapi %d, %s", path, accept, kc, lc, firstDifference(kb, lb, 40, 80))
			}
		}
	}
	// The stored versions of the same objects, as written through the
	// other version: JSON (lazyapi's protobuf of a stored object is its
	// stored bytes with the resourceVersion merged in, equal when decoded).
	for _, path := range []string{"/api/v1/namespaces/conv/events/new-1", "/apis/autoscaling/v2/namespaces/conv/horizontalpodautoscalers/v1"} {
		kc, kb := kube("GET", path, "application/json", nil)
		if lc, lb := lazy(path, "application/json"); kc != 200 || lc != 200 || !bytes.Equal(kb, lb) {
			t.Errorf("GET %s: kube-apiserver %d %s\nlazyapi %d %s", path, kc, kb, lc, lb)
		}
	}
	// The CRD's versions (JSON only, as custom resources): v2 is served
	// from the v1 object with apiVersion set.
	for _, path := range []string{"/apis/example.com/v2/namespaces/conv/gizmos/g1", "/apis/example.com/v2/namespaces/conv/gizmos",
		"/apis/example.com/v1/namespaces/conv/gizmos/g1", "/apis/example.com/v1/namespaces/conv/gizmos"} {
		kc, kb := kube("GET", path, "application/json", nil)
		if lc, lb := lazy(path, "application/json"); kc != 200 || lc != 200 || !bytes.Equal(kb, lb) {
			t.Errorf("GET %s: kube-apiserver %d, lazyapi %d, %s", path, kc, lc, firstDifference(kb, lb, 40, 80))
		}
	}
	// Tables (kubectl get): kube-apiserver prints the internal object;
	// the columns, the cells (but those of times relative to now) and the
	// row objects (includeObject=Object: the converted object) are equal.
	type table struct {
		Columns []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			Format      string `json:"format"`
			Description string `json:"description"`
			Priority    int    `json:"priority"`
		} `json:"columnDefinitions"`
		Rows []struct {
			Cells  []json.RawMessage `json:"cells"`
			Object json.RawMessage   `json:"object"`
		} `json:"rows"`
	}
	const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, path := range []string{"/apis/events.k8s.io/v1/namespaces/conv/events?includeObject=Object",
		"/apis/autoscaling/v1/namespaces/conv/horizontalpodautoscalers?includeObject=Object"} {
		kc, kb := kube("GET", path, tableAccept, nil)
		lc, lb := lazy(path, tableAccept)
		var kt, lt table
		if kc != 200 || lc != 200 || json.Unmarshal(kb, &kt) != nil || json.Unmarshal(lb, &lt) != nil || len(kt.Rows) != len(lt.Rows) ||
			len(kt.Columns) != len(lt.Columns) {
			t.Fatalf("GET %s as Table: kube-apiserver %d %s\nlazyapi %d %s", path, kc, kb, lc, lb)
		}
		kcols, _ := json.Marshal(kt.Columns)
		lcols, _ := json.Marshal(lt.Columns)
		if !bytes.Equal(kcols, lcols) {
			t.Errorf("%s columns: kube-apiserver %s, lazyapi %s", path, kcols, lcols)
		}
		for i := range kt.Rows {
			if !bytes.Equal(kt.Rows[i].Object, lt.Rows[i].Object) {
				t.Errorf("%s row %d object: kube-apiserver %s\nlazyapi %s", path, i, kt.Rows[i].Object, lt.Rows[i].Object)
			}
			for j, c := range kt.Columns {
				if c.Name == "Last Seen" || c.Name == "First Seen" || c.Name == "Age" {
					continue
				}
				if !bytes.Equal(kt.Rows[i].Cells[j], lt.Rows[i].Cells[j]) {
					t.Errorf("%s row %d %s: kube-apiserver %s, lazyapi %s", path, i, c.Name, kt.Rows[i].Cells[j], lt.Rows[i].Cells[j])
				}
			}
		}
	}
	fmt.Fprintf(os.Stderr, "compared %d converted paths in JSON and protobuf\n", len(paths))
}
