package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// Kind is a kind of object the harness seeds and reads.
type Kind struct {
	// Name is the flag value: configmap, secret, pod, widget.
	Name string
	// Resource is the plural REST resource, e.g. "configmaps".
	Resource string
	// Group and Version of the REST path; Group is "" for the core group.
	Group, Version string
	// KeyPrefix is the etcd key segment after --etcd-prefix.
	KeyPrefix string
	// ObjectKind is the object's kind, e.g. "ConfigMap"; its list kind is
	// ObjectKind+"List".
	ObjectKind string
	// Custom is true for a custom resource: always stored as JSON, its CRD
	// is seeded too.
	Custom bool
}

// CR group and names of the seeded custom resource.
const (
	CRGroup    = "bench.lazyapi.io"
	CRVersion  = "v1"
	CRKind     = "Widget"
	CRListKind = "WidgetList"
	CRPlural   = "widgets"
	CRSingular = "widget"
	CRDName    = CRPlural + "." + CRGroup
)

// Kinds are the kinds lazybench can seed.
var Kinds = []Kind{
	{Name: "configmap", Resource: "configmaps", Version: "v1", KeyPrefix: "configmaps", ObjectKind: "ConfigMap"},
	{Name: "secret", Resource: "secrets", Version: "v1", KeyPrefix: "secrets", ObjectKind: "Secret"},
	{Name: "pod", Resource: "pods", Version: "v1", KeyPrefix: "pods", ObjectKind: "Pod"},
	{Name: "widget", Resource: CRPlural, Group: CRGroup, Version: CRVersion, KeyPrefix: CRGroup + "/" + CRPlural, ObjectKind: CRKind, Custom: true},
}

// LookupKind finds a kind by flag name, plural resource, or "cr".
func LookupKind(name string) (Kind, bool) {
	name = strings.ToLower(name)
	if name == "cr" || name == "customresource" {
		name = "widget"
	}
	for _, k := range Kinds {
		if k.Name == name || k.Resource == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Path returns the REST path of the kind's collection in ns ("" for all
// namespaces), e.g. /api/v1/namespaces/ns/configmaps.
func (k Kind) Path(ns string) string {
	var b strings.Builder
	if k.Group == "" {
		b.WriteString("/api/" + k.Version)
	} else {
		b.WriteString("/apis/" + k.Group + "/" + k.Version)
	}
	if ns != "" {
		b.WriteString("/namespaces/" + ns)
	}
	b.WriteString("/" + k.Resource)
	return b.String()
}

// apps, tiers and suffixes name objects the way real clusters do.
var (
	apps = []string{"checkout", "payments", "frontend", "catalog", "search", "auth", "billing", "inventory",
		"notifications", "gateway", "orders", "recommendations", "shipping", "reviews", "analytics", "ledger",
		"profile", "media", "metrics-agent", "scheduler"}
	tiers    = []string{"frontend", "backend", "cache", "db"}
	envs     = []string{"prod", "staging", "dev"}
	cmSuffix = []string{"config", "env", "settings", "scripts", "dashboards", "rules", "flags", "nginx-conf"}
	words    = []string{"timeout", "replicas", "endpoint", "retry", "buffer", "cache", "region", "shard", "pool",
		"limit", "window", "backoff", "threshold", "feature", "enabled", "interval", "level", "format", "queue", "batch"}
)

// NamespaceName returns the name of the i-th seeded namespace.
func NamespaceName(nsPrefix string, i int) string {
	return fmt.Sprintf("%s%04d", nsPrefix, i)
}

// objectSpec is what identifies the i-th seeded object.
type objectSpec struct {
	i         int
	namespace string
	name      string
	app       string
	labels    map[string]string
	uid       types.UID
	created   time.Time
	size      int // target stored size in bytes
}

// suffix returns a 6-character base36 string unique for i < 36^6: i times
// an odd multiplier coprime with 36, modulo 36^6.
func suffix(i int) string {
	const m = 36 * 36 * 36 * 36 * 36 * 36
	v := (uint64(i) * 1_000_003) % m
	s := strconv.FormatUint(v, 36)
	return strings.Repeat("0", 6-len(s)) + s
}

func randUID(r *rand.Rand) types.UID {
	a, b := r.Uint64(), r.Uint64()
	a = a&^(0xf<<12) | 0x4<<12 // version 4
	b = b&^(0x3<<62) | 0x2<<62 // variant
	return types.UID(fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xffff, b>>48, b&0xffffffffffff))
}

func newSpec(k Kind, i int, cfg *SeedConfig, r *rand.Rand, now time.Time) objectSpec {
	app := apps[r.IntN(len(apps))]
	var name string
	switch k.Name {
	case "configmap":
		name = app + "-" + cmSuffix[i%len(cmSuffix)] + "-" + suffix(i)
	case "secret":
		kind := "tls"
		if i%3 == 1 {
			kind = "token"
		} else if i%3 == 2 {
			kind = "credentials"
		}
		name = app + "-" + kind + "-" + suffix(i)
	case "pod":
		name = app + "-" + suffix(i/7) + "9f-" + suffix(i)[1:]
	default:
		name = app + "-widget-" + suffix(i)
	}
	return objectSpec{
		i:         i,
		namespace: NamespaceName(cfg.NamespacePrefix, i%cfg.Namespaces),
		name:      name,
		app:       app,
		labels: map[string]string{
			"app":                          app,
			"tier":                         tiers[r.IntN(len(tiers))],
			"env":                          envs[r.IntN(len(envs))],
			GroupLabel:                     "g" + strconv.Itoa(i%10),
			"app.kubernetes.io/managed-by": "lazybench",
		},
		uid:     randUID(r),
		created: now.Add(-time.Duration(r.Int64N(int64(30 * 24 * time.Hour)))).Truncate(time.Second),
		size:    cfg.Size.Draw(r),
	}
}

// GroupLabel is set on every seeded object to "g0".."g9" (object index
// modulo 10), so a label selector GroupLabel=g3 selects a tenth of them.
const GroupLabel = "lazybench.io/group"

func (s objectSpec) meta() metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              s.name,
		Namespace:         s.namespace,
		UID:               s.uid,
		CreationTimestamp: metav1.NewTime(s.created),
		Labels:            s.labels,
		Annotations:       map[string]string{"lazybench.io/index": strconv.Itoa(s.i)},
	}
}

