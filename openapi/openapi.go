// Package openapi holds the OpenAPI v2 and v3 documents lazyapi serves:
// kube-apiserver v1.37's own documents for the built-in group-versions
// (captured from kube-apiserver by internal/testing/kubecapture and embedded
// gzip-compressed), filtered to the group-versions lazyapi serves, merged
// with the documents of the CustomResourceDefinitions in etcd, built as
// apiextensions-apiserver builds them (crd.go, schema.go).
//
// Documents are bytes: the built-in ones are served from the embedded
// compressed bytes (decompressed once, on first request, for clients that
// do not accept gzip), the CRD ones are built when the CRDs change, and the
// merged v2 document is built on the first request after a change.
// Nothing is computed per request but the choice of bytes.
package openapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
)

//go:embed data
var data embed.FS

// Doc is one document: its JSON (gzip-compressed and, on demand, plain),
// its ETag (kube-openapi's: the upper-case hex SHA-512 of the JSON) and,
// on demand, its protobuf encoding (gnostic's, as kube-openapi makes it).
// It is safe for concurrent use.
type Doc struct {
	gz           []byte
	etag         string
	lastModified time.Time
	v2           bool

	jsonOnce sync.Once
	json     []byte
	jsonErr  error

	protoOnce sync.Once
	proto     []byte
	protoErr  error
}

// ETag returns the document's entity tag, unquoted.
func (d *Doc) ETag() string { return d.etag }

// LastModified returns when the document was built.
func (d *Doc) LastModified() time.Time { return d.lastModified }

// Gzip returns the document's JSON, gzip-compressed. The bytes are shared
// and must not be modified.
func (d *Doc) Gzip() []byte { return d.gz }

// JSON returns the document's JSON, decompressed on the first call. The
// bytes are shared and must not be modified.
func (d *Doc) JSON() ([]byte, error) {
	d.jsonOnce.Do(func() { d.json, d.jsonErr = gunzip(d.gz) })
	return d.json, d.jsonErr
}

// Proto returns the document's protobuf encoding (gnostic's OpenAPI v2 or
// v3 Document), built on the first call. The bytes are shared.
func (d *Doc) Proto() ([]byte, error) {
	d.protoOnce.Do(func() {
		// Not d.JSON: a protobuf client does not need the JSON kept.
		j, err := gunzip(d.gz)
		if err != nil {
			d.protoErr = err
			return
		}
		if d.v2 {
			var doc *openapi_v2.Document
			if doc, err = openapi_v2.ParseDocument(j); err == nil {
				d.proto, err = proto.Marshal(doc)
			}
		} else {
			var doc *openapi_v3.Document
			if doc, err = openapi_v3.ParseDocument(j); err == nil {
				d.proto, err = proto.Marshal(doc)
			}
		}
		d.protoErr = err
	})
	return d.proto, d.protoErr
}

func newDoc(js []byte, v2 bool, at time.Time) *Doc {
	// Only the compressed bytes are kept: most clients accept gzip.
	return &Doc{gz: gzipBytes(js), etag: ETag(js), lastModified: at, v2: v2}
}

// ETag is kube-openapi's computeETag.
func ETag(js []byte) string { return fmt.Sprintf("%X", sha512.Sum512(js)) }

// GroupVersion is a served group-version.
type GroupVersion struct{ Group, Version string }

// path returns the v3 path of gv: "api/v1" or "apis/<group>/<version>".
func (gv GroupVersion) path() string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// Source is what the documents are made of.
type Source interface {
	// ServedBuiltinGroupVersions returns the built-in group-versions
	// served.
	ServedBuiltinGroupVersions() []GroupVersion
	// CRDGeneration returns a number that changes whenever the CRDs do.
	CRDGeneration() uint64
	// CRDDocs returns the documents (from BuildCRD) of the served CRDs.
	CRDDocs() []*CRD
	// ServesWrites reports whether what lazyapi does not serve from etcd
	// is forwarded to kube-apiserver: then the documents are
	// kube-apiserver's, every path and operation; otherwise only the
	// served group-versions' paths and their read operations (GET, and
	// POST of the self reviews), see ReadOnly. It must not change.
	ServesWrites() bool
}

