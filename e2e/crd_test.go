package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// crdFixture is one CRD of codec/testdata/crdv1: the value kube-apiserver
// stores and the v1 JSON it serves for it, both written by
// k8s.io/apiextensions-apiserver (codec/testdata/crdv1/gen).
type crdFixture struct {
	name   string         // metadata.name
	stored []byte         // the etcd value (apiextensions.k8s.io/v1beta1 JSON)
	v1     map[string]any // kube-apiserver's v1 object, decoded
	rev    int64          // etcd ModRevision once written
}

func loadCRDFixtures(t *testing.T) []*crdFixture {
	t.Helper()
	paths, err := filepath.Glob("../codec/testdata/crdv1/*.stored.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CRD fixtures: %v", err)
	}
	var fs []*crdFixture
	for _, p := range paths {
		stored, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		served, err := os.ReadFile(strings.TrimSuffix(p, ".stored.json") + ".v1.json")
		if err != nil {
			t.Fatal(err)
		}
		f := &crdFixture{stored: stored}
		if err := json.Unmarshal(served, &f.v1); err != nil {
			t.Fatal(err)
		}
		f.name = f.v1["metadata"].(map[string]any)["name"].(string)
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *crdFixture) int { return strings.Compare(a.name, b.name) })
	return fs
}

// want is the fixture as kube-apiserver serves it at revision rev: its
// resourceVersion is the etcd ModRevision; list items have no kind and
// apiVersion.
func (f *crdFixture) want(listItem bool) map[string]any {
	var m map[string]any
	b, _ := json.Marshal(f.v1)
	json.Unmarshal(b, &m)
	m["metadata"].(map[string]any)["resourceVersion"] = strconv.FormatInt(f.rev, 10)
	if listItem {
		delete(m, "kind")
		delete(m, "apiVersion")
	}
	return m
}

func crdKey(name string) string {
	return "/registry/apiextensions.k8s.io/customresourcedefinitions/" + name
}