// fillerText is 2 MiB of config-file-like text, built once (immutable).
var fillerText = sync.OnceValue(func() string {
	r := rand.New(rand.NewPCG(11, 13))
	var b strings.Builder
	const n = 2 << 20
	b.Grow(n + 64)
	for b.Len() < n {
		fmt.Fprintf(&b, "%s.%s.%s = %d\n", words[r.IntN(len(words))], words[r.IntN(len(words))], words[r.IntN(len(words))], r.IntN(100000))
	}
	return b.String()
})

// filler returns n bytes of config-file-like text from a random offset of
// fillerText: realistic, and as compressible as real configuration.
func filler(r *rand.Rand, n int) string {
	if n <= 0 {
		return ""
	}
	text := fillerText()
	if n > len(text) {
		return strings.Repeat(text, n/len(text)+1)[:n]
	}
	off := r.IntN(len(text) - n + 1)
	return strings.Clone(text[off : off+n])
}

// build returns the object for s with a payload of n bytes.
func build(k Kind, s objectSpec, r *rand.Rand, n int) runtime.Object {
	switch k.Name {
	case "configmap":
		return &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: s.meta(),
			Data: map[string]string{
				"application.properties": filler(r, n),
				"LOG_LEVEL":              "info",
			},
		}
	case "secret":
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		return &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: s.meta(),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{"tls.key": data, "username": []byte(s.app)},
		}
	case "pod":
		m := s.meta()
		m.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = filler(r, n)
		m.GenerateName = s.name[:strings.LastIndexByte(s.name, '-')+1]
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: strings.TrimSuffix(m.GenerateName, "-"),
			UID: randUID(r), Controller: new(true), BlockOwnerDeletion: new(true),
		}}
		return &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: m,
			Spec: corev1.PodSpec{
				NodeName:           fmt.Sprintf("node-%03d", r.IntN(200)),
				ServiceAccountName: "default",
				RestartPolicy:      corev1.RestartPolicyAlways,
				Containers: []corev1.Container{{
					Name:  s.app,
					Image: "registry.example.com/" + s.app + ":v1." + strconv.Itoa(r.IntN(40)),
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
					Env:   []corev1.EnvVar{{Name: "APP", Value: s.app}, {Name: "GOMAXPROCS", Value: "2"}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
					},
					TerminationMessagePath:   "/dev/termination-log",
					TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					ImagePullPolicy:          corev1.PullIfNotPresent,
				}},
			},
			Status: corev1.PodStatus{
				Phase:     corev1.PodRunning,
				PodIP:     fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), 1+r.IntN(254)),
				StartTime: &metav1.Time{Time: s.created.Add(2 * time.Second)},
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(s.created.Add(5 * time.Second))},
				},
			},
		}
	default:
		m := s.meta()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": CRGroup + "/" + CRVersion,
			"kind":       CRKind,
			"metadata": map[string]any{
				"name":              m.Name,
				"namespace":         m.Namespace,
				"uid":               string(m.UID),
				"creationTimestamp": m.CreationTimestamp.UTC().Format(time.RFC3339),
				"labels":            toAny(m.Labels),
				"annotations":       toAny(m.Annotations),
				"generation":        int64(1),
			},
			"spec": map[string]any{
				"replicas": int64(1 + r.IntN(5)),
				"image":    "registry.example.com/" + s.app + ":v1",
				"config":   filler(r, n),
			},
		}}
		return u
	}
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// encode stores obj as kube-apiserver would.
func encode(k Kind, obj runtime.Object, asJSON bool) ([]byte, error) {
	if k.Custom || asJSON {
		return storagefmt.JSON(obj)
	}
	return storagefmt.Protobuf(obj)
}

