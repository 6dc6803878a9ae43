package resource

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// crdKeySegment is where kube-apiserver stores CustomResourceDefinitions
// under --etcd-prefix. It stores them as JSON, not protobuf: the
// apiextensions storage codec is Codecs.LegacyCodec(v1beta1) with a v1beta1
// EncodeVersioner (createAPIExtensionsConfig in kube-apiserver), so the value
// is {"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1",...}.
const crdKeySegment = "apiextensions.k8s.io/customresourcedefinitions"

// crdPageSize bounds the CRDs read per etcd range during a load; CRDs with
// large schemas are hundreds of KB each.
const crdPageSize = 100

// crd is what lazyapi keeps of a CustomResourceDefinition.
type crd struct {
	name                             string
	group                            string
	plural, singular, kind, listKind string
	shortNames, categories           []string
	namespaced                       bool
	storageVersion                   string
	// noConversion: spec.conversion.strategy is None (the default), so
	// kube-apiserver serves every served version from the stored objects
	// by setting apiVersion alone (apiextensions-apiserver's nopConverter).
	noConversion bool
	versions     []crdVersion // served versions only
	// doc is the Table's CRD doc builder's result, or nil.
	doc any
}

type crdVersion struct {
	name       string
	columns    []Column
	selectable []string
	// warning is the version's deprecation Warning header, or "".
	warning string
	status  bool
	scale   *ScalePaths
}

// resources returns one Resource per served version.
func (c *crd) resources() []*Resource {
	rs := make([]*Resource, 0, len(c.versions))
	// The versions share one watch cache: it derives the union of their
	// selectable fields.
	var union []string
	for _, v := range c.versions {
		for _, f := range v.selectable {
			if !slices.Contains(union, f) {
				union = append(union, f)
			}
		}
	}
	slices.Sort(union)
	for _, v := range c.versions {
		rs = append(rs, &Resource{
			Group:            c.group,
			Version:          v.name,
			Resource:         c.plural,
			Kind:             c.kind,
			ListKind:         c.listKind,
			SingularName:     c.singular,
			Namespaced:       c.namespaced,
			ShortNames:       c.shortNames,
			Categories:       c.categories,
			KeyPrefix:        c.group + "/" + c.plural,
			Custom:           true,
			JSONStorage:      true,
			StorageVersion:   c.storageVersion,
			FieldSelectors:   v.selectable,
			Columns:          v.columns,
			Warning:          v.warning,
			Scale:            v.scale,
			statusSub:        v.status,
			fieldStyle:       fieldsListed,
			noNamespaceField: !c.namespaced,
			noConversion:     c.noConversion,
			cacheFields:      union,
		})
	}
	return rs
}

func sortedCRDs(m map[string]*crd) []*crd {
	cs := make([]*crd, 0, len(m))
	for _, c := range m {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b *crd) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.plural, b.plural), cmp.Compare(a.name, b.name))
	})
	return cs
}

