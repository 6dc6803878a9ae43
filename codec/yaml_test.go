package codec

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// yamlConfigMaps adds values that stress the YAML emitter: long lines with
// spaces (folded at 80 columns, which depends on indentation), multi-line
// strings, leading spaces, strings that look like numbers or booleans.
func yamlConfigMaps() []runtime.Object {
	objs := testConfigMaps(4)
	objs = append(objs, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "tricky", Namespace: "ns", CreationTimestamp: fxCreated,
			Annotations: map[string]string{"long": strings.Repeat("word ", 40), "num": "0123", "bool": "true", "empty": ""}},
		Data: map[string]string{
			"script.sh": "#!/bin/sh\n  indented line\nexit 0\n",
			"long":      strings.Repeat("lorem ipsum dolor sit amet ", 10),
			"colon":     "a: b",
			"unicode":   "héllo ✓ \u2028",
		},
	})
	return objs
}

func writeYAMLList(t testing.TB, s *Schema, apiVersion, listKind string, m ListMeta, items []fxItem, omitTypeMeta bool) []byte {
	t.Helper()
	if len(items) == 0 {
		return AppendYAMLEmptyList(nil, apiVersion, listKind, m)
	}
	b := AppendYAMLListHead(nil, apiVersion)
	for _, it := range items {
		var err error
		if b, err = s.AppendYAMLListItem(b, it.obj, it.rv, omitTypeMeta); err != nil {
			t.Fatal(err)
		}
	}
	return AppendYAMLListTail(b, listKind, m)
}

// TestYAMLList checks that a list streamed item by item equals
// sigs.k8s.io/yaml.JSONToYAML of the same list's one-go JSON.
func TestYAMLList(t *testing.T) {
	s := fxSchema(t)
	cases := []struct {
		name, apiVersion, kind string
		items                  []fxItem
		omit                   bool
	}{
		{"configmaps", "v1", "ConfigMapList", fxStore(t, yamlConfigMaps(), 100), true},
		{"pods", "v1", "PodList", fxStore(t, testPods(), 7), true},
		{"custom resources", "example.com/v1", "WidgetList", fxStoreCustom(t, 3, 9), false},
		{"empty", "v1", "ConfigMapList", nil, true},
	}
	for _, tc := range cases {
		for _, lm := range listMetas {
			t.Run(tc.name+"/"+lm.name, func(t *testing.T) {
				js := writeJSONList(t, s, tc.apiVersion, tc.kind, lm.m, tc.items, tc.omit, 0)
				want, err := yaml.JSONToYAML(js)
				if err != nil {
					t.Fatal(err)
				}
				got := writeYAMLList(t, s, tc.apiVersion, tc.kind, lm.m, tc.items, tc.omit)
				if !bytes.Equal(got, want) {
					t.Fatalf("YAML list:\n%s\nwant (JSONToYAML of the JSON list):\n%s", got, want)
				}
			})
		}
	}
	// An empty list written as head + tail in one buffer is repaired.
	m := ListMeta{ResourceVersion: 3}
	got := AppendYAMLListTail(AppendYAMLListHead(nil, "v1"), "ConfigMapList", m)
	if want := AppendYAMLEmptyList(nil, "v1", "ConfigMapList", m); !bytes.Equal(got, want) {
		t.Fatalf("head+tail of an empty list = %q, want %q", got, want)
	}
}

func TestYAMLObject(t *testing.T) {
	s := fxSchema(t)
	for _, it := range append(fxStore(t, yamlConfigMaps(), 1), fxStoreCustom(t, 2, 3)...) {
		js, err := s.AppendJSON(nil, it.obj, it.rv, JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := yaml.JSONToYAML(js)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.AppendYAML([]byte("---\n"), it.obj, it.rv)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[4:], want) || string(got[:4]) != "---\n" {
			t.Fatalf("AppendYAML =\n%s\nwant\n%s", got, want)
		}
	}
}