// Service serves the documents of a Source. It is safe for concurrent use.
type Service struct {
	src   Source
	start time.Time

	mu   sync.Mutex // serialises rebuilds
	snap atomic.Pointer[snapshot]
}

// snapshot is the documents for one generation of the CRDs.
type snapshot struct {
	gen       uint64
	discovery *Doc
	v3        map[string]*Doc // by path: "apis/apps/v1"
	crds      []*CRD

	v2Once sync.Once
	v2     *Doc
	v2Err  error
}

// New returns a Service for src. Documents are built on first use.
func New(src Source) *Service {
	return &Service{src: src, start: time.Now()}
}

// V3Discovery returns the /openapi/v3 document.
func (s *Service) V3Discovery() (*Doc, error) {
	snap, err := s.current()
	if err != nil {
		return nil, err
	}
	return snap.discovery, nil
}

// V3 returns the /openapi/v3/<path> document, e.g. path "apis/apps/v1".
func (s *Service) V3(path string) (*Doc, bool, error) {
	snap, err := s.current()
	if err != nil {
		return nil, false, err
	}
	d, ok := snap.v3[path]
	return d, ok, nil
}

// V2 returns the /openapi/v2 document.
func (s *Service) V2() (*Doc, error) {
	snap, err := s.current()
	if err != nil {
		return nil, err
	}
	snap.v2Once.Do(func() { snap.v2, snap.v2Err = s.buildV2(snap) })
	return snap.v2, snap.v2Err
}

// current returns the snapshot of the source's current CRD generation,
// building it if the CRDs changed.
func (s *Service) current() (*snapshot, error) {
	gen := s.src.CRDGeneration()
	if snap := s.snap.Load(); snap != nil && snap.gen == gen {
		return snap, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	gen = s.src.CRDGeneration()
	crds := s.src.CRDDocs()
	if snap := s.snap.Load(); snap != nil && snap.gen == gen {
		return snap, nil
	}
	snap, err := s.build(crds, gen)
	if err != nil {
		return nil, err
	}
	s.snap.Store(snap)
	return snap, nil
}

// builtinPaths are the v3 paths lazyapi serves besides the group-versions:
// the discovery endpoints it serves too.
var builtinPaths = []string{"api", "apis", "version"}

func (s *Service) build(crds []*CRD, gen uint64) (*snapshot, error) {
	b, err := loadBuiltins()
	if err != nil {
		return nil, err
	}
	snap := &snapshot{gen: gen, v3: map[string]*Doc{}, crds: crds}
	writes := s.src.ServesWrites()
	served := map[string]bool{}
	for _, p := range builtinPaths {
		served[p] = true
	}
	for _, gv := range s.src.ServedBuiltinGroupVersions() {
		served[gv.path()] = true
		if gv.Group != "" {
			served["apis/"+gv.Group] = true
		}
	}
	v3 := b.v3
	if !writes {
		if v3, err = b.readOnlyV3(); err != nil {
			return nil, err
		}
	}
	for p, d := range v3 {
		if writes || served[p] {
			snap.v3[p] = d
		}
	}
	tmpl, err := loadTemplates()
	if err != nil {
		return nil, err
	}
	// CRD documents, merged per group-version as
	// apiextensions-apiserver's MergeSpecsV3 does.
	now := time.Now()
	type parts struct{ paths, schemas map[string]json.RawMessage }
	byGV := map[string]*parts{}
	for _, c := range crds {
		for _, v := range c.Versions {
			p := "apis/" + c.Group + "/" + v.Version
			if _, builtin := snap.v3[p]; builtin {
				continue
			}
			m := byGV[p]
			if m == nil {
				m = &parts{paths: map[string]json.RawMessage{}, schemas: map[string]json.RawMessage{}}
				byGV[p] = m
			}
			paths, schemas, err := v.parts(tmpl, false)
			if err != nil {
				return nil, err
			}
			if !writes {
				if paths, err = readOnlyPaths(paths); err != nil {
					return nil, err
				}
			}
			maps.Copy(m.paths, paths)
			maps.Copy(m.schemas, schemas)
		}
	}
	for p, m := range byGV {
		doc := maps.Clone(tmpl.v3Top)
		doc["paths"] = m.paths
		comps := map[string]any{}
		if c, ok := tmpl.v3Top["components"].(map[string]any); ok {
			maps.Copy(comps, c)
		}
		comps["schemas"] = m.schemas
		doc["components"] = comps
		js, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("cannot encode OpenAPI v3 document of %s: %w", p, err)
		}
		snap.v3[p] = newDoc(js, false, now)
	}
	type entry struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	}
	disc := struct {
		Paths map[string]entry `json:"paths"`
	}{Paths: map[string]entry{}}
	for p, d := range snap.v3 {
		disc.Paths[p] = entry{ServerRelativeURL: "/openapi/v3/" + p + "?hash=" + d.etag}
	}
	js, err := json.Marshal(disc)
	if err != nil {
		return nil, err
	}
	at := s.start
	if len(byGV) > 0 {
		at = now
	}
	snap.discovery = newDoc(js, false, at)
	return snap, nil
}

