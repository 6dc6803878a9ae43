// Command gen writes the fixtures of lazyapi's differential conversion
// tests (proxy TestConvertedVersions, codec TestConvertOracle): Events,
// HorizontalPodAutoscalers and PodCertificateRequests as kube-apiserver
// v1.37.2 stores them (each object defaulted as on create, converted to
// the internal version and encoded by the storage codec at the storage
// version: core v1, autoscaling/v2, certificates.k8s.io/v1beta1,
// protobuf), and what kube-apiserver serves for them at the versions that
// need conversion (events.k8s.io/v1, autoscaling/v1,
// certificates.k8s.io/v1): each stored value decoded by the storage codec
// (with defaulting) into the internal version, its resourceVersion set to
// the etcd revision the test writes them at, and encoded by the JSON and
// protobuf serializers for the served version, one object (GET) and the
// namespace's list (LIST), through the conversion functions of
// k8s.io/kubernetes/pkg/apis/{core,events,autoscaling,certificates}.
//
// It is a module of its own (under testdata, so go test ./... ignores it)
// so that lazyapi's go.mod does not take in k8s.io/kubernetes. Run it from
// this directory with the module cache kube-apiserver's build filled
// (bench/kube-apiserver.sh):
//
//	GOFLAGS=-mod=mod GOPROXY=off go run . ..
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/autoscaling"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	"k8s.io/kubernetes/pkg/apis/certificates"
	_ "k8s.io/kubernetes/pkg/apis/certificates/install"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/events/install"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	"k8s.io/utils/ptr"
)

// rv is the etcd revision the test writes every fixture at (one
// transaction, the first write to a new etcd).
const rv = 2

var (
	scheme  = legacyscheme.Scheme
	codecs  = legacyscheme.Codecs
	protoS  = protobuf.NewSerializer(scheme, scheme)
	jsonS   = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{})
	created = metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	later   = metav1.NewTime(time.Date(2026, 12, 1, 10, 5, 0, 0, time.UTC))
)

// Case is one stored object and what kube-apiserver serves for it.
type Case struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Stored   []byte `json:"stored"`
	Served   string `json:"served"` // apiVersion
	Path     string `json:"path"`   // the GET path
	JSON     string `json:"json"`
	Protobuf []byte `json:"protobuf"`
}

// List is a LIST of one namespace at a served version.
type List struct {
	Path     string `json:"path"`
	JSON     string `json:"json"`
	Protobuf []byte `json:"protobuf"`
}

// Table is kube-apiserver's Table of a LIST (its printers on the
// internal objects, Wide as its TableConvertor prints), for the kinds
// whose cells do not read the clock.
type Table struct {
	Path    string                         `json:"path"`
	Columns []metav1.TableColumnDefinition `json:"columns"`
	Cells   [][]any                        `json:"cells"`
}

type fixture struct {
	RV     int64   `json:"rv"`
	Cases  []Case  `json:"cases"`
	Lists  []List  `json:"lists"`
	Tables []Table `json:"tables"`
}

