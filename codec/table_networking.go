package codec

import (
	"fmt"
	"sort"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// networkingPrinters are the printers of the networking.k8s.io group.
func networkingPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("networking.k8s.io", "ingresses", ingressCells, c.name,
			metav1.TableColumnDefinition{Name: "Class", Type: "string", Description: "The name of the IngressClass resource that should be used for additional configuration"},
			metav1.TableColumnDefinition{Name: "Hosts", Type: "string", Description: "Hosts that incoming requests are matched against before the ingress rule"},
			metav1.TableColumnDefinition{Name: "Address", Type: "string", Description: "Address is a list containing ingress points for the load-balancer"},
			metav1.TableColumnDefinition{Name: "Ports", Type: "string", Description: "Ports of TLS configurations that open"},
			c.age,
		),
		def("networking.k8s.io", "networkpolicies", networkPolicyCells, c.name,
			metav1.TableColumnDefinition{Name: "Pod-Selector", Type: "string", Description: networkingv1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]},
			c.age,
		),
	}
}

func ingressCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			IngressClassName *string `json:"ingressClassName"`
			Rules            []struct {
				Host string `json:"host"`
			} `json:"rules"`
			TLS []gojson.RawMessage `json:"tls"`
		} `json:"spec"`
		Status struct {
			LoadBalancer struct {
				Ingress []struct {
					IP       string `json:"ip"`
					Hostname string `json:"hostname"`
				} `json:"ingress"`
			} `json:"loadBalancer"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	class := "<none>"
	if o.Spec.IngressClassName != nil {
		class = *o.Spec.IngressClassName
	}
	// formatHosts: the first three non-empty hosts, "*" when none.
	var hosts []string
	more := false
	for _, r := range o.Spec.Rules {
		if len(hosts) == 3 {
			more = true
		}
		if !more && r.Host != "" {
			hosts = append(hosts, r.Host)
		}
	}
	hostsCell := "*"
	if len(hosts) > 0 {
		hostsCell = strings.Join(hosts, ",")
		if more {
			hostsCell = fmt.Sprintf("%s + %d more...", hostsCell, len(o.Spec.Rules)-3)
		}
	}
	set := map[string]bool{}
	for _, in := range o.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			set[in.IP] = true
		} else if in.Hostname != "" {
			set[in.Hostname] = true
		}
	}
	addrs := make([]string, 0, len(set))
	for a := range set {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	ports := "80"
	if len(o.Spec.TLS) != 0 {
		ports = "80, 443"
	}
	return []any{o.Metadata.Name, class, hostsCell, strings.Join(addrs, ","), ports, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func networkPolicyCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			PodSelector metav1.LabelSelector `json:"podSelector"`
		} `json:"spec"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, metav1.FormatLabelSelector(&o.Spec.PodSelector), translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}
