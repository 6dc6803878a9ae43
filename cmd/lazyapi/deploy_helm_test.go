package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// decodeAll decodes every YAML document of data strictly with client-go's
// scheme; documents of kinds it does not know (the Prometheus Operator's)
// are returned as unstructured.
func decodeAll(t *testing.T, what string, data []byte) []runtime.Object {
	t.Helper()
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", what, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
				t.Fatalf("%s: document %d: %v", what, i, err)
			}
			obj = u
		} else if err != nil {
			t.Fatalf("%s: document %d does not decode strictly: %v", what, i, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// byKindName indexes objects by "Kind/name".
func byKindName(t *testing.T, objs []runtime.Object) map[string]runtime.Object {
	t.Helper()
	m := map[string]runtime.Object{}
	for _, o := range objs {
		if _, isU := o.(*unstructured.Unstructured); !isU {
			gvks, _, err := scheme.Scheme.ObjectKinds(o)
			if err != nil {
				t.Fatal(err)
			}
			o.GetObjectKind().SetGroupVersionKind(gvks[0])
		}
		m[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.(metav1.Object).GetName()] = o
	}
	return m
}

// plainObjects are the objects of deploy/deployment.yaml and rbac.yaml.
func plainObjects(t *testing.T) map[string]runtime.Object {
	return byKindName(t, append(decodeManifests(t, "deployment.yaml"), decodeManifests(t, "rbac.yaml")...))
}

// withoutLabels returns o's copy with no labels on its metadata (the chart
// and the overlay add theirs; selectors are compared as they are).
func withoutLabels(o runtime.Object) runtime.Object {
	c := o.DeepCopyObject()
	c.(metav1.Object).SetLabels(nil)
	return c
}

// helmBinary returns the helm to render the chart with: $LAZYAPI_HELM,
// /work/bin/helm or helm on PATH; the test skips without one.
func helmBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LAZYAPI_HELM"), "/work/bin/helm"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	t.Skip("no helm (LAZYAPI_HELM, /work/bin/helm or PATH): the chart is not rendered. " +
		"cd deploy/helm/tool && go build -o /work/bin/helm helm.sh/helm/v4/cmd/helm builds Helm v4.3.2 (2 m 42 s on 2 busy cores with a warm module cache)")
	return ""
}

func runHelm(t *testing.T, helm string, args ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.Bytes()
}

// TestHelmChart: deploy/helm/lazyapi passes helm lint --strict; rendered
// with its defaults (release lazyapi in kube-system) its objects decode
// strictly and are deploy/deployment.yaml's and deploy/rbac.yaml's, labels
// aside (every object carries app.kubernetes.io/instance); forward.enabled
// adds --upstream-kubeconfig and its Secret's mount and nothing else; the
// Prometheus Operator objects render, the PrometheusRule with the rules of
// deploy/alerts.yaml.
func TestHelmChart(t *testing.T) {
	alerts, err := os.ReadFile(filepath.Join(deployDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	chartDir := filepath.Join(deployDir, "helm", "lazyapi")
	if copied, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml")); err != nil || !bytes.Equal(copied, alerts) {
		t.Errorf("deploy/helm/lazyapi/files/alerts.yaml is not deploy/alerts.yaml (%v): copy it", err)
	}
	helm := helmBinary(t)
	runHelm(t, helm, "lint", "--strict", chartDir)
	render := func(set ...string) map[string]runtime.Object {
		args := []string{"template", "lazyapi", chartDir, "--namespace", "kube-system"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return byKindName(t, decodeAll(t, "helm template", runHelm(t, helm, args...)))
	}
	plain := plainObjects(t)
	chart := render()
	for key, o := range chart {
		if o.(metav1.Object).GetLabels()["app.kubernetes.io/instance"] != "lazyapi" {
			t.Errorf("chart: %s has no app.kubernetes.io/instance=lazyapi label", key)
		}
	}
	if !slices.Equal(slices.Sorted(maps.Keys(chart)), slices.Sorted(maps.Keys(plain))) {
		t.Fatalf("chart renders %v, deploy/ has %v", slices.Sorted(maps.Keys(chart)), slices.Sorted(maps.Keys(plain)))
	}
	for key, o := range plain {
		if !reflect.DeepEqual(withoutLabels(chart[key]), withoutLabels(o)) {
			a, _ := yaml.Marshal(withoutLabels(chart[key]))
			b, _ := yaml.Marshal(withoutLabels(o))
			t.Errorf("chart: %s differs from deploy/'s:\n%s\n---\n%s", key, a, b)
		}
	}
	dep := chart["Deployment/lazyapi"].(*appsv1.Deployment)
	checkPodSpec(t, "chart Deployment", &dep.Spec.Template.Spec)

	fwd := render("forward.enabled=true", "serviceMonitor.enabled=true", "prometheusRule.enabled=true")
	checkForwardDeployment(t, "chart forward.enabled", dep, fwd["Deployment/lazyapi"].(*appsv1.Deployment))
	var want map[string]any
	if err := yaml.Unmarshal(alerts, &want); err != nil {
		t.Fatal(err)
	}
	pr, ok := fwd["PrometheusRule/lazyapi"].(*unstructured.Unstructured)
	if !ok || !reflect.DeepEqual(pr.Object["spec"], want) {
		t.Errorf("chart: PrometheusRule's spec is not deploy/alerts.yaml")
	}
	sm, ok := fwd["ServiceMonitor/lazyapi"].(*unstructured.Unstructured)
	if port, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints"); !ok || len(port) != 1 {
		t.Errorf("chart: no ServiceMonitor with one endpoint")
	}
}

// checkForwardDeployment checks that fwd is base plus --upstream-kubeconfig
// and the mount of its Secret, labels aside.
func checkForwardDeployment(t *testing.T, what string, base, fwd *appsv1.Deployment) {
	t.Helper()
	c := &fwd.Spec.Template.Spec.Containers[0]
	args := containerArgs(*c)
	kc := flagValue(args, "upstream-kubeconfig")
	if kc != "/etc/lazyapi/upstream/kubeconfig" {
		t.Errorf("%s: --upstream-kubeconfig=%q", what, kc)
	}
	fwd = fwd.DeepCopy()
	c = &fwd.Spec.Template.Spec.Containers[0]
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--upstream-kubeconfig=") })
	var secret string
	for _, v := range fwd.Spec.Template.Spec.Volumes {
		if v.Name == "upstream" && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if secret == "" {
		t.Errorf("%s: no upstream Secret volume", what)
	}
	fwd.Spec.Template.Spec.Volumes = slices.DeleteFunc(fwd.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "upstream" })
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "upstream" })
	a, b := fwd.Spec.Template.Spec, base.Spec.Template.Spec
	a.TopologySpreadConstraints, b.TopologySpreadConstraints = nil, nil // their selector labels
	if !reflect.DeepEqual(a, b) || fwd.Spec.Replicas == nil || *fwd.Spec.Replicas != *base.Spec.Replicas {
		t.Errorf("%s: the Deployment differs from the read-only one beyond --upstream-kubeconfig and its Secret", what)
	}
	if hasUpstreamFlag() {
		checkPodSpec(t, what, &fwd.Spec.Template.Spec)
	}
}