type kindSpec struct {
	storage   schema.GroupVersion
	served    schema.GroupVersion
	keyPrefix string
	path      string // collection path in namespace default at served
	objs      []runtime.Object
	list      func(items []runtime.Object) runtime.Object // internal list
	table     bool                                        // record kube-apiserver's Table
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen OUTDIR")
		os.Exit(2)
	}
	f := fixture{RV: rv}
	for _, k := range kinds() {
		var items []runtime.Object
		for _, o := range k.objs {
			stored := store(o, k.storage)
			internal := load(stored, k.storage)
			acc, _ := meta.Accessor(internal)
			acc.SetResourceVersion(strconv.Itoa(rv))
			items = append(items, internal)
			f.Cases = append(f.Cases, Case{
				Name:     acc.GetName(),
				Key:      "/registry/" + k.keyPrefix + "/" + acc.GetNamespace() + "/" + acc.GetName(),
				Stored:   stored,
				Served:   k.served.String(),
				Path:     k.path + "/" + acc.GetName(),
				JSON:     string(encode(jsonS, internal, k.served)),
				Protobuf: encode(protoS, internal, k.served),
			})
		}
		sort.Slice(items, func(i, j int) bool {
			a, _ := meta.Accessor(items[i])
			b, _ := meta.Accessor(items[j])
			return a.GetName() < b.GetName()
		})
		l := k.list(items)
		lm, _ := meta.ListAccessor(l)
		lm.SetResourceVersion(strconv.Itoa(rv))
		f.Lists = append(f.Lists, List{Path: k.path, JSON: string(encode(jsonS, l, k.served)), Protobuf: encode(protoS, l, k.served)})
		if k.table {
			tb, err := printers.NewTableGenerator().With(printersinternal.AddHandlers).GenerateTable(l, printers.GenerateOptions{Wide: true})
			must(err)
			t := Table{Path: k.path, Columns: tb.ColumnDefinitions}
			for _, r := range tb.Rows {
				t.Cells = append(t.Cells, r.Cells)
			}
			f.Tables = append(f.Tables, t)
		}
	}
	b, err := json.MarshalIndent(&f, "", "  ")
	must(err)
	must(os.WriteFile(filepath.Join(os.Args[1], "kube-apiserver.json"), append(b, '\n'), 0o644))
}

// store is what kube-apiserver writes to etcd for a created object:
// defaulted in its version, converted to internal, encoded at the storage
// version as protobuf.
func store(obj runtime.Object, storage schema.GroupVersion) []byte {
	scheme.Default(obj)
	internal, err := scheme.ConvertToVersion(obj, runtime.InternalGroupVersioner)
	must(err)
	var b bytes.Buffer
	must(codecs.EncoderForVersion(protoS, storage).Encode(internal, &b))
	return b.Bytes()
}

// load decodes a stored value as kube-apiserver's storage codec does
// (decoded at its version with defaulting, converted to internal).
func load(stored []byte, storage schema.GroupVersion) runtime.Object {
	obj, _, err := codecs.DecoderToVersion(protoS, runtime.InternalGroupVersioner).Decode(stored, nil, nil)
	must(err)
	return obj
}

func encode(s runtime.Serializer, internal runtime.Object, gv schema.GroupVersion) []byte {
	var b bytes.Buffer
	must(codecs.EncoderForVersion(s, gv).Encode(internal, &b))
	return b.Bytes()
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func meta0(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", len(name))),
		CreationTimestamp: created, Labels: map[string]string{"app": "web"}}
}

func kinds() []kindSpec {
	return []kindSpec{
		{
			storage: corev1.SchemeGroupVersion, served: schema.GroupVersion{Group: "events.k8s.io", Version: "v1"},
			keyPrefix: "events", path: "/apis/events.k8s.io/v1/namespaces/default/events",
			objs: events(),
			list: func(items []runtime.Object) runtime.Object {
				l := &core.EventList{Items: []core.Event{}}
				for _, o := range items {
					l.Items = append(l.Items, *o.(*core.Event))
				}
				return l
			},
		},
		{
			storage: autoscalingv2.SchemeGroupVersion, served: schema.GroupVersion{Group: "autoscaling", Version: "v1"},
			keyPrefix: "horizontalpodautoscalers", path: "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers",
			objs: hpas(),
			list: func(items []runtime.Object) runtime.Object {
				l := &autoscaling.HorizontalPodAutoscalerList{Items: []autoscaling.HorizontalPodAutoscaler{}}
				for _, o := range items {
					l.Items = append(l.Items, *o.(*autoscaling.HorizontalPodAutoscaler))
				}
				return l
			},
		},
		{
			storage: certificatesv1beta1.SchemeGroupVersion, served: schema.GroupVersion{Group: "certificates.k8s.io", Version: "v1"},
			keyPrefix: "podcertificaterequests", path: "/apis/certificates.k8s.io/v1/namespaces/default/podcertificaterequests",
			objs: pcrs(), table: true,
			list: func(items []runtime.Object) runtime.Object {
				l := &certificates.PodCertificateRequestList{Items: []certificates.PodCertificateRequest{}}
				for _, o := range items {
					l.Items = append(l.Items, *o.(*certificates.PodCertificateRequest))
				}
				return l
			},
		},
	}
}

