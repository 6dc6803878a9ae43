package codec

import (
	"time"

	gojson "github.com/goccy/go-json"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// coordinationPrinters are the printers of the coordination.k8s.io group.
func coordinationPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("coordination.k8s.io", "leases", leaseCells, c.name,
			metav1.TableColumnDefinition{Name: "Holder", Type: "string", Description: coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]},
			c.age,
		),
	}
}

func leaseCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	holder := ""
	if o.Spec.HolderIdentity != nil {
		holder = *o.Spec.HolderIdentity
	}
	return []any{o.Metadata.Name, holder, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}
