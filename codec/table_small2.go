package codec

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// morePrinters are kube-apiserver's printers of the less listed kinds of
// the core, apps, networking.k8s.io, autoscaling and
// flowcontrol.apiserver.k8s.io groups, written against the k8s.io/api types
// (typedCells); those of the core and apps groups here, the others in
// moreNetworkingPrinters and moreAutoscalingPrinters.
func morePrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("", "podtemplates", typedCells(func(o *corev1.PodTemplate, now time.Time) []any {
			names, images := containerCells(o.Template.Spec.Containers)
			return []any{o.Name, names, images, labels.FormatLabels(o.Template.Labels)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Containers", Type: "string", Description: "Names of each container in the template."},
			metav1.TableColumnDefinition{Name: "Images", Type: "string", Description: "Images referenced by each container in the template."},
			metav1.TableColumnDefinition{Name: "Pod Labels", Type: "string", Description: "The labels for the pod template."},
		),
		def("", "resourcequotas", typedCells(resourceQuotaCells), c.name,
			metav1.TableColumnDefinition{Name: "Request", Type: "string", Description: "Request represents a minimum amount of cpu/memory that a container may consume."},
			metav1.TableColumnDefinition{Name: "Limit", Type: "string", Description: "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."},
			c.age,
		),
		def("apps", "controllerrevisions", typedCells(func(o *appsv1.ControllerRevision, now time.Time) []any {
			controller := "<none>"
			if ref := metav1.GetControllerOf(o); ref != nil {
				if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil {
					controller = strings.ToLower(gv.WithKind(ref.Kind).GroupKind().String()) + "/" + ref.Name
				}
			}
			return []any{o.Name, controller, o.Revision, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Controller", Type: "string", Description: "Controller of the object"},
			metav1.TableColumnDefinition{Name: "Revision", Type: "string", Description: appsv1.ControllerRevision{}.SwaggerDoc()["revision"]},
			c.age,
		),
	}
}

// moreNetworkingPrinters are morePrinters' of networking.k8s.io.
func moreNetworkingPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("networking.k8s.io", "ingressclasses", typedCells(func(o *networkingv1.IngressClass, now time.Time) []any {
			name := o.Name
			if o.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
				name += " (default)"
			}
			params := "<none>"
			if p := o.Spec.Parameters; p != nil {
				params = p.Kind
				if p.APIGroup != nil {
					params += "." + *p.APIGroup
				}
				params += "/" + p.Name
			}
			return []any{name, o.Spec.Controller, params, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Controller", Type: "string", Description: "Controller that is responsible for handling this class"},
			metav1.TableColumnDefinition{Name: "Parameters", Type: "string", Description: "A reference to a resource with additional parameters"},
			c.age,
		),
		def("networking.k8s.io", "servicecidrs", typedCells(func(o *networkingv1.ServiceCIDR, now time.Time) []any {
			return []any{o.Name, strings.Join(o.Spec.CIDRs, ","), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "CIDRs", Type: "string", Description: networkingv1.ServiceCIDRSpec{}.SwaggerDoc()["cidrs"]},
			c.age,
		),
		def("networking.k8s.io", "ipaddresses", typedCells(func(o *networkingv1.IPAddress, now time.Time) []any {
			parent := "<none>"
			if p := o.Spec.ParentRef; p != nil {
				parent = strings.ToLower(schema.GroupResource{Group: p.Group, Resource: p.Resource}.String())
				if p.Namespace != "" {
					parent += "/" + p.Namespace
				}
				parent += "/" + p.Name
			}
			// kube-apiserver prints an Age cell without its column.
			return []any{o.Name, parent, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "ParentRef", Type: "string", Description: networkingv1.IPAddressSpec{}.SwaggerDoc()["parentRef"]},
		),
	}
}

// moreAutoscalingPrinters are morePrinters' of autoscaling and
// flowcontrol.apiserver.k8s.io.
func moreAutoscalingPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("autoscaling", "horizontalpodautoscalers", typedCells(func(o *autoscalingv2.HorizontalPodAutoscaler, now time.Time) []any {
			minPods := "<unset>"
			if o.Spec.MinReplicas != nil {
				minPods = fmt.Sprintf("%d", *o.Spec.MinReplicas)
			}
			return []any{o.Name, o.Spec.ScaleTargetRef.Kind + "/" + o.Spec.ScaleTargetRef.Name, formatHPAMetrics(o.Spec.Metrics, o.Status.CurrentMetrics),
				minPods, int64(o.Spec.MaxReplicas), int64(o.Status.CurrentReplicas), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Reference", Type: "string", Description: autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["scaleTargetRef"]},
			metav1.TableColumnDefinition{Name: "Targets", Type: "string", Description: autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["metrics"]},
			metav1.TableColumnDefinition{Name: "MinPods", Type: "string", Description: autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["minReplicas"]},
			metav1.TableColumnDefinition{Name: "MaxPods", Type: "string", Description: autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["maxReplicas"]},
			metav1.TableColumnDefinition{Name: "Replicas", Type: "string", Description: autoscalingv2.HorizontalPodAutoscalerStatus{}.SwaggerDoc()["currentReplicas"]},
			c.age,
		),
		def("flowcontrol.apiserver.k8s.io", "flowschemas", typedCells(func(o *flowcontrolv1.FlowSchema, now time.Time) []any {
			dm := "<none>"
			if o.Spec.DistinguisherMethod != nil {
				dm = string(o.Spec.DistinguisherMethod.Type)
			}
			missing := "?"
			for _, cond := range o.Status.Conditions {
				if cond.Type == flowcontrolv1.FlowSchemaConditionDangling {
					missing = string(cond.Status)
					break
				}
			}
			return []any{o.Name, o.Spec.PriorityLevelConfiguration.Name, int64(o.Spec.MatchingPrecedence), dm, translateTimestampSince(o.CreationTimestamp, now), missing}
		}), c.name,
			metav1.TableColumnDefinition{Name: "PriorityLevel", Type: "string", Description: flowcontrolv1.PriorityLevelConfigurationReference{}.SwaggerDoc()["name"]},
			metav1.TableColumnDefinition{Name: "MatchingPrecedence", Type: "string", Description: flowcontrolv1.FlowSchemaSpec{}.SwaggerDoc()["matchingPrecedence"]},
			metav1.TableColumnDefinition{Name: "DistinguisherMethod", Type: "string", Description: flowcontrolv1.FlowSchemaSpec{}.SwaggerDoc()["distinguisherMethod"]},
			c.age,
			metav1.TableColumnDefinition{Name: "MissingPL", Type: "string", Description: "references a broken or non-existent PriorityLevelConfiguration"},
		),
		def("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations", typedCells(func(o *flowcontrolv1.PriorityLevelConfiguration, now time.Time) []any {
			var ncs, queues, hand, qll any = "<none>", "<none>", "<none>", "<none>"
			if l := o.Spec.Limited; l != nil {
				ncs = int64(deref(l.NominalConcurrencyShares, 0))
				if q := l.LimitResponse.Queuing; q != nil {
					queues, hand, qll = int64(q.Queues), int64(q.HandSize), int64(q.QueueLengthLimit)
				}
			}
			return []any{o.Name, string(o.Spec.Type), ncs, queues, hand, qll, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: flowcontrolv1.PriorityLevelConfigurationSpec{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "NominalConcurrencyShares", Type: "string", Description: flowcontrolv1.LimitedPriorityLevelConfiguration{}.SwaggerDoc()["nominalConcurrencyShares"]},
			metav1.TableColumnDefinition{Name: "Queues", Type: "string", Description: flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()["queues"]},
			metav1.TableColumnDefinition{Name: "HandSize", Type: "string", Description: flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()["handSize"]},
			metav1.TableColumnDefinition{Name: "QueueLengthLimit", Type: "string", Description: flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()["queueLengthLimit"]},
			c.age,
		),
	}
}

func containerCells(cs []corev1.Container) (names, images string) {
	n := make([]containerNameImage, len(cs))
	for i, c := range cs {
		n[i] = containerNameImage{Name: c.Name, Image: c.Image}
	}
	return layoutContainerCells(n)
}

// resourceQuotaCells is printResourceQuota: used/hard per resource of
// status.hard, sorted, limits.* in the Limit column.
func resourceQuotaCells(o *corev1.ResourceQuota, now time.Time) []any {
	names := make([]string, 0, len(o.Status.Hard))
	for n := range o.Status.Hard {
		names = append(names, string(n))
	}
	sort.Strings(names)
	var req, lim strings.Builder
	for _, n := range names {
		w := &req
		if p := strings.Split(n, "."); len(p) > 1 && p[0] == "limits" {
			w = &lim
		}
		used := o.Status.Used[corev1.ResourceName(n)]
		hard := o.Status.Hard[corev1.ResourceName(n)]
		fmt.Fprintf(w, "%s: %s/%s, ", n, used.String(), hard.String())
	}
	return []any{o.Name, strings.TrimSuffix(req.String(), ", "), strings.TrimSuffix(lim.String(), ", "), translateTimestampSince(o.CreationTimestamp, now)}
}

// formatHPAMetrics is kube-apiserver's: current/target per metric, two at
// most.
func formatHPAMetrics(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	var list []string
	count := 0
	for i, spec := range specs {
		st := func() *autoscalingv2.MetricStatus {
			if len(statuses) > i {
				return &statuses[i]
			}
			return nil
		}()
		switch spec.Type {
		case autoscalingv2.ExternalMetricSourceType:
			if spec.External.Target.AverageValue != nil {
				cur := "<unknown>"
				if st != nil && st.External != nil && st.External.Current.AverageValue != nil {
					cur = st.External.Current.AverageValue.String()
				}
				list = append(list, fmt.Sprintf("%s/%s (avg)", cur, spec.External.Target.AverageValue.String()))
			} else {
				cur := "<unknown>"
				if st != nil && st.External != nil {
					cur = st.External.Current.Value.String()
				}
				list = append(list, fmt.Sprintf("%s/%s", cur, spec.External.Target.Value.String()))
			}
		case autoscalingv2.PodsMetricSourceType:
			cur := "<unknown>"
			if st != nil && st.Pods != nil {
				cur = st.Pods.Current.AverageValue.String()
			}
			list = append(list, fmt.Sprintf("%s/%s", cur, spec.Pods.Target.AverageValue.String()))
		case autoscalingv2.ObjectMetricSourceType:
			if spec.Object.Target.AverageValue != nil {
				cur := "<unknown>"
				if st != nil && st.Object != nil && st.Object.Current.AverageValue != nil {
					cur = st.Object.Current.AverageValue.String()
				}
				list = append(list, fmt.Sprintf("%s/%s (avg)", cur, spec.Object.Target.AverageValue.String()))
			} else {
				cur := "<unknown>"
				if st != nil && st.Object != nil {
					cur = st.Object.Current.Value.String()
				}
				list = append(list, fmt.Sprintf("%s/%s", cur, spec.Object.Target.Value.String()))
			}
		case autoscalingv2.ResourceMetricSourceType:
			list = append(list, formatResourceMetric(string(spec.Resource.Name), spec.Resource.Target, func() *autoscalingv2.MetricValueStatus {
				if st != nil && st.Resource != nil {
					return &st.Resource.Current
				}
				return nil
			}()))
		case autoscalingv2.ContainerResourceMetricSourceType:
			list = append(list, formatResourceMetric(string(spec.ContainerResource.Name), spec.ContainerResource.Target, func() *autoscalingv2.MetricValueStatus {
				if st != nil && st.ContainerResource != nil {
					return &st.ContainerResource.Current
				}
				return nil
			}()))
		default:
			list = append(list, "<unknown type>")
		}
		count++
	}
	const max = 2
	if count > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:max], ", "), count-max)
	}
	return strings.Join(list, ", ")
}

func formatResourceMetric(name string, target autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	if target.AverageValue != nil {
		c := "<unknown>"
		if cur != nil {
			c = cur.AverageValue.String()
		}
		return fmt.Sprintf("%s: %s/%s", name, c, target.AverageValue.String())
	}
	c := "<unknown>"
	if cur != nil && cur.AverageUtilization != nil {
		c = fmt.Sprintf("%d%%", *cur.AverageUtilization)
	}
	t := "<auto>"
	if target.AverageUtilization != nil {
		t = fmt.Sprintf("%d%%", *target.AverageUtilization)
	}
	return fmt.Sprintf("%s: %s/%s", name, c, t)
}
