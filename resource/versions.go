package resource

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/scheme"
)

// servedVersion returns the version kube-apiserver v1.37 serves group/kind
// at by default: its GA version (beta and alpha versions are off by
// default, KEP-3136), or the storage version when the kind has no GA
// version. Versions removed by 1.37 are skipped.
func servedVersion(group, kind, storage string) string {
	var ga []string
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Group != group || gvk.Kind != kind || strings.Contains(gvk.Version, "alpha") || strings.Contains(gvk.Version, "beta") ||
			gvk.Version == "__internal" {
			continue
		}
		obj, err := scheme.Scheme.New(gvk)
		if err != nil {
			continue
		}
		if l, ok := obj.(lifecycleRemoved); ok {
			if major, minor := l.APILifecycleRemoved(); major == kubeMajor && minor <= kubeMinor {
				continue
			}
		}
		ga = append(ga, gvk.Version)
	}
	if len(ga) == 0 || slices.Contains(ga, storage) {
		return storage
	}
	slices.SortFunc(ga, func(a, b string) int { return version.CompareKubeAwareVersionStrings(b, a) })
	return ga[0]
}

// sameSchema reports whether the Go types of group/kind at versions a and
// b encode alike: the same fields with the same JSON and protobuf tags and
// types, recursively. Such a kind can be served at b from objects stored at
// a by rewriting apiVersion alone, in JSON and in protobuf.
func sameSchema(group, kind, a, b string) (bool, error) {
	types := scheme.Scheme.AllKnownTypes()
	ta, ok := types[schema.GroupVersionKind{Group: group, Version: a, Kind: kind}]
	if !ok {
		return false, fmt.Errorf("cannot find %s %s/%s in client-go's scheme", kind, group, a)
	}
	tb, ok := types[schema.GroupVersionKind{Group: group, Version: b, Kind: kind}]
	if !ok {
		return false, fmt.Errorf("cannot find %s %s/%s in client-go's scheme", kind, group, b)
	}
	return sameType(ta, tb, map[[2]reflect.Type]bool{}), nil
}

func sameType(a, b reflect.Type, seen map[[2]reflect.Type]bool) bool {
	if a == b {
		return true
	}
	if a.Kind() != b.Kind() {
		return false
	}
	k := [2]reflect.Type{a, b}
	if seen[k] {
		return true
	}
	seen[k] = true
	switch a.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Array && a.Len() != b.Len() {
			return false
		}
		return sameType(a.Elem(), b.Elem(), seen)
	case reflect.Map:
		return sameType(a.Key(), b.Key(), seen) && sameType(a.Elem(), b.Elem(), seen)
	case reflect.Struct:
		if a.NumField() != b.NumField() {
			return false
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Tag.Get("json") != fb.Tag.Get("json") || fa.Tag.Get("protobuf") != fb.Tag.Get("protobuf") ||
				!sameType(fa.Type, fb.Type, seen) {
				return false
			}
		}
		return true
	default:
		// Basic kinds; named types of other packages (string enums) encode
		// as their kind.
		return true
	}
}
