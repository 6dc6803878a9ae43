package codec

import (
	"time"

	gojson "github.com/goccy/go-json"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// policyPrinters are the printers of the policy group.
func policyPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("policy", "poddisruptionbudgets", podDisruptionBudgetCells, c.name,
			metav1.TableColumnDefinition{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
			metav1.TableColumnDefinition{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
			metav1.TableColumnDefinition{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
			c.age,
		),
	}
}

func podDisruptionBudgetCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			MinAvailable   *intstr.IntOrString `json:"minAvailable"`
			MaxUnavailable *intstr.IntOrString `json:"maxUnavailable"`
		} `json:"spec"`
		Status struct {
			DisruptionsAllowed int32 `json:"disruptionsAllowed"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	orNA := func(v *intstr.IntOrString) string {
		if v == nil {
			return "N/A"
		}
		return v.String()
	}
	return []any{o.Metadata.Name, orNA(o.Spec.MinAvailable), orNA(o.Spec.MaxUnavailable), int64(o.Status.DisruptionsAllowed),
		translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}