// namespaceObject returns a seeded Namespace.
func namespaceObject(name string, r *rand.Rand, now time.Time) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: randUID(r), CreationTimestamp: metav1.NewTime(now.Truncate(time.Second)),
			Labels: map[string]string{"kubernetes.io/metadata.name": name, "app.kubernetes.io/managed-by": "lazybench"},
		},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
}

// crdObject returns the seeded Widget CRD the way kube-apiserver stores CRDs:
// JSON, encoded at apiextensions.k8s.io/v1beta1 (kube-apiserver's
// apiextensions storage codec is LegacyCodec(v1beta1, v1) with a v1beta1
// encode versioner; see pkg/controlplane/apiserver/apiextensions.go).
func crdObject(r *rand.Rand, now time.Time) *unstructured.Unstructured {
	ts := now.UTC().Truncate(time.Second).Format(time.RFC3339)
	names := map[string]any{"plural": CRPlural, "singular": CRSingular, "kind": CRKind, "listKind": CRListKind}
	cond := func(t, reason string) map[string]any {
		return map[string]any{"type": t, "status": "True", "lastTransitionTime": ts, "reason": reason, "message": reason}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1beta1",
		"kind":       "CustomResourceDefinition",
		"metadata": map[string]any{
			"name": CRDName, "uid": string(randUID(r)), "creationTimestamp": ts, "generation": int64(1),
			"labels": map[string]any{"app.kubernetes.io/managed-by": "lazybench"},
		},
		"spec": map[string]any{
			"group":                 CRGroup,
			"names":                 names,
			"scope":                 "Namespaced",
			"preserveUnknownFields": false,
			"conversion":            map[string]any{"strategy": "None"},
			"versions": []any{map[string]any{
				"name": CRVersion, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":                                 "object",
					"x-kubernetes-preserve-unknown-fields": true,
				}},
				"additionalPrinterColumns": []any{
					map[string]any{"name": "Replicas", "type": "integer", "JSONPath": ".spec.replicas"},
					map[string]any{"name": "Age", "type": "date", "JSONPath": ".metadata.creationTimestamp"},
				},
			}},
		},
		"status": map[string]any{
			"acceptedNames":  names,
			"storedVersions": []any{CRVersion},
			"conditions":     []any{cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")},
		},
	}}
}
