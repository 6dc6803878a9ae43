package codec

import (
	"strconv"
	"time"

	gojson "github.com/goccy/go-json"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// discoveryPrinters are the printers of the discovery.k8s.io group.
func discoveryPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("discovery.k8s.io", "endpointslices", endpointSliceCells, c.name,
			metav1.TableColumnDefinition{Name: "AddressType", Type: "string", Description: discoveryv1.EndpointSlice{}.SwaggerDoc()["addressType"]},
			metav1.TableColumnDefinition{Name: "Ports", Type: "string", Description: discoveryv1.EndpointSlice{}.SwaggerDoc()["ports"]},
			metav1.TableColumnDefinition{Name: "Endpoints", Type: "string", Description: discoveryv1.EndpointSlice{}.SwaggerDoc()["endpoints"]},
			c.age,
		),
	}
}

func endpointSliceCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata    objMeta `json:"metadata"`
		AddressType string  `json:"addressType"`
		Ports       []struct {
			Name *string `json:"name"`
			Port *int32  `json:"port"`
		} `json:"ports"`
		Endpoints []struct {
			Addresses []string `json:"addresses"`
		} `json:"endpoints"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	const max = 3
	unset := func(s string) string {
		if s == "" {
			return "<unset>"
		}
		return s
	}
	var ports []string
	more, count := false, 0
	for _, p := range o.Ports {
		if len(ports) < max {
			n := "*"
			if p.Port != nil {
				n = strconv.Itoa(int(*p.Port))
			} else if p.Name != nil {
				n = *p.Name
			}
			ports = append(ports, n)
		} else if len(ports) == max {
			more = true
		}
		count++
	}
	portsCell := listWithMore(ports, more, count, max)
	if !more {
		portsCell = unset(portsCell)
	}
	var addrs []string
	more, count = false, 0
	for _, e := range o.Endpoints {
		for _, a := range e.Addresses {
			if len(addrs) < max {
				addrs = append(addrs, a)
			} else if len(addrs) == max {
				more = true
			}
			count++
		}
	}
	addrsCell := listWithMore(addrs, more, count, max)
	if !more {
		addrsCell = unset(addrsCell)
	}
	return []any{o.Metadata.Name, o.AddressType, portsCell, addrsCell, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}