// TestKustomize: kubectl's kustomize builds deploy/kustomize/base into
// deploy/deployment.yaml's and rbac.yaml's objects (its two files are
// copies of them, byte for byte) and the overlay deploy/kustomize/forward
// into the same plus --upstream-kubeconfig and its Secret, with its own
// app.kubernetes.io/instance.
func TestKustomize(t *testing.T) {
	for _, f := range []string{"deployment.yaml", "rbac.yaml"} {
		a, err1 := os.ReadFile(filepath.Join(deployDir, f))
		b, err2 := os.ReadFile(filepath.Join(deployDir, "kustomize", "base", f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("deploy/kustomize/base/%s is not deploy/%s (%v, %v): copy it", f, f, err1, err2)
		}
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH: kustomize (kubectl kustomize) is not run")
	}
	build := func(dir string) map[string]runtime.Object {
		out, err := exec.Command(kubectl, "kustomize", filepath.Join(deployDir, "kustomize", dir)).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		return byKindName(t, decodeAll(t, "kustomize "+dir, out))
	}
	plain, base, fwd := plainObjects(t), build("base"), build("forward")
	for key, o := range plain {
		if !reflect.DeepEqual(base[key], o) {
			t.Errorf("kustomize base: %s differs from deploy/'s", key)
		}
		f, ok := fwd[key]
		if !ok {
			t.Errorf("kustomize forward: no %s", key)
			continue
		}
		if f.(metav1.Object).GetLabels()["app.kubernetes.io/instance"] != "lazyapi-forward" {
			t.Errorf("kustomize forward: %s has no app.kubernetes.io/instance=lazyapi-forward", key)
		}
		if key != "Deployment/lazyapi" && key != "Service/lazyapi" && key != "PodDisruptionBudget/lazyapi" &&
			!reflect.DeepEqual(withoutLabels(f), withoutLabels(o)) {
			t.Errorf("kustomize forward: %s differs from deploy/'s beyond labels", key)
		}
	}
	if len(base) != len(plain) || len(fwd) != len(plain) {
		t.Errorf("kustomize: base %d objects, forward %d; deploy/ %d", len(base), len(fwd), len(plain))
	}
	checkForwardDeployment(t, "kustomize forward", plain["Deployment/lazyapi"].(*appsv1.Deployment), fwd["Deployment/lazyapi"].(*appsv1.Deployment))
}