func events() []runtime.Object {
	pod := corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", UID: "pod-uid", APIVersion: "v1",
		ResourceVersion: "123", FieldPath: "spec.containers{web}"}
	basic := &corev1.Event{ObjectMeta: meta0("ev-basic"), InvolvedObject: pod, Reason: "Pulled",
		Message: `Successfully pulled image "nginx:1.27" in 1.2s <fast> & "quoted"`, Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: created, LastTimestamp: later, Count: 3, Type: corev1.EventTypeNormal,
		ReportingController: "kubelet", ReportingInstance: "node-1"}
	series := &corev1.Event{ObjectMeta: meta0("ev-series"), InvolvedObject: pod, Reason: "BackOff",
		Message: "Back-off restarting failed container", Type: corev1.EventTypeWarning,
		EventTime: metav1.NewMicroTime(time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)),
		Series:    &corev1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(time.Date(2026, 12, 1, 10, 7, 0, 654321000, time.UTC))},
		Action:    "Restarting", ReportingController: "kubelet", ReportingInstance: "kubelet-node-1",
		Related: &corev1.ObjectReference{Kind: "Node", Name: "node-1", APIVersion: "v1", UID: "node-uid"}}
	series.Annotations = map[string]string{"note": "series"}
	minimal := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev-minimal", Namespace: "default", CreationTimestamp: created},
		InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: "default", Name: "web", APIVersion: "apps/v1"}}
	deprecated := &corev1.Event{ObjectMeta: meta0("ev-legacy"), InvolvedObject: pod, Reason: "Scheduled",
		Message: "Successfully assigned default/web-0 to node-1", Source: corev1.EventSource{Component: "default-scheduler"},
		FirstTimestamp: created, LastTimestamp: created, Count: 1, Type: corev1.EventTypeNormal}
	return []runtime.Object{basic, series, minimal, deprecated}
}

