package codec

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// Benchmarks of whole-list framing: 100 stored ConfigMaps of ~1 KiB into one
// list response.
//   Apimachinery: decode every stored item, build the ConfigMapList, set the
//                 RVs, encode the list (kube-apiserver's path)
//   Framing:      Unwrap + head, items, tail into a reused buffer
// SetBytes is the stored size of the items.

func benchListItems(b *testing.B) ([][]byte, int64) {
	var stored [][]byte
	var total int64
	for i := 0; i < 100; i++ {
		cm := &corev1.ConfigMap{}
		cm.Name, cm.Namespace = fmt.Sprintf("cm-%03d", i), "bench"
		cm.Labels = map[string]string{"app": "bench", "i": fmt.Sprint(i)}
		cm.Data = map[string]string{"a": strings.Repeat("x", 500), "b": strings.Repeat("y<&>", 100), "c": "short"}
		s, err := storagefmt.Protobuf(cm)
		if err != nil {
			b.Fatal(err)
		}
		stored = append(stored, s)
		total += int64(len(s))
	}
	return stored, total
}

func BenchmarkListConfigMaps(b *testing.B) {
	s := DefaultSchema()
	stored, total := benchListItems(b)
	m := ListMeta{ResourceVersion: 99999, Continue: "token", RemainingItemCount: fxPtr(int64(5))}

	apimachinery := func(b *testing.B, enc runtime.Encoder) {
		var buf bytes.Buffer
		b.ReportAllocs()
		b.SetBytes(total)
		for b.Loop() {
			list := &corev1.ConfigMapList{}
			list.ResourceVersion, list.Continue, list.RemainingItemCount = "99999", "token", m.RemainingItemCount
			for i, st := range stored {
				obj, _, err := fxProto.Decode(st, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				cm := obj.(*corev1.ConfigMap)
				cm.ResourceVersion = fmt.Sprint(1000 + i)
				cm.TypeMeta = list.TypeMeta
				list.Items = append(list.Items, *cm)
			}
			list.Kind, list.APIVersion = "ConfigMapList", "v1"
			buf.Reset()
			if err := enc.Encode(list, &buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("JSON/Apimachinery", func(b *testing.B) { apimachinery(b, fxJSON) })
	b.Run("JSON/Framing", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		b.SetBytes(total)
		for b.Loop() {
			buf = AppendJSONListHead(buf[:0], "v1", "ConfigMapList", m)
			for i, st := range stored {
				o, err := Unwrap(st)
				if err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					buf = AppendJSONListSep(buf)
				}
				if buf, err = s.AppendJSON(buf, o, int64(1000+i), JSONOptions{OmitTypeMeta: true}); err != nil {
					b.Fatal(err)
				}
			}
			buf = AppendJSONListTail(buf)
		}
	})
	b.Run("Protobuf/Apimachinery", func(b *testing.B) { apimachinery(b, fxProto) })
	b.Run("Protobuf/Framing", func(b *testing.B) {
		var buf []byte
		objs := make([]Object, len(stored))
		b.ReportAllocs()
		b.SetBytes(total)
		for b.Loop() {
			size := 0
			for i, st := range stored {
				o, err := Unwrap(st)
				if err != nil {
					b.Fatal(err)
				}
				objs[i] = o
				size += ProtobufListItemSize(o, int64(1000+i))
			}
			buf = AppendProtobufListHead(buf[:0], "v1", "ConfigMapList", m, size)
			for i, o := range objs {
				buf = AppendProtobufListItem(buf, o, int64(1000+i))
			}
			buf = AppendProtobufListTail(buf)
		}
	})
}
