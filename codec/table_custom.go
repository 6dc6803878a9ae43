package codec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/util/jsonpath"
)

// PrinterColumn is one additionalPrinterColumn of a CustomResourceDefinition
// version.
type PrinterColumn struct {
	Name, Type, Format, Description string
	Priority                        int32
	// JSONPath is the simple JSONPath evaluated against each object, e.g.
	// ".spec.replicas".
	JSONPath string
}

// CustomColumns are the Table columns of a custom resource, as the CRD
// table convertor of kube-apiserver builds them from
// additionalPrinterColumns: Name, then the columns (a CRD without columns
// gets Age, a date column of metadata.creationTimestamp). It is immutable
// and safe for concurrent use.
type CustomColumns struct {
	p    tablePrinter
	cols []PrinterColumn
}

// NewCustomColumns compiles cols; it fails when a JSONPath does not parse,
// which also makes kube-apiserver refuse to serve the CRD's tables.
func NewCustomColumns(cols []PrinterColumn) (*CustomColumns, error) {
	if len(cols) == 0 {
		cols = []PrinterColumn{{Name: "Age", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"}}
	}
	defs := []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}}
	for _, c := range cols {
		if _, err := parseColumnPath(c); err != nil {
			return nil, err
		}
		desc := c.Description
		if desc == "" {
			desc = fmt.Sprintf("Custom resource definition column (in JSONPath format): %s", c.JSONPath)
		}
		defs = append(defs, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: desc, Priority: c.Priority})
	}
	cc := &CustomColumns{cols: append([]PrinterColumn(nil), cols...)}
	cc.p = tablePrinter{columns: mustColumnsJSON(defs), cells: cc.cells}
	return cc, nil
}

func parseColumnPath(c PrinterColumn) (*jsonpath.JSONPath, error) {
	jp := jsonpath.New(c.Name)
	if err := jp.Parse(fmt.Sprintf("{%s}", c.JSONPath)); err != nil {
		return nil, fmt.Errorf("cannot parse JSONPath %q of printer column %q: %w", c.JSONPath, c.Name, err)
	}
	jp.AllowMissingKeys(true)
	return jp, nil
}

// AppendCustomTableHead is AppendTableHead for a custom resource's columns.
func AppendCustomTableHead(dst []byte, cc *CustomColumns, m ListMeta) []byte {
	return appendTableHead(dst, &cc.p, m)
}

// AppendCustomTableRow is AppendTableRow for a custom resource's columns.
func (s *Schema) AppendCustomTableRow(dst []byte, cc *CustomColumns, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	return s.appendTableRow(dst, &cc.p, obj, rv, inc, now)
}

// cells evaluates the columns on the object decoded as kube-apiserver holds
// a custom resource (unstructured: integers int64, other numbers float64).
func (cc *CustomColumns) cells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		return nil, nil, err
	}
	name := ""
	if m, ok := obj["metadata"].(map[string]any); ok {
		name, _ = m["name"].(string)
	}
	cells := make([]any, 0, 1+len(cc.cols))
	cells = append(cells, name)
	var buf strings.Builder
	for _, c := range cc.cols {
		jp, err := parseColumnPath(c) // a JSONPath is not safe for concurrent use
		if err != nil {
			return nil, nil, err
		}
		results, err := jp.FindResults(obj)
		if err != nil || len(results) == 0 || len(results[0]) == 0 {
			cells = append(cells, nil)
			continue
		}
		value := results[0][0].Interface()
		if c.Type == "string" {
			buf.Reset()
			if err := jp.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)}); err != nil {
				cells = append(cells, nil)
				continue
			}
			cells = append(cells, buf.String())
			continue
		}
		cells = append(cells, cellForJSONValue(c.Type, value, now))
	}
	return cells, nil, nil
}

// cellForJSONValue converts a JSONPath result to the cell of a column of
// type headerType, nil when it does not fit.
func cellForJSONValue(headerType string, value any, now time.Time) any {
	switch headerType {
	case "integer":
		switch v := value.(type) {
		case int64:
			return v
		case float64:
			return int64(v)
		case json.Number:
			if i, err := v.Int64(); err == nil {
				return i
			}
		}
	case "number":
		switch v := value.(type) {
		case int64:
			return float64(v)
		case float64:
			return v
		case json.Number:
			if f, err := v.Float64(); err == nil {
				return f
			}
		}
	case "boolean":
		if b, ok := value.(bool); ok {
			return b
		}
	case "string":
		if s, ok := value.(string); ok {
			return s
		}
	case "date":
		if s, ok := value.(string); ok {
			var t metav1.Time
			if err := t.UnmarshalQueryParameter(s); err != nil {
				return "<invalid>"
			}
			return translateTimestampSince(t, now)
		}
	}
	return nil
}