// buildV2 merges kube-apiserver's v2 document, without the paths of
// group-versions lazyapi does not serve, with the CRDs' v2 paths and
// definitions.
func (s *Service) buildV2(snap *snapshot) (*Doc, error) {
	b, err := loadBuiltins()
	if err != nil {
		return nil, err
	}
	js, err := gunzip(b.v2.gz) // transient: kept compressed only
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("cannot decode the OpenAPI v2 document: %w", err)
	}
	var paths, defs map[string]json.RawMessage
	if err := json.Unmarshal(doc["paths"], &paths); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc["definitions"], &defs); err != nil {
		return nil, err
	}
	tmpl, err := loadTemplates()
	if err != nil {
		return nil, err
	}
	served := map[string]bool{}
	for _, gv := range s.src.ServedBuiltinGroupVersions() {
		served[gv.Group+"/"+gv.Version] = true
		served[gv.Group] = true
	}
	writes := s.src.ServesWrites()
	for p := range paths {
		if !writes && !servedV2Path(p, served) {
			delete(paths, p)
		}
	}
	for _, c := range snap.crds {
		for _, v := range c.Versions {
			if served[c.Group+"/"+v.Version] {
				continue
			}
			p, d, err := v.parts(tmpl, true)
			if err != nil {
				return nil, err
			}
			if !writes {
				if p, err = readOnlyPaths(p); err != nil {
					return nil, err
				}
			}
			maps.Copy(paths, p)
			maps.Copy(defs, d)
		}
	}
	if !writes {
		if paths, err = readOnlyPaths(paths); err != nil {
			return nil, err
		}
	}
	if doc["paths"], err = json.Marshal(paths); err != nil {
		return nil, err
	}
	if doc["definitions"], err = json.Marshal(defs); err != nil {
		return nil, err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	at := s.start
	if len(snap.crds) > 0 {
		at = time.Now()
	}
	return newDoc(out, true, at), nil
}

// servedV2Path reports whether a path of kube-apiserver's v2 document is
// one lazyapi serves: discovery, /version, and the paths of served
// group-versions (served holds "group/version" and "group").
func servedV2Path(p string, served map[string]bool) bool {
	switch {
	case p == "/api/" || p == "/apis/" || p == "/version/":
		return true
	case strings.HasPrefix(p, "/api/v1/"):
		return served["/v1"]
	case strings.HasPrefix(p, "/apis/"):
		parts := strings.SplitN(strings.TrimPrefix(p, "/apis/"), "/", 3)
		if len(parts) < 2 || parts[1] == "" {
			return served[parts[0]]
		}
		return served[parts[0]+"/"+parts[1]]
	}
	return false
}