// crdJSON is the part of a stored CustomResourceDefinition lazyapi reads. It
// accepts both apiextensions.k8s.io/v1beta1 (what kube-apiserver writes) and
// v1: v1beta1 additionally has spec.version, top-level
// spec.additionalPrinterColumns and spec.selectableFields, and spells a
// column's path "JSONPath".
type crdJSON struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group    string   `json:"group"`
		Version  string   `json:"version"`
		Names    crdNames `json:"names"`
		Scope    string   `json:"scope"`
		Versions []struct {
			Name                     string            `json:"name"`
			Served                   bool              `json:"served"`
			Storage                  bool              `json:"storage"`
			Deprecated               bool              `json:"deprecated"`
			DeprecationWarning       *string           `json:"deprecationWarning"`
			AdditionalPrinterColumns []columnJSON      `json:"additionalPrinterColumns"`
			SelectableFields         []selectableField `json:"selectableFields"`
			Subresources             *subresourcesJSON `json:"subresources"`
		} `json:"versions"`
		AdditionalPrinterColumns []columnJSON      `json:"additionalPrinterColumns"`
		SelectableFields         []selectableField `json:"selectableFields"`
		Subresources             *subresourcesJSON `json:"subresources"`
		Conversion               *struct {
			Strategy string `json:"strategy"`
		} `json:"conversion"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		AcceptedNames crdNames `json:"acceptedNames"`
	} `json:"status"`
}

type crdNames struct {
	Plural     string   `json:"plural"`
	Singular   string   `json:"singular"`
	ShortNames []string `json:"shortNames"`
	Kind       string   `json:"kind"`
	ListKind   string   `json:"listKind"`
	Categories []string `json:"categories"`
}

type columnJSON struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Format      string `json:"format"`
	Description string `json:"description"`
	Priority    int32  `json:"priority"`
	JSONPath    string `json:"jsonPath"`
	JSONPathV1b string `json:"JSONPath"`
}

// subresourcesJSON is a CRD's spec.subresources (v1beta1) or
// spec.versions[].subresources.
type subresourcesJSON struct {
	Status *struct{} `json:"status"`
	Scale  *struct {
		SpecReplicasPath   string `json:"specReplicasPath"`
		StatusReplicasPath string `json:"statusReplicasPath"`
		LabelSelectorPath  string `json:"labelSelectorPath"`
	} `json:"scale"`
}

func (s *subresourcesJSON) apply(v *crdVersion) {
	if s == nil {
		return
	}
	v.status = s.Status != nil
	if sc := s.Scale; sc != nil {
		v.scale = &ScalePaths{SpecReplicas: sc.SpecReplicasPath, StatusReplicas: sc.StatusReplicasPath, LabelSelector: sc.LabelSelectorPath}
	}
}

type selectableField struct {
	JSONPath string `json:"jsonPath"`
}

var errProtobufCRD = errors.New("CRD is stored as protobuf; kube-apiserver stores CRDs as JSON and lazyapi reads only JSON")

// parseCRD decodes a stored CustomResourceDefinition. It returns (nil, nil)
// for a CRD that kube-apiserver would not serve: not Established, or without
// a served version.
func parseCRD(value []byte) (*crd, error) {
	if bytes.HasPrefix(value, []byte("k8s\x00")) {
		return nil, errProtobufCRD
	}
	var in crdJSON
	if err := json.Unmarshal(value, &in); err != nil {
		return nil, fmt.Errorf("cannot decode CRD JSON: %w", err)
	}
	established := false
	for _, c := range in.Status.Conditions {
		if c.Type == "Established" && c.Status == "True" {
			established = true
		}
	}
	if !established {
		return nil, nil
	}
	// kube-apiserver serves a CRD under its accepted names.
	names := in.Status.AcceptedNames
	if names.Plural == "" {
		names = in.Spec.Names
	}
	if in.Spec.Group == "" || names.Plural == "" || names.Kind == "" {
		return nil, fmt.Errorf("CRD %q has no group, plural or kind", in.Metadata.Name)
	}
	c := &crd{
		name:       in.Metadata.Name,
		group:      in.Spec.Group,
		plural:     names.Plural,
		singular:   names.Singular,
		kind:       names.Kind,
		listKind:   names.ListKind,
		shortNames: names.ShortNames,
		categories: names.Categories,
		namespaced: in.Spec.Scope != "Cluster",
		// apiextensions' defaulting: strategy None when unset.
		noConversion: in.Spec.Conversion == nil || in.Spec.Conversion.Strategy == "" || in.Spec.Conversion.Strategy == "None",
	}
	if c.singular == "" {
		c.singular = strings.ToLower(c.kind)
	}
	if c.listKind == "" {
		c.listKind = c.kind + "List"
	}
	topColumns := columns(in.Spec.AdditionalPrinterColumns)
	topSelectable := selectable(in.Spec.SelectableFields)
	if len(in.Spec.Versions) == 0 && in.Spec.Version != "" {
		c.storageVersion = in.Spec.Version
		c.versions = []crdVersion{{name: in.Spec.Version, columns: topColumns, selectable: topSelectable}}
		in.Spec.Subresources.apply(&c.versions[0])
	}
	specs := make([]crdVersionSpec, len(in.Spec.Versions))
	for i, v := range in.Spec.Versions {
		specs[i] = crdVersionSpec{name: v.Name, served: v.Served, deprecated: v.Deprecated}
	}
	for _, v := range in.Spec.Versions {
		if v.Storage {
			c.storageVersion = v.Name
		}
		if !v.Served {
			continue
		}
		cv := crdVersion{name: v.Name, columns: columns(v.AdditionalPrinterColumns), selectable: selectable(v.SelectableFields)}
		if v.Deprecated {
			// apiextensions-apiserver names the kind of spec.names.
			// A warning that cannot be a header (control characters,
			// refused by CRD validation) is dropped, not the CRD.
			cv.warning, _ = crdWarning(in.Spec.Group, in.Spec.Names.Kind, v.Name, v.DeprecationWarning, specs)
		}
		if cv.columns == nil {
			cv.columns = topColumns
		}
		if cv.selectable == nil {
			cv.selectable = topSelectable
		}
		if v.Subresources != nil {
			v.Subresources.apply(&cv)
		} else {
			in.Spec.Subresources.apply(&cv)
		}
		c.versions = append(c.versions, cv)
	}
	if len(c.versions) == 0 {
		return nil, nil
	}
	if c.storageVersion == "" {
		return nil, fmt.Errorf("CRD %q has no storage version", c.name)
	}
	return c, nil
}

func columns(in []columnJSON) []Column {
	if len(in) == 0 {
		return nil
	}
	out := make([]Column, 0, len(in))
	for _, c := range in {
		p := c.JSONPath
		if p == "" {
			p = c.JSONPathV1b
		}
		out = append(out, Column{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority, JSONPath: p})
	}
	return out
}

func selectable(in []selectableField) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, 0, len(in))
	for _, f := range in {
		out = append(out, strings.TrimPrefix(f.JSONPath, "."))
	}
	return out
}

// StartCRDSync loads the CustomResourceDefinitions stored under
// <prefix>/apiextensions.k8s.io/customresourcedefinitions/ and adds their
// served versions to the table, then keeps the table current from an etcd
// watch in a goroutine that ends with ctx. The load is synchronous: on return
// without error the table has every established CRD and Ready is true. A CRD
// that cannot be decoded is skipped and logged. If the watch breaks or its
// revision is compacted, the CRDs are loaded again and the watch restarts
// after the new load. Call it at most once per Table; CRDSyncDone tells when
// the goroutine has ended.
func (t *Table) StartCRDSync(ctx context.Context, cli *clientv3.Client, prefix string) error {
	keyPrefix := path.Join("/", prefix, crdKeySegment) + "/"
	t.mu.Lock()
	started := t.syncDone != nil
	t.mu.Unlock()
	if started {
		return errors.New("cannot start CRD sync: already started")
	}
	t.ready.Store(false)
	rev, err := t.loadCRDs(ctx, cli, keyPrefix)
	if err != nil {
		return err
	}
	t.ready.Store(true)
	done := make(chan struct{})
	t.mu.Lock()
	t.syncDone = done
	t.mu.Unlock()
	go func() {
		defer close(done)
		t.syncCRDs(ctx, cli, keyPrefix, rev)
	}()
	return nil
}

// loadCRDs reads every CRD at one revision, page by page, replaces the CRDs
// of the table and returns the revision read.
func (t *Table) loadCRDs(ctx context.Context, cli *clientv3.Client, keyPrefix string) (int64, error) {
	crds := map[string]*crd{}
	end := clientv3.GetPrefixRangeEnd(keyPrefix)
	key := keyPrefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(crdPageSize)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			return 0, fmt.Errorf("cannot list CRDs under %q: %w", keyPrefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			t.putCRD(crds, string(kv.Key), kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	t.publishCRDs(crds)
	return rev, nil
}

// putCRD parses a stored CRD into crds, or removes it from crds when it is
// not served or cannot be decoded.
func (t *Table) putCRD(crds map[string]*crd, key string, value []byte) {
	t.mu.Lock()
	decrypt := t.decrypt
	t.mu.Unlock()
	if decrypt != nil {
		plain, err := decrypt(key, value)
		if err != nil {
			t.log.Load().Warn("cannot decrypt CustomResourceDefinition; its resources are not served", zap.String("key", key), zap.Error(err))
			delete(crds, key)
			return
		}
		value = plain
	}
	c, err := parseCRD(value)
	if err != nil {
		t.log.Load().Warn("cannot use CustomResourceDefinition; its resources are not served", zap.String("key", key), zap.Error(err))
	}
	if c == nil {
		delete(crds, key)
		return
	}
	t.mu.Lock()
	build := t.crdDoc
	t.mu.Unlock()
	if build != nil {
		c.doc = build(value)
	}
	crds[key] = c
}

// syncCRDs watches the CRDs from rev+1 and applies each batch of events to
// the table; on a compacted or broken watch it reloads and watches again.
func (t *Table) syncCRDs(ctx context.Context, cli *clientv3.Client, keyPrefix string, rev int64) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := t.watchCRDs(ctx, cli, keyPrefix, rev)
		if ctx.Err() != nil {
			return
		}
		t.log.Load().Warn("CustomResourceDefinition watch ended; reloading", zap.Error(err))
		for {
			rev, err = t.loadCRDs(ctx, cli, keyPrefix)
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			t.log.Load().Warn("cannot reload CustomResourceDefinitions", zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// watchCRDs applies watch events until the watch fails; it never returns nil
// unless ctx is done. Events already waiting are applied together, so that a
// burst of CRD changes (an operator installing fifty CRDs) rebuilds the table
// once rather than fifty times.
func (t *Table) watchCRDs(ctx context.Context, cli *clientv3.Client, keyPrefix string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := cli.Watch(wctx, keyPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		resp, ok := <-wch
		var crds map[string]*crd
		for {
			if !ok {
				t.publishCRDs(crds)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("watch channel closed")
			}
			if resp.CompactRevision != 0 {
				t.publishCRDs(crds)
				return fmt.Errorf("watch from revision %d compacted at %d", rev+1, resp.CompactRevision)
			}
			if err := resp.Err(); err != nil {
				t.publishCRDs(crds)
				return fmt.Errorf("cannot watch CRDs: %w", err)
			}
			if len(resp.Events) > 0 {
				if crds == nil {
					crds = t.copyCRDs()
				}
				for _, ev := range resp.Events {
					key := string(ev.Kv.Key)
					if ev.Type == clientv3.EventTypeDelete {
						delete(crds, key)
						continue
					}
					t.putCRD(crds, key, ev.Kv.Value)
				}
				rev = resp.Header.Revision
			}
			select {
			case resp, ok = <-wch:
				continue
			default:
			}
			break
		}
		t.publishCRDs(crds)
	}
}

// copyCRDs returns a copy of the table's CRDs for a writer to change.
func (t *Table) copyCRDs() map[string]*crd {
	t.mu.Lock()
	defer t.mu.Unlock()
	crds := make(map[string]*crd, len(t.crds)+1)
	for k, c := range t.crds {
		crds[k] = c
	}
	return crds
}

// publishCRDs replaces the table's CRDs and rebuilds it; nil is no change.
// Only the sync goroutine changes the CRDs, so the copy it changed is current.
func (t *Table) publishCRDs(crds map[string]*crd) {
	if crds == nil {
		return
	}
	t.mu.Lock()
	t.crds = crds
	t.rebuildLocked()
	hooks := t.onChange
	t.mu.Unlock()
	for _, fn := range hooks {
		fn()
	}
}
