package resource

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

const testPrefix = "/registry"

// crdSpec describes a test CRD.
type crdSpec struct {
	group, plural, kind string
	namespaced          bool
	shortNames          []string
	// versions: name -> served; storage is the storage version.
	versions    []string
	notServed   []string
	storage     string
	established bool
	apiVersion  string // apiextensions.k8s.io/v1beta1 (as kube-apiserver stores it) or v1
	webhook     bool   // conversion strategy Webhook (else None)
}

// object builds the CRD as kube-apiserver stores it: in v1beta1, printer
// columns that are the same for every version are at the top level with a
// "JSONPath" key; in v1 they are per version with "jsonPath".
func (c crdSpec) object() *unstructured.Unstructured {
	if c.apiVersion == "" {
		c.apiVersion = "apiextensions.k8s.io/v1beta1"
	}
	v1 := c.apiVersion == "apiextensions.k8s.io/v1"
	pathKey := "JSONPath"
	if v1 {
		pathKey = "jsonPath"
	}
	cols := []any{
		map[string]any{"name": "Color", "type": "string", pathKey: ".spec.color", "description": "the color"},
		map[string]any{"name": "Age", "type": "date", pathKey: ".metadata.creationTimestamp"},
		map[string]any{"name": "Size", "type": "integer", pathKey: ".spec.size", "priority": int64(1)},
	}
	var versions []any
	add := func(name string, served bool) {
		v := map[string]any{"name": name, "served": served, "storage": name == c.storage,
			"schema":           map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			"selectableFields": []any{map[string]any{"jsonPath": ".spec.color"}}}
		if v1 {
			v["additionalPrinterColumns"] = cols
		}
		versions = append(versions, v)
	}
	for _, v := range c.versions {
		add(v, true)
	}
	for _, v := range c.notServed {
		add(v, false)
	}
	names := map[string]any{"plural": c.plural, "singular": strings.ToLower(c.kind), "kind": c.kind, "listKind": c.kind + "List"}
	if c.shortNames != nil {
		sn := make([]any, len(c.shortNames))
		for i, s := range c.shortNames {
			sn[i] = s
		}
		names["shortNames"] = sn
	}
	scope := "Cluster"
	if c.namespaced {
		scope = "Namespaced"
	}
	conversion := map[string]any{"strategy": "None"}
	if c.webhook {
		conversion = map[string]any{"strategy": "Webhook", "webhook": map[string]any{"conversionReviewVersions": []any{"v1"},
			"clientConfig": map[string]any{"url": "https://convert.example.com/"}}}
	}
	spec := map[string]any{"group": c.group, "names": names, "scope": scope, "versions": versions,
		"conversion": conversion, "preserveUnknownFields": false}
	if !v1 {
		spec["additionalPrinterColumns"] = cols
	}
	status := "False"
	if c.established {
		status = "True"
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": c.apiVersion,
		"kind":       "CustomResourceDefinition",
		"metadata": map[string]any{
			"name": c.plural + "." + c.group, "uid": "6b1c1d5e-0000-4000-8000-" + fmt.Sprintf("%012d", len(c.plural)),
			"generation": int64(1), "creationTimestamp": "2026-01-02T03:04:05Z",
		},
		"spec": spec,
		"status": map[string]any{
			"conditions": []any{
				map[string]any{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": "2026-01-02T03:04:05Z"},
				map[string]any{"type": "Established", "status": status, "reason": "InitialNamesAccepted", "lastTransitionTime": "2026-01-02T03:04:05Z"},
			},
			"acceptedNames":  names,
			"storedVersions": []any{c.storage},
		},
	}}
	return u
}

func (c crdSpec) stored(t *testing.T) []byte {
	t.Helper()
	b, err := storagefmt.JSON(c.object())
	if err != nil {
		t.Fatalf("cannot encode CRD: %v", err)
	}
	return b
}

func (c crdSpec) key() string {
	return storagefmt.Key(testPrefix, crdKeySegment, "", c.plural+"."+c.group)
}

var widgets = crdSpec{
	group: "example.com", plural: "widgets", kind: "Widget", namespaced: true, shortNames: []string{"wd"},
	versions: []string{"v1", "v2"}, notServed: []string{"v1alpha1"}, storage: "v1", established: true,
}