// builtins are kube-apiserver's documents, decoded once from data.
type builtins struct {
	v2 *Doc
	v3 map[string]*Doc

	// readOnly are the v3 documents with only read operations, built
	// once, on first use (readOnlyV3).
	readOnlyOnce sync.Once
	readOnly     map[string]*Doc
	readOnlyErr  error
}

// readOnlyV3 returns the v3 documents with their paths' write operations
// removed (ReadOnlyPaths), built on the first call.
func (b *builtins) readOnlyV3() (map[string]*Doc, error) {
	b.readOnlyOnce.Do(func() {
		out := make(map[string]*Doc, len(b.v3))
		at := time.Now()
		for p, d := range b.v3 {
			js, err := gunzip(d.gz)
			if err != nil {
				b.readOnlyErr = err
				return
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(js, &doc); err != nil {
				b.readOnlyErr = fmt.Errorf("cannot decode the OpenAPI v3 document of %s: %w", p, err)
				return
			}
			if raw, ok := doc["paths"]; ok {
				var paths map[string]json.RawMessage
				if err := json.Unmarshal(raw, &paths); err != nil {
					b.readOnlyErr = fmt.Errorf("cannot decode the paths of the OpenAPI v3 document of %s: %w", p, err)
					return
				}
				n := len(paths)
				if paths, err = readOnlyPaths(paths); err != nil {
					b.readOnlyErr = fmt.Errorf("OpenAPI v3 document of %s: %w", p, err)
					return
				}
				if len(paths) == 0 && n > 0 {
					continue // nothing served there read-only
				}
				if doc["paths"], err = json.Marshal(paths); err != nil {
					b.readOnlyErr = err
					return
				}
			}
			if js, err = json.Marshal(doc); err != nil {
				b.readOnlyErr = err
				return
			}
			out[p] = newDoc(js, false, at)
		}
		b.readOnly = out
	})
	return b.readOnly, b.readOnlyErr
}

// readOnlyOperations are the operations of a path item that a read-only
// lazyapi keeps: GET, and the path item's own fields.
var readOnlyOperations = map[string]bool{"get": true, "parameters": true, "summary": true, "description": true, "servers": true}

// selfReviewSuffixes are the paths whose POST a read-only lazyapi answers:
// the self reviews.
var selfReviewSuffixes = []string{"/selfsubjectaccessreviews", "/selfsubjectrulesreviews", "/selfsubjectreviews"}

// readOnlyPaths returns paths (an OpenAPI "paths" object) with only the
// operations a read-only lazyapi answers: GET of every path and POST of
// the self reviews. A path left with no operation is removed.
func readOnlyPaths(paths map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(paths))
	for p, raw := range paths {
		var item map[string]json.RawMessage
		if err := json.Unmarshal(raw, &item); err != nil {
			return nil, fmt.Errorf("cannot decode path %s: %w", p, err)
		}
		selfReview := false
		for _, suf := range selfReviewSuffixes {
			if strings.HasSuffix(strings.TrimSuffix(p, "/"), suf) {
				selfReview = true
			}
		}
		ops := 0
		for k := range item {
			switch {
			case k == "get" || k == "post" && selfReview:
				ops++
			case !readOnlyOperations[k] && !strings.HasPrefix(k, "x-"):
				delete(item, k)
			}
		}
		if ops == 0 {
			continue
		}
		b, err := json.Marshal(item)
		if err != nil {
			return nil, err
		}
		out[p] = b
	}
	return out, nil
}

var (
	builtinsOnce sync.Once
	builtinsVal  *builtins
	builtinsErr  error
)

