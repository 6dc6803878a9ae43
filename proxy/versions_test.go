package proxy_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// storedByKube returns the values kube-apiserver stored for the objects of
// codec/testdata/tables (internal/testing/kubecapture), by resource.
func storedByKube(t *testing.T) map[string]struct {
	Key    string
	Stored []byte
} {
	b, err := os.ReadFile("../codec/testdata/tables/kube-apiserver.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Resource, Key string
		Stored        []byte
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	m := map[string]struct {
		Key    string
		Stored []byte
	}{}
	for _, c := range cases {
		m[c.Resource] = struct {
			Key    string
			Stored []byte
		}{c.Key, c.Stored}
	}
	return m
}

// asVersion is the oracle of a same-schema version: the stored object
// decoded by apimachinery, encoded as JSON and decoded into the served
// version's type, with the resourceVersion set.
func asVersion[T runtime.Object](t *testing.T, stored []byte, rv int64, out T) T {
	t.Helper()
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(stored, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, out); err != nil {
		t.Fatal(err)
	}
	acc, _ := any(out).(metav1.Object)
	acc.SetResourceVersion(strconv.FormatInt(rv, 10))
	return out
}

// TestGAVersionsOfBetaStoredKinds: ClusterTrustBundles, DeviceTaintRules
// and StorageVersionMigrations, which kube-apiserver v1.37 stores at their
// beta version and serves at v1 only, are served at v1 (GET, LIST, WATCH,
// JSON and protobuf) from the values kube-apiserver stored, and not at the
// beta version.
func TestGAVersionsOfBetaStoredKinds(t *testing.T) {
	e := startEnv(t)
	stored := storedByKube(t)
	revs := map[string]int64{}
	for _, res := range []string{"clustertrustbundles", "devicetaintrules", "storageversionmigrations"} {
		s, ok := stored[res]
		if !ok {
			t.Fatalf("no stored %s in the capture", res)
		}
		revs[res] = e.putRaw(t, s.Key, s.Stored)
	}
	ctx := context.Background()
	for _, cs := range []kubernetes.Interface{e.cs, e.pcs} {
		ctb, err := cs.CertificatesV1().ClusterTrustBundles().Get(ctx, "bundle", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get clustertrustbundle at v1: %v", err)
		}
		want := asVersion(t, stored["clustertrustbundles"].Stored, revs["clustertrustbundles"], &certificatesv1.ClusterTrustBundle{})
		want.APIVersion, want.Kind = "", ""
		ctb.APIVersion, ctb.Kind = "", ""
		if !equality.Semantic.DeepEqual(ctb, want) {
			t.Errorf("clustertrustbundle = %+v, want %+v", ctb, want)
		}
		l, err := cs.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			t.Fatalf("list devicetaintrules at v1 = %v, %v", l, err)
		}
		wantDTR := asVersion(t, stored["devicetaintrules"].Stored, revs["devicetaintrules"], &resourcev1.DeviceTaintRule{})
		wantDTR.APIVersion, wantDTR.Kind = "", ""
		if !equality.Semantic.DeepEqual(&l.Items[0], wantDTR) {
			t.Errorf("devicetaintrule = %+v, want %+v", l.Items[0], wantDTR)
		}
		w, err := cs.StoragemigrationV1().StorageVersionMigrations().Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatalf("watch storageversionmigrations at v1: %v", err)
		}
		ev := <-w.ResultChan()
		w.Stop()
		svm, ok := ev.Object.(*storagemigrationv1.StorageVersionMigration)
		if ev.Type != watch.Added || !ok {
			t.Fatalf("watch event = %v %T", ev.Type, ev.Object)
		}
		wantSVM := asVersion(t, stored["storageversionmigrations"].Stored, revs["storageversionmigrations"], &storagemigrationv1.StorageVersionMigration{})
		if svm.Name != wantSVM.Name || !equality.Semantic.DeepEqual(svm.Spec, wantSVM.Spec) {
			t.Errorf("storageversionmigration = %+v, want %+v", svm, wantSVM)
		}
	}
	code, _, body := e.raw(t, "GET", "/apis/certificates.k8s.io/v1/clustertrustbundles/bundle", "application/json")
	var tm metav1.TypeMeta
	if err := json.Unmarshal(body, &tm); err != nil || code != 200 || tm.APIVersion != "certificates.k8s.io/v1" || tm.Kind != "ClusterTrustBundle" {
		t.Errorf("GET clustertrustbundle JSON = %d %+v %v", code, tm, err)
	}
	_, err := e.cs.CertificatesV1beta1().ClusterTrustBundles().Get(ctx, "bundle", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("get clustertrustbundle at v1beta1 = %v, want NotFound (kube-apiserver v1.37 serves v1 only)", err)
	}
}