func hpas() []runtime.Object {
	ref := autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"}
	cond := func(t autoscalingv2.HorizontalPodAutoscalerConditionType, s corev1.ConditionStatus, reason, msg string) autoscalingv2.HorizontalPodAutoscalerCondition {
		return autoscalingv2.HorizontalPodAutoscalerCondition{Type: t, Status: s, LastTransitionTime: later, Reason: reason, Message: msg}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"queue": "jobs"}}
	cpu := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: meta0("hpa-cpu"), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: ref, MinReplicas: ptr.To[int32](2), MaxReplicas: 10,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](60)}}}}},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{ObservedGeneration: ptr.To[int64](3), LastScaleTime: &later, CurrentReplicas: 4, DesiredReplicas: 5,
			CurrentMetrics: []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{
				Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr.To[int32](72), AverageValue: q("180m")}}}},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{
				cond(autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size"),
				cond(autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"),
			}}}
	all := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: meta0("hpa-all"), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: ref, MinReplicas: ptr.To[int32](1), MaxReplicas: 30,
		Metrics: []autoscalingv2.MetricSpec{
			{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceMemory,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("512Mi")}}},
			{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](75)}}},
			{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{Name: corev1.ResourceCPU,
				Container: "app", Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)}}},
			{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "packets-per-second", Selector: sel},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("1k")}}},
			{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Ingress", Name: "main-route", APIVersion: "networking.k8s.io/v1"},
				Metric:          autoscalingv2.MetricIdentifier{Name: "requests-per-second"},
				Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q("10k")}}},
			{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: "web", APIVersion: "v1"},
				Metric:          autoscalingv2.MetricIdentifier{Name: "latency"},
				Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("250m")}}},
			{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue_messages_ready", Selector: sel},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q("30")}}},
			{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue_lag"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("2")}}},
		},
		Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0), SelectPolicy: ptr.To(autoscalingv2.MaxChangePolicySelect),
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
					{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15}}, Tolerance: q("50m")},
			ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](300), SelectPolicy: ptr.To(autoscalingv2.MinChangePolicySelect),
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 10, PeriodSeconds: 60}}},
		}},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{ObservedGeneration: ptr.To[int64](7), CurrentReplicas: 6, DesiredReplicas: 8,
			CurrentMetrics: []autoscalingv2.MetricStatus{
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceMemory,
					Current: autoscalingv2.MetricValueStatus{AverageValue: q("400Mi")}}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
					Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr.To[int32](81), AverageValue: q("405m")}}},
				{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: corev1.ResourceCPU,
					Container: "app", Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr.To[int32](77), AverageValue: q("385m")}}},
				{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{
					Metric: autoscalingv2.MetricIdentifier{Name: "packets-per-second", Selector: sel}, Current: autoscalingv2.MetricValueStatus{AverageValue: q("866")}}},
				{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricStatus{
					DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Ingress", Name: "main-route", APIVersion: "networking.k8s.io/v1"},
					Metric:          autoscalingv2.MetricIdentifier{Name: "requests-per-second"}, Current: autoscalingv2.MetricValueStatus{Value: q("12k")}}},
				{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricStatus{
					DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: "web", APIVersion: "v1"},
					Metric:          autoscalingv2.MetricIdentifier{Name: "latency"}, Current: autoscalingv2.MetricValueStatus{AverageValue: q("300m")}}},
				{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricStatus{
					Metric: autoscalingv2.MetricIdentifier{Name: "queue_messages_ready", Selector: sel}, Current: autoscalingv2.MetricValueStatus{Value: q("42")}}},
				{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricStatus{
					Metric: autoscalingv2.MetricIdentifier{Name: "queue_lag"}, Current: autoscalingv2.MetricValueStatus{AverageValue: q("3")}}},
			},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{
				cond(autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale", "the HPA controller was able to update the target scale to 8"),
				cond(autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count"),
				cond(autoscalingv2.ScalingLimited, corev1.ConditionFalse, "DesiredWithinRange", "the desired count is within the acceptable range"),
			}}}
	all.Annotations = map[string]string{"owner": "team-a <ops@example.com>"}
	// No metrics: defaulting adds 80% CPU on create; behavior with
	// scale-down only (scale-up defaulted).
	none := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: meta0("hpa-default"), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "StatefulSet", Name: "db", APIVersion: "apps/v1"}, MaxReplicas: 3,
		Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 600}}}}}}
	// Memory only: no targetCPUUtilizationPercentage, metrics annotation.
	mem := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: meta0("hpa-memory"), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: ref, MinReplicas: ptr.To[int32](1), MaxReplicas: 4,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceMemory, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](70)}}}}}}
	return []runtime.Object{cpu, all, none, mem}
}

func pcrs() []runtime.Object {
	issued := &certificatesv1beta1.PodCertificateRequest{ObjectMeta: meta0("pcr-issued"), Spec: certificatesv1beta1.PodCertificateRequestSpec{
		SignerName: "example.com/signer", PodName: "web-0", PodUID: "pod-uid", ServiceAccountName: "default", ServiceAccountUID: "sa-uid",
		NodeName: "node-1", NodeUID: "node-uid", MaxExpirationSeconds: ptr.To[int32](86400),
		PKIXPublicKey: []byte("public-key-der"), ProofOfPossession: []byte("signature"), StubPKCS10Request: []byte("stub-csr"),
		UnverifiedUserAnnotations: map[string]string{"example.com/role": "frontend"}},
		Status: certificatesv1beta1.PodCertificateRequestStatus{
			Conditions: []metav1.Condition{{Type: "Issued", Status: metav1.ConditionTrue, Reason: "Issued", Message: "issued by the signer",
				LastTransitionTime: later, ObservedGeneration: 1}},
			CertificateChain: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
			NotBefore:        &created, BeginRefreshAt: &later, NotAfter: &later}}
	pending := &certificatesv1beta1.PodCertificateRequest{ObjectMeta: meta0("pcr-pending"), Spec: certificatesv1beta1.PodCertificateRequestSpec{
		SignerName: "example.com/signer", PodName: "web-1", PodUID: "pod-uid-1", ServiceAccountName: "default", ServiceAccountUID: "sa-uid",
		NodeName: "node-2", NodeUID: "node-uid-2", PKIXPublicKey: []byte("pk"), ProofOfPossession: []byte("pop")}}
	return []runtime.Object{issued, pending}
}