// loadBuiltins reads the embedded documents' compressed bytes and ETags;
// nothing is decompressed.
func loadBuiltins() (*builtins, error) {
	builtinsOnce.Do(func() { builtinsVal, builtinsErr = readBuiltins() })
	return builtinsVal, builtinsErr
}

func readBuiltins() (*builtins, error) {
	etagsJSON, err := data.ReadFile("data/etags.json")
	if err != nil {
		return nil, err
	}
	var etags map[string]string
	if err := json.Unmarshal(etagsJSON, &etags); err != nil {
		return nil, fmt.Errorf("cannot decode data/etags.json: %w", err)
	}
	at := time.Now()
	b := &builtins{v3: map[string]*Doc{}}
	entries, err := data.ReadDir("data")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		gz, err := data.ReadFile("data/" + name)
		if err != nil {
			return nil, err
		}
		switch {
		case name == "v2.json.gz":
			b.v2 = &Doc{gz: gz, etag: etags[name], lastModified: at, v2: true}
		case strings.HasPrefix(name, "v3-") && strings.HasSuffix(name, ".json.gz"):
			p := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(name, "v3-"), ".json.gz"), "~", "/")
			b.v3[p] = &Doc{gz: gz, etag: etags[name], lastModified: at}
		}
	}
	if b.v2 == nil {
		return nil, fmt.Errorf("no data/v2.json.gz")
	}
	for p, d := range b.v3 {
		if d.etag == "" {
			return nil, fmt.Errorf("no ETag for OpenAPI v3 document %q in data/etags.json", p)
		}
	}
	return b, nil
}

// templates are the template CRDs' documents.
type templates struct {
	v3, v2 *template
	// v3Top is the template v3 document's top level (openapi, info,
	// components.securitySchemes, ...).
	v3Top map[string]any
}

var (
	templatesOnce sync.Once
	templatesVal  *templates
	templatesErr  error
)

func loadTemplates() (*templates, error) {
	templatesOnce.Do(func() { templatesVal, templatesErr = readTemplates() })
	return templatesVal, templatesErr
}

func readTemplates() (*templates, error) {
	t := &templates{}
	gz, err := data.ReadFile("data/crd-template-v3.json.gz")
	if err != nil {
		return nil, err
	}
	js, err := gunzip(gz)
	if err != nil {
		return nil, err
	}
	var v3 struct {
		Paths      map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(js, &v3); err != nil {
		return nil, fmt.Errorf("cannot decode the CRD template: %w", err)
	}
	if err := json.Unmarshal(js, &t.v3Top); err != nil {
		return nil, err
	}
	delete(t.v3Top, "paths")
	if c, ok := t.v3Top["components"].(map[string]any); ok {
		delete(c, "schemas")
	}
	t.v3 = &template{paths: compact(v3.Paths), schemas: compact(v3.Components.Schemas), refPrefix: "#/components/schemas/"}
	if gz, err = data.ReadFile("data/crd-template-v2.json.gz"); err != nil {
		return nil, err
	}
	if js, err = gunzip(gz); err != nil {
		return nil, err
	}
	var v2 struct {
		Paths       map[string]json.RawMessage `json:"paths"`
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal(js, &v2); err != nil {
		return nil, fmt.Errorf("cannot decode the CRD v2 template: %w", err)
	}
	t.v2 = &template{v2: true, paths: compact(v2.Paths), schemas: compact(v2.Definitions), refPrefix: "#/definitions/"}
	// The v2 template holds only the template group's definitions; the
	// definitions they refer to are kube-apiserver's, already in the v2
	// document.
	return t, nil
}

// compact re-encodes each value without insignificant space, so that refs
// can find "$ref":"...".
func compact(m map[string]json.RawMessage) map[string]json.RawMessage {
	for k, v := range m {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err == nil {
			m[k] = b.Bytes()
		}
	}
	return m
}

func gunzip(gz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("cannot decompress: %w", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cannot decompress: %w", err)
	}
	return b, nil
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
