package codec

import (
	"sort"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiextensionsPrinters are the printers of the two JSON-stored built-in
// kinds: CustomResourceDefinitions (apiextensions-apiserver's
// customresourcedefinition/tableconvertor) and APIServices
// (kube-aggregator's registry/apiservice/etcd ConvertToTable).
func apiextensionsPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("apiextensions.k8s.io", "customresourcedefinitions", crdCells, c.name,
			metav1.TableColumnDefinition{Name: "Scope", Type: "string", Description: "Cluster/Namespaced"},
			metav1.TableColumnDefinition{Name: "Versions", Type: "string", Description: "Served versions"},
			metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: c.metaDoc["creationTimestamp"]},
			metav1.TableColumnDefinition{Name: "Group", Type: "string", Priority: 1, Description: "API group"},
			metav1.TableColumnDefinition{Name: "Kind", Type: "string", Priority: 1, Description: "CustomResource kind"},
			metav1.TableColumnDefinition{Name: "ShortNames", Type: "string", Priority: 1, Description: "Short names"},
			metav1.TableColumnDefinition{Name: "Established", Type: "boolean", Priority: 1, Description: "Established status"},
		),
		def("apiregistration.k8s.io", "apiservices", apiServiceCells, c.name,
			metav1.TableColumnDefinition{Name: "Service", Type: "string", Description: "The reference to the service that hosts this API endpoint."},
			metav1.TableColumnDefinition{Name: "Available", Type: "string", Description: "Whether this service is available."},
			c.age,
		),
	}
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// crdCells reads the CRD as served (apiextensions.k8s.io/v1, converted by
// Unwrap from what kube-apiserver stores).
func crdCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Group string `json:"group"`
			Scope string `json:"scope"`
			Names struct {
				Kind       string   `json:"kind"`
				ShortNames []string `json:"shortNames"`
			} `json:"names"`
			Versions []struct {
				Name    string `json:"name"`
				Served  bool   `json:"served"`
				Storage bool   `json:"storage"`
			} `json:"versions"`
		} `json:"spec"`
		Status struct {
			Conditions []condition `json:"conditions"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	var versions []string
	for _, v := range o.Spec.Versions {
		if v.Served {
			label := v.Name
			if v.Storage {
				label += "(storage)"
			}
			versions = append(versions, label)
		}
	}
	sort.Strings(versions)
	established := false
	for _, c := range o.Status.Conditions {
		if c.Type == "Established" && c.Status == "True" {
			established = true
		}
	}
	return []any{o.Metadata.Name, o.Spec.Scope, strings.Join(versions, ","), o.Metadata.CreationTimestamp.Time.UTC().Format(time.RFC3339),
		o.Spec.Group, o.Spec.Names.Kind, strings.Join(o.Spec.Names.ShortNames, ","), established}, nil, nil
}

func apiServiceCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Service *struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"service"`
		} `json:"spec"`
		Status struct {
			Conditions []condition `json:"conditions"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	service := "Local"
	if o.Spec.Service != nil {
		service = o.Spec.Service.Namespace + "/" + o.Spec.Service.Name
	}
	status := "Unknown"
	for _, c := range o.Status.Conditions {
		if c.Type != "Available" {
			continue
		}
		switch {
		case c.Status == "True" || c.Reason == "":
			status = c.Status
		default:
			status = c.Status + " (" + c.Reason + ")"
		}
		break
	}
	return []any{o.Metadata.Name, service, status, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}