// TestCRDsServedAsV1: CustomResourceDefinitions stored as kube-apiserver
// stores them (v1beta1 JSON) are served at apiextensions.k8s.io/v1 (GET,
// LIST, WATCH, Table, kubectl get crd and -o yaml) exactly as
// kube-apiserver's conversion gives them, and not at v1beta1.
func TestCRDsServedAsV1(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fs := loadCRDFixtures(t)
	for _, f := range fs[:len(fs)-1] { // the last one is written during the watch
		resp, err := etcd.Client.Put(ctx, crdKey(f.name), string(f.stored))
		if err != nil {
			t.Fatal(err)
		}
		f.rev = resp.Header.Revision
	}
	p := start(t, "--etcd-servers="+etcd.Endpoint)
	base := p.URL + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

	// WATCH; the last fixture is written once the watch is open.
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"?watch=true&allowWatchBookmarks=false", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("WATCH = %d", resp.StatusCode)
	}

	t.Run("GET", func(t *testing.T) {
		for _, f := range fs[:len(fs)-1] {
			var got map[string]any
			if err := json.Unmarshal(httpGet(t, base+"/"+f.name, "application/json"), &got); err != nil {
				t.Fatal(err)
			}
			if want := f.want(false); !reflect.DeepEqual(got, want) {
				t.Errorf("GET %s:\n got %v\nwant %v", f.name, got, want)
			}
		}
	})
	t.Run("LIST", func(t *testing.T) {
		for _, q := range []string{"", "?resourceVersion=0", "?limit=2"} {
			var list struct {
				Kind, APIVersion string
				Items            []map[string]any
			}
			if err := json.Unmarshal(httpGet(t, base+q, "application/json"), &list); err != nil {
				t.Fatal(err)
			}
			if list.Kind != "CustomResourceDefinitionList" || list.APIVersion != "apiextensions.k8s.io/v1" {
				t.Errorf("LIST%s = %s %s, want apiextensions.k8s.io/v1 CustomResourceDefinitionList", q, list.APIVersion, list.Kind)
			}
			want := len(fs) - 1
			if q == "?limit=2" {
				want = 2
			}
			if len(list.Items) != want {
				t.Fatalf("LIST%s has %d items, want %d", q, len(list.Items), want)
			}
			for i, it := range list.Items {
				if w := fs[i].want(true); !reflect.DeepEqual(it, w) {
					t.Errorf("LIST%s item %d:\n got %v\nwant %v", q, i, it, w)
				}
			}
		}
	})
	t.Run("v1beta1 not served", func(t *testing.T) {
		r, err := http.Get(p.URL + "/apis/apiextensions.k8s.io/v1beta1/customresourcedefinitions")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 404 {
			t.Errorf("GET v1beta1 CRDs = %d, want 404 as from kube-apiserver", r.StatusCode)
		}
	})
	t.Run("Table", func(t *testing.T) {
		var tb struct {
			ColumnDefinitions []struct{ Name string }
			Rows              []struct{ Cells []any }
		}
		if err := json.Unmarshal(httpGet(t, base, "application/json;as=Table;v=v1;g=meta.k8s.io"), &tb); err != nil {
			t.Fatal(err)
		}
		var cols []string
		for _, c := range tb.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		// kube-apiserver v1.37's CRD table convertor
		// (apiextensions-apiserver registry/customresourcedefinition/tableconvertor).
		wantCols := []string{"Name", "Scope", "Versions", "Created At", "Group", "Kind", "ShortNames", "Established"}
		if !slices.Equal(cols, wantCols) || len(tb.Rows) != len(fs)-1 {
			t.Fatalf("Table columns %q with %d rows, want %q and %d rows", cols, len(tb.Rows), wantCols, len(fs)-1)
		}
		for i, r := range tb.Rows {
			md := fs[i].v1["metadata"].(map[string]any)
			created, _ := md["creationTimestamp"].(string)
			spec := fs[i].v1["spec"].(map[string]any)
			if len(r.Cells) != 8 || r.Cells[0] != fs[i].name || r.Cells[1] != spec["scope"] || (created != "" && r.Cells[3] != created) ||
				r.Cells[4] != spec["group"] {
				t.Errorf("row %d = %v, want [%s %v ... %s %v ...]", i, r.Cells, fs[i].name, spec["scope"], created, spec["group"])
			}
		}
	})
	t.Run("WATCH", func(t *testing.T) {
		last := fs[len(fs)-1]
		r, err := etcd.Client.Put(ctx, crdKey(last.name), string(last.stored))
		if err != nil {
			t.Fatal(err)
		}
		last.rev = r.Header.Revision
		// No resourceVersion: ADDED for every CRD there was, then the
		// new one.
		byName := map[string]*crdFixture{}
		for _, f := range fs {
			byName[f.name] = f
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for range fs {
			if !sc.Scan() {
				t.Fatalf("watch ended: %v", sc.Err())
			}
			var ev struct {
				Type   string
				Object map[string]any
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			name, _ := ev.Object["metadata"].(map[string]any)["name"].(string)
			f := byName[name]
			if f == nil {
				t.Fatalf("watch event %s for %q: unknown or repeated", ev.Type, name)
			}
			delete(byName, name)
			if w := f.want(false); ev.Type != "ADDED" || !reflect.DeepEqual(ev.Object, w) {
				t.Errorf("watch event %s:\n got %v\nwant ADDED %v", ev.Type, ev.Object, w)
			}
		}
	})
	t.Run("kubectl", func(t *testing.T) {
		tb := parseTable(t, mustKubectl(t, p.URL, "get", "crd"))
		if !slices.Equal(tb.header, []string{"NAME", "SCOPE", "VERSIONS", "CREATED AT"}) {
			t.Errorf("kubectl get crd header = %q, want NAME, SCOPE, VERSIONS, CREATED AT", tb.header)
		}
		var want []string
		for _, f := range fs {
			want = append(want, f.name)
		}
		if got := tb.names(); !slices.Equal(got, want) {
			t.Errorf("kubectl get crd names = %q, want %q", got, want)
		}
		for _, f := range fs {
			out := mustKubectl(t, p.URL, "get", "crd", f.name, "-o", "yaml", "--show-managed-fields")
			var got map[string]any
			if err := yaml.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("kubectl get crd %s -o yaml: %v\n%s", f.name, err, out)
			}
			if w := f.want(false); !reflect.DeepEqual(got, w) {
				t.Errorf("kubectl get crd %s -o yaml:\n%s\nwant (as JSON) %v", f.name, out, w)
			}
		}
	})
}