// TestCRDWebhookConversion: a CRD converting with a webhook is served at
// its storage version only (lazyapi does not call webhooks); its other
// versions are listed but not Servable, and the storage version is
// preferred.
func TestCRDWebhookConversion(t *testing.T) {
	w := widgets
	w.webhook = true
	c, err := parseCRD(w.stored(t))
	if err != nil || c == nil {
		t.Fatalf("parseCRD = %v, %v", c, err)
	}
	for _, r := range c.resources() {
		if got, want := r.Servable(), r.Version == "v1"; got != want || r.RewritesTypeMeta() {
			t.Errorf("%s Servable = %v (rewrites %v), want %v", r.Version, got, r.RewritesTypeMeta(), want)
		}
	}
	w.webhook = false
	if c, err = parseCRD(w.stored(t)); err != nil || !c.resources()[1].Servable() {
		t.Errorf("strategy None: v2 not servable (%v)", err)
	}
}

func TestParseCRD(t *testing.T) {
	wantCols := []Column{
		{Name: "Color", Type: "string", JSONPath: ".spec.color", Description: "the color"},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		{Name: "Size", Type: "integer", JSONPath: ".spec.size", Priority: 1},
	}
	for _, apiVersion := range []string{"apiextensions.k8s.io/v1beta1", "apiextensions.k8s.io/v1"} {
		c := widgets
		c.apiVersion = apiVersion
		got, err := parseCRD(c.stored(t))
		if err != nil || got == nil {
			t.Fatalf("parseCRD(%s) = %v, %v", apiVersion, got, err)
		}
		if got.group != "example.com" || got.plural != "widgets" || got.kind != "Widget" || got.listKind != "WidgetList" ||
			got.singular != "widget" || !got.namespaced || got.storageVersion != "v1" || !slices.Equal(got.shortNames, []string{"wd"}) {
			t.Errorf("parseCRD(%s) = %+v", apiVersion, got)
		}
		if len(got.versions) != 2 || got.versions[0].name != "v1" || got.versions[1].name != "v2" {
			t.Fatalf("parseCRD(%s) versions = %+v, want served v1, v2", apiVersion, got.versions)
		}
		for _, v := range got.versions {
			if !slices.Equal(v.columns, wantCols) {
				t.Errorf("parseCRD(%s) %s columns = %+v, want %+v", apiVersion, v.name, v.columns, wantCols)
			}
			if !slices.Equal(v.selectable, []string{"spec.color"}) {
				t.Errorf("parseCRD(%s) %s selectable = %q", apiVersion, v.name, v.selectable)
			}
		}
	}

	// A v1beta1 CRD from before spec.versions: spec.version only.
	legacy := []byte(`{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"CustomResourceDefinition","metadata":{"name":"olds.example.org"},
		"spec":{"group":"example.org","version":"v1beta1","names":{"plural":"olds","kind":"Old"},"scope":"Cluster"},
		"status":{"conditions":[{"type":"Established","status":"True"}],"acceptedNames":{"plural":"olds","kind":"Old"}}}`)
	got, err := parseCRD(legacy)
	if err != nil || got == nil || got.storageVersion != "v1beta1" || len(got.versions) != 1 || got.namespaced ||
		got.listKind != "OldList" || got.singular != "old" {
		t.Errorf("parseCRD(spec.version) = %+v, %v", got, err)
	}

	notEstablished := widgets
	notEstablished.established = false
	if got, err := parseCRD(notEstablished.stored(t)); got != nil || err != nil {
		t.Errorf("parseCRD(not established) = %+v, %v, want nil, nil", got, err)
	}
	if _, err := parseCRD([]byte("k8s\x00\n\x0f")); err == nil {
		t.Errorf("parseCRD(protobuf) = no error")
	}
	if _, err := parseCRD([]byte(`{"spec":`)); err == nil {
		t.Errorf("parseCRD(truncated) = no error")
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCRDSync(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	put := func(c crdSpec) {
		t.Helper()
		if _, err := cli.Put(ctx, c.key(), string(c.stored(t))); err != nil {
			t.Fatal(err)
		}
	}
	put(widgets)
	gadgets := crdSpec{group: "example.com", plural: "gadgets", kind: "Gadget", versions: []string{"v1"}, storage: "v1", established: false}
	put(gadgets) // not established: not served
	if _, err := cli.Put(ctx, storagefmt.Key(testPrefix, crdKeySegment, "", "broken.example.com"), "{not json"); err != nil {
		t.Fatal(err)
	}
	// Not a CRD key: must be ignored.
	if _, err := cli.Put(ctx, testPrefix+"/apiextensions.k8s.io/customresourcedefinitionsx/foo", "x"); err != nil {
		t.Fatal(err)
	}

	tb := NewBuiltin()
	if err := tb.StartCRDSync(ctx, cli, testPrefix); err != nil {
		t.Fatal(err)
	}
	if !tb.Ready() {
		t.Errorf("Ready() = false after StartCRDSync")
	}
	// The load is synchronous.
	r, ok := tb.Lookup("example.com", "v1", "widgets")
	if !ok {
		t.Fatalf("widgets.example.com/v1 not served after StartCRDSync")
	}
	if !r.Custom || !r.JSONStorage || !r.Namespaced || r.KeyPrefix != "example.com/widgets" || r.Kind != "Widget" ||
		r.ListKind != "WidgetList" || !r.Servable() || len(r.Columns) != 3 || !slices.Equal(r.FieldSelectors, []string{"spec.color"}) {
		t.Errorf("widgets v1 = %+v", r)
	}
	if got, err := r.ConvertFieldLabel("spec.color"); err != nil || got != "spec.color" {
		t.Errorf("widgets ConvertFieldLabel(spec.color) = %q, %v", got, err)
	}
	if _, err := r.ConvertFieldLabel("spec.size"); err == nil || err.Error() != "field label not supported: spec.size" {
		t.Errorf("widgets ConvertFieldLabel(spec.size) error = %v", err)
	}
	// Conversion strategy None: v2 is served from the v1 objects with
	// apiVersion rewritten, as apiextensions-apiserver's nopConverter.
	r2, ok := tb.Lookup("example.com", "v2", "widgets")
	if !ok || !r2.Servable() || !r2.RewritesTypeMeta() || r2.StorageVersion != "v1" {
		t.Errorf("widgets v2 = %+v, %v, want servable with apiVersion rewritten, storage v1", r2, ok)
	}
	if _, ok := tb.Lookup("example.com", "v1alpha1", "widgets"); ok {
		t.Errorf("widgets v1alpha1 (not served) is in the table")
	}
	if _, ok := tb.Lookup("example.com", "v1", "gadgets"); ok {
		t.Errorf("gadgets (not established) is in the table")
	}
	// apiextensions-apiserver prefers the highest version
	// (kube-aware order), every version being servable.
	if got := tb.Versions("example.com"); !slices.Equal(got, []string{"v2", "v1"}) {
		t.Errorf("Versions(example.com) = %q, want v2 first", got)
	}
	var g metav1.APIGroupList
	mustUnmarshal(t, tb.DiscoveryGroups(), &g)
	if last := g.Groups[len(g.Groups)-1]; last.Name != "example.com" || last.PreferredVersion.Version != "v2" {
		t.Errorf("last group of /apis = %+v, want example.com preferring v2", last)
	}
	if b, ok := tb.DiscoveryGroupVersion("example.com", "v2"); !ok || !strings.Contains(string(b), `"name":"widgets"`) {
		t.Errorf("DiscoveryGroupVersion(example.com, v2) = %s, %v", b, ok)
	}

	// Update: a new short name, and gadgets becomes established.
	w2 := widgets
	w2.shortNames = []string{"wd", "wdg"}
	put(w2)
	gadgets.established = true
	put(gadgets)
	waitFor(t, "the new short name and gadgets", func() bool {
		r, ok := tb.Lookup("example.com", "v1", "widgets")
		_, gok := tb.Lookup("example.com", "v1", "gadgets")
		return ok && slices.Equal(r.ShortNames, []string{"wd", "wdg"}) && gok
	})
	var agg struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Versions []struct {
				Resources []struct {
					Resource   string   `json:"resource"`
					ShortNames []string `json:"shortNames"`
				} `json:"resources"`
			} `json:"versions"`
		} `json:"items"`
	}
	if err := json.Unmarshal(tb.DiscoveryAggregated(false), &agg); err != nil {
		t.Fatal(err)
	}
	last := agg.Items[len(agg.Items)-1]
	if last.Metadata.Name != "example.com" || len(last.Versions) != 2 || len(last.Versions[1].Resources) != 2 {
		t.Errorf("aggregated discovery of example.com = %+v", last)
	}

	// A new cluster-scoped CRD in another group.
	things := crdSpec{group: "other.io", plural: "things", kind: "Thing", versions: []string{"v1beta1"}, storage: "v1beta1", established: true}
	put(things)
	waitFor(t, "things.other.io", func() bool { _, ok := tb.Lookup("other.io", "v1beta1", "things"); return ok })
	r, _ = tb.Lookup("other.io", "v1beta1", "things")
	if r.Namespaced || r.KeyPrefix != "other.io/things" {
		t.Errorf("things = %+v", r)
	}
	if _, err := r.ConvertFieldLabel("metadata.namespace"); err == nil {
		t.Errorf("cluster-scoped things accepts metadata.namespace")
	}

	// Delete widgets.
	if _, err := cli.Delete(ctx, widgets.key()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "widgets to go", func() bool { _, ok := tb.Lookup("example.com", "v1", "widgets"); return !ok })
	if got := tb.Versions("example.com"); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("Versions(example.com) after deleting widgets = %q, want [v1] (gadgets)", got)
	}
	// Built-ins are untouched.
	if _, ok := tb.Lookup("", "v1", "configmaps"); !ok {
		t.Errorf("configmaps lost")
	}
	if err := tb.StartCRDSync(ctx, cli, testPrefix); err == nil {
		t.Errorf("second StartCRDSync: no error")
	}

	// The sync ends with its context.
	select {
	case <-tb.CRDSyncDone():
		t.Fatalf("CRDSyncDone closed while the sync runs")
	default:
	}
	cancel()
	select {
	case <-tb.CRDSyncDone():
	case <-time.After(10 * time.Second):
		t.Fatalf("CRD sync did not end with its context")
	}
}

