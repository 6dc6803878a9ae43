package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/resource"
)

// The scale subresource: GET {deployments,replicasets,statefulsets,
// replicationcontrollers}/NAME/scale and a custom resource's, answered as
// kube-apiserver's registries build an autoscaling/v1 Scale from the stored
// object. It is the one read that decodes a whole object into Go types (a
// rare, small request): the slow path, confined to this file.

// scaleOf returns the Scale of the stored object value (plaintext, as
// stored) at resourceVersion rv.
func scaleOf(r *resource.Resource, value []byte, rv int64) (*autoscalingv1.Scale, error) {
	if r.Custom {
		return customScale(r.Scale, value, rv)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(value, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot decode the stored object: %w", err)
	}
	// kube-apiserver decodes with defaulting: spec.replicas defaults to 1.
	one := int32(1)
	replicas := func(p *int32) int32 {
		if p == nil {
			p = &one
		}
		return *p
	}
	var (
		meta     metav1.ObjectMeta
		spec     int32
		status   int32
		selector string
	)
	switch o := obj.(type) {
	case *appsv1.Deployment:
		meta, spec, status = o.ObjectMeta, replicas(o.Spec.Replicas), o.Status.Replicas
		selector, err = labelSelectorString(o.Spec.Selector)
	case *appsv1.ReplicaSet:
		meta, spec, status = o.ObjectMeta, replicas(o.Spec.Replicas), o.Status.Replicas
		selector, err = labelSelectorString(o.Spec.Selector)
	case *appsv1.StatefulSet:
		meta, spec, status = o.ObjectMeta, replicas(o.Spec.Replicas), o.Status.Replicas
		selector, err = labelSelectorString(o.Spec.Selector)
	case *corev1.ReplicationController:
		meta, spec, status = o.ObjectMeta, replicas(o.Spec.Replicas), o.Status.Replicas
		selector = labels.SelectorFromSet(o.Spec.Selector).String()
	default:
		return nil, fmt.Errorf("%s has no scale subresource", r.GroupResource())
	}
	if err != nil {
		return nil, err
	}
	return newScale(&meta, rv, spec, status, selector), nil
}

// newScale is the Scale of the object meta describes, at revision rv.
func newScale(meta *metav1.ObjectMeta, rv int64, spec, status int32, selector string) *autoscalingv1.Scale {
	return &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: meta.Name, Namespace: meta.Namespace, UID: meta.UID,
			ResourceVersion: strconv.FormatInt(rv, 10), CreationTimestamp: meta.CreationTimestamp},
		Spec:   autoscalingv1.ScaleSpec{Replicas: spec},
		Status: autoscalingv1.ScaleStatus{Replicas: status, Selector: selector},
	}
}

func labelSelectorString(ls *metav1.LabelSelector) (string, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return "", err
	}
	return sel.String(), nil
}

// customScale is apiextensions-apiserver's scale of a custom resource: the
// replicas and selector at the CRD's JSON paths (".spec.replicas"; a
// missing status path is 0, a missing selector "").
func customScale(p *resource.ScalePaths, value []byte, rv int64) (*autoscalingv1.Scale, error) {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return nil, fmt.Errorf("cannot decode the stored object: %w", err)
	}
	var meta metav1.ObjectMeta
	if m, ok := obj["metadata"]; ok {
		b, _ := json.Marshal(m)
		if err := json.Unmarshal(b, &meta); err != nil {
			return nil, fmt.Errorf("cannot decode the stored object's metadata: %w", err)
		}
	}
	num := func(path string) (int32, error) {
		v, ok := jsonPathValue(obj, path)
		if !ok {
			return 0, nil
		}
		n, ok := v.(json.Number)
		if !ok {
			return 0, fmt.Errorf("value at %s is not a number", path)
		}
		i, err := n.Int64()
		return int32(i), err
	}
	spec, err := num(p.SpecReplicas)
	if err != nil {
		return nil, err
	}
	status, err := num(p.StatusReplicas)
	if err != nil {
		return nil, err
	}
	var selector string
	if p.LabelSelector != "" {
		if v, ok := jsonPathValue(obj, p.LabelSelector); ok {
			selector, _ = v.(string)
		}
	}
	return newScale(&meta, rv, spec, status, selector), nil
}

// jsonPathValue follows a CRD scale path (".a.b": field access only, as
// apiextensions validates them).
func jsonPathValue(obj map[string]any, path string) (any, bool) {
	var cur any = obj
	for _, f := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[f]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// serveScale answers a GET of a scale subresource in the negotiated format
// (JSON, YAML or protobuf, as kube-apiserver's serializers write a Scale).
func (s *Server) serveScale(rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format, value []byte, rv int64) {
	out := st.enc.Output()
	if out.Target != encoding.TargetObject {
		st.fail(rc, ef, notAcceptable())
		return
	}
	sc, err := scaleOf(st.r, value, rv)
	if err != nil {
		st.fail(rc, ef, internalErr(err.Error()))
		return
	}
	sc.APIVersion, sc.Kind = "autoscaling/v1", "Scale"
	var ser runtime.Encoder
	switch out.Format {
	case encoding.FormatProtobuf:
		ser = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	case encoding.FormatYAML:
		ser = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{Yaml: true})
	default:
		ser = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{})
	}
	var b bytes.Buffer
	if err := ser.Encode(sc, &b); err != nil {
		st.fail(rc, ef, internalErr(err.Error()))
		return
	}
	rc.SetStatusCode(200)
	rc.SetContentType(out.ContentType(false))
	rc.SetBody(b.Bytes())
	st.finish(200, b.Len())
}
