package codec

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The printer registry: which columns and cells a Table of a built-in
// resource has. Each API group's printers live in a file of their own
// (table_core.go, table_apps.go, ...) as a function returning printerDefs;
// printerGroups lists those functions. To add a printer, add a def to its
// group's function (or a new group file and its function here), and its
// resource to docs/compatibility.md's list of printers (TestREADMEPrinters
// checks it).

// cellsFunc returns the cells of a row (string, int64, float64, bool or
// nil) and its conditions from the object's JSON; now is the time Age cells
// are computed against.
type cellsFunc func(js []byte, now time.Time) ([]any, []tableRowCondition, error)

// printerDef is one registered printer: the columns and cells of a Table of
// resource.group.
type printerDef struct {
	group, resource string
	cells           cellsFunc
	cols            []metav1.TableColumnDefinition
}

func def(group, resource string, cells cellsFunc, cols ...metav1.TableColumnDefinition) printerDef {
	return printerDef{group: group, resource: resource, cells: cells, cols: cols}
}

// stdColumns are the column definitions many printers share.
type stdColumns struct {
	name, age, containers, images metav1.TableColumnDefinition
	// metaDoc is ObjectMeta's field documentation.
	metaDoc map[string]string
}

func newStdColumns() stdColumns {
	metaDoc := metav1.ObjectMeta{}.SwaggerDoc()
	return stdColumns{
		name:       metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metaDoc["name"]},
		age:        metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metaDoc["creationTimestamp"]},
		containers: metav1.TableColumnDefinition{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		images:     metav1.TableColumnDefinition{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		metaDoc:    metaDoc,
	}
}

// printerGroups lists every group's printers.
var printerGroups = []func(stdColumns) []printerDef{
	corePrinters,
	coreStatusPrinters,
	appsPrinters,
	batchPrinters,
	coordinationPrinters,
	discoveryPrinters,
	networkingPrinters,
	policyPrinters,
	rbacPrinters,
	admissionregistrationPrinters,
	certificatesPrinters,
	nodePrinters,
	resourcePrinters,
	schedulingPrinters,
	storagePrinters,
	storagemigrationPrinters,
	morePrinters,
	moreNetworkingPrinters,
	moreAutoscalingPrinters,
	apiextensionsPrinters,
}

// registeredPrinters returns the printers of every group.
func registeredPrinters() []printerDef {
	c := newStdColumns()
	var defs []printerDef
	for _, g := range printerGroups {
		defs = append(defs, g(c)...)
	}
	return defs
}

// initTablePrinters builds the immutable printer table once.
func initTablePrinters() {
	c := newStdColumns()
	tablePrinters = make(map[tableKey]*tablePrinter)
	for _, d := range registeredPrinters() {
		k := tableKey{d.group, d.resource}
		if tablePrinters[k] != nil {
			panic(fmt.Sprintf("BUG: two table printers for %s.%s", d.resource, d.group))
		}
		tablePrinters[k] = &tablePrinter{columns: mustColumnsJSON(d.cols), cells: d.cells}
	}
	tablePrinters[tableKey{"", "configmaps"}].protoCells = configMapProtoCells
	tablePrinters[tableKey{"", "secrets"}].protoCells = secretProtoCells
	defaultPrinter = &tablePrinter{cells: defaultCells, columns: mustColumnsJSON([]metav1.TableColumnDefinition{c.name,
		{Name: "Created At", Type: "date", Description: c.metaDoc["creationTimestamp"]}})}
	cc, err := NewCustomColumns(nil)
	if err != nil {
		panic(fmt.Sprintf("BUG: default custom resource columns: %v", err))
	}
	customPrinter = &cc.p
}

// tablePrinter prints the rows of one resource.
type tablePrinter struct {
	// columns is the JSON array of the column definitions.
	columns []byte
	cells   cellsFunc
	// protoCells, when set, computes the same cells from a protobuf-stored
	// object (appendTableRowProtobuf).
	protoCells protoCellsFunc
}

// protoCellsFunc computes a row's cells from an object's protobuf message
// (raw) and its peeked metadata; the cells equal cellsFunc's on the
// object's JSON.
type protoCellsFunc func(raw []byte, m *Meta, now time.Time) ([]any, error)

type tableKey struct{ group, resource string }

var (
	tablePrintersOnce sync.Once
	tablePrinters     map[tableKey]*tablePrinter
	defaultPrinter    *tablePrinter // built-in resources without a printer
	customPrinter     *tablePrinter // custom resources
)

func mustColumnsJSON(cols []metav1.TableColumnDefinition) []byte {
	b, err := json.Marshal(cols)
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot marshal column definitions: %v", err))
	}
	return b
}

// isBuiltinGroup reports whether group is served by kube-apiserver itself
// rather than by a CustomResourceDefinition.
func isBuiltinGroup(group string) bool {
	return group == "" || !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io")
}

// printerFor returns the printer of resource.group: its registered one, the
// default one for another built-in resource, the CRD one otherwise.
func printerFor(group, resource string) *tablePrinter {
	tablePrintersOnce.Do(initTablePrinters)
	if p := tablePrinters[tableKey{group, resource}]; p != nil {
		return p
	}
	if isBuiltinGroup(group) {
		return defaultPrinter
	}
	return customPrinter
}

func defaultCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, o.Metadata.CreationTimestamp.Time.UTC().Format(time.RFC3339)}, nil, nil
}