// TestCRDSyncCompacted starts the watch from a compacted revision: the sync
// must reload and serve what etcd holds now, and end with its context.
func TestCRDSyncCompacted(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	tb := NewBuiltin()
	keyPrefix := testPrefix + "/" + crdKeySegment + "/"
	resp, err := cli.Put(ctx, widgets.key(), string(widgets.stored(t)))
	if err != nil {
		t.Fatal(err)
	}
	oldRev := resp.Header.Revision
	things := crdSpec{group: "other.io", plural: "things", kind: "Thing", versions: []string{"v1"}, storage: "v1", established: true}
	if _, err := cli.Put(ctx, things.key(), string(things.stored(t))); err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, widgets.key())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	go func() {
		tb.syncCRDs(ctx, cli, keyPrefix, oldRev)
		close(done)
	}()
	waitFor(t, "the reload after compaction", func() bool { _, ok := tb.Lookup("other.io", "v1", "things"); return ok })
	if _, ok := tb.Lookup("example.com", "v1", "widgets"); ok {
		t.Errorf("widgets (deleted before the compaction) is served")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("syncCRDs did not end with its context")
	}
}

// TestCRDSyncPaged loads more CRDs than one etcd page holds.
func TestCRDSyncPaged(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := crdPageSize*2 + 7
	for i := range n {
		c := crdSpec{group: fmt.Sprintf("g%03d.example.com", i), plural: "items", kind: "Item", versions: []string{"v1"}, storage: "v1", established: true}
		if _, err := etcd.Client.Put(ctx, c.key(), string(c.stored(t))); err != nil {
			t.Fatal(err)
		}
	}
	tb := NewBuiltin()
	if err := tb.StartCRDSync(ctx, etcd.Client, testPrefix); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, ok := tb.Lookup(fmt.Sprintf("g%03d.example.com", i), "v1", "items"); !ok {
			t.Errorf("CRD %d of %d not loaded", i, n)
		}
	}
}

func TestCRDSyncUnavailable(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	tb := NewBuiltin()
	if err := tb.StartCRDSync(context.Background(), cli, testPrefix); err == nil {
		t.Fatalf("StartCRDSync with a closed client: no error")
	}
	if tb.Ready() {
		t.Errorf("Ready() = true after a failed CRD load")
	}
	if _, ok := tb.Lookup("", "v1", "pods"); !ok {
		t.Errorf("built-in resources lost after a failed CRD load")
	}
}
