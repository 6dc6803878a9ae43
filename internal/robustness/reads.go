package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/bench"
)

// item is an object a read returned (or the model holds).
type item struct {
	Key   string `json:"key"`
	RV    int64  `json:"rv"`
	Write string `json:"write,omitempty"`
}

// event is a watch event a read returned (or the model expects).
type event struct {
	Type       string `json:"type"`
	Key        string `json:"key,omitempty"`
	RV         int64  `json:"rv"`
	Write      string `json:"write,omitempty"`
	InitialEnd bool   `json:"initialEnd,omitempty"`
}

// page is one LIST response.
type page struct {
	RV       int64  `json:"rv"`
	Items    []item `json:"items"`
	Continue bool   `json:"continue,omitempty"`
}

// op is one client operation against the server under test and what it
// answered: the unit the validators check and the history file records.
type op struct {
	ID        int64     `json:"id"`
	Client    string    `json:"client"`
	Verb      string    `json:"verb"` // list, get, watch
	Mode      string    `json:"mode"` // consistent, rv0, exact, notolderthan, paged, initial, resume
	Resource  string    `json:"resource"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	Selector  string    `json:"selector,omitempty"`
	Format    string    `json:"format"`
	Query     string    `json:"query"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Acked     int64     `json:"acked"`            // highest write acknowledged before the request
	EndRev    int64     `json:"endRev,omitempty"` // etcd's revision read just after a 404 answer
	Compacted int64     `json:"compacted"`        // etcd's compaction revision when the answer came (counting one in flight)
	FromRV    int64     `json:"fromRV,omitempty"`
	Gen       int64     `json:"gen"`               // the server's restarts when the request was sent
	EndGen    int64     `json:"endGen"`            // ... when its answer (or error) came
	Stopped   bool      `json:"stopped,omitempty"` // the run's end cut it off
	FromGen   int64     `json:"fromGen,omitempty"` // ... when FromRV was seen (a resume or a watch after a LIST)
	FromComp  int64     `json:"fromCompacted"`     // etcd's compaction revision when FromRV was seen
	Pages     []page    `json:"pages,omitempty"`
	Item      *item     `json:"item,omitempty"`
	Events    []event   `json:"events,omitempty"`
	Code      int       `json:"code,omitempty"` // HTTP code of an error answer (an ERROR event's for a watch)
	Reason    string    `json:"reason,omitempty"`
	Err       string    `json:"err,omitempty"` // a transport error: no answer
}

// clients are the readers' three client-go clients on one server: dynamic
// (JSON), typed (protobuf; the custom resource has only JSON) and metadata
// (PartialObjectMetadata in protobuf).
type clients struct {
	dyn   dynamic.Interface
	typed kubernetes.Interface
	md    metadata.Interface
}

// Authenticated is a Server whose clients send a bearer token (over
// https, its self-signed certificate not verified: loopback only), as
// kube-apiserver started by bench/kube-apiserver.sh.
type Authenticated interface {
	Token() string
}

func newClients(srv Server) (*clients, error) {
	cfg := &rest.Config{Host: srv.URL(), QPS: -1, Timeout: 60 * time.Second}
	if a, ok := srv.(Authenticated); ok {
		cfg.BearerToken = a.Token()
		cfg.TLSClientConfig.Insecure = true
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	typed, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &clients{dyn: dyn, typed: typed, md: md}, nil
}

var formats = []string{"json", "protobuf", "metadata"}

func gvr(k bench.Kind) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: k.Group, Version: k.Version, Resource: k.Resource}
}

// format returns the format a request in f really uses (the custom
// resource has no protobuf).
func format(k bench.Kind, f string) string {
	if f == "protobuf" && k.Custom {
		return "json"
	}
	return f
}

// proto is a request in protobuf through the typed clients' REST
// client, as their ConfigMaps(ns).List and the like send it.
func (c *clients) proto(k bench.Kind, ns string) *rest.Request {
	return c.typed.CoreV1().RESTClient().Get().Namespace(ns).Resource(k.Resource)
}

func (c *clients) list(ctx context.Context, k bench.Kind, f, ns string, opts metav1.ListOptions) (runtime.Object, error) {
	switch format(k, f) {
	case "metadata":
		return c.md.Resource(gvr(k)).Namespace(ns).List(ctx, opts)
	case "protobuf":
		return c.proto(k, ns).VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Get()
	}
	return c.dyn.Resource(gvr(k)).Namespace(ns).List(ctx, opts)
}

func (c *clients) get(ctx context.Context, k bench.Kind, f, ns, name string, opts metav1.GetOptions) (runtime.Object, error) {
	switch format(k, f) {
	case "metadata":
		return c.md.Resource(gvr(k)).Namespace(ns).Get(ctx, name, opts)
	case "protobuf":
		return c.proto(k, ns).Name(name).VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Get()
	}
	return c.dyn.Resource(gvr(k)).Namespace(ns).Get(ctx, name, opts)
}

func (c *clients) watch(ctx context.Context, k bench.Kind, f, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	switch format(k, f) {
	case "metadata":
		return c.md.Resource(gvr(k)).Namespace(ns).Watch(ctx, opts)
	case "protobuf":
		opts.Watch = true
		return c.proto(k, ns).VersionedParams(&opts, scheme.ParameterCodec).Watch(ctx)
	}
	return c.dyn.Resource(gvr(k)).Namespace(ns).Watch(ctx, opts)
}

// toItem returns the object's key and resourceVersion.
func toItem(prefix string, k bench.Kind, obj runtime.Object) (item, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return item{}, err
	}
	rv, err := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
	if err != nil {
		return item{}, fmt.Errorf("object %s/%s: resourceVersion %q: %w", acc.GetNamespace(), acc.GetName(), acc.GetResourceVersion(), err)
	}
	return item{Key: kindKeyPrefix(prefix, k) + acc.GetNamespace() + "/" + acc.GetName(), RV: rv, Write: acc.GetAnnotations()[writeAnnotation]}, nil
}

// toPage returns a LIST answer's revision, items and continue token.
func toPage(prefix string, k bench.Kind, obj runtime.Object) (page, string, error) {
	la, err := meta.ListAccessor(obj)
	if err != nil {
		return page{}, "", err
	}
	rv, err := strconv.ParseInt(la.GetResourceVersion(), 10, 64)
	if err != nil {
		return page{}, "", fmt.Errorf("list resourceVersion %q: %w", la.GetResourceVersion(), err)
	}
	p := page{RV: rv, Continue: la.GetContinue() != "", Items: []item{}}
	err = meta.EachListItem(obj, func(o runtime.Object) error {
		it, err := toItem(prefix, k, o)
		p.Items = append(p.Items, it)
		return err
	})
	return p, la.GetContinue(), err
}

// setErr records an error answer: its HTTP code and reason when it is a
// Status, else a transport error.
func (o *op) setErr(err error) {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		o.Code = int(st.Status().Code)
		o.Reason = string(st.Status().Reason)
		if o.Code == 0 {
			o.Err = err.Error()
		}
		return
	}
	o.Err = err.Error()
}

// client is one of the harness's concurrent readers or watchers.
type client struct {
	h   *harness
	id  int
	rng *rand.Rand
}

// target draws what a request reads: a kind, a format, and a namespace,
// or every namespace ("") one time in all.
func (c *client) target(all int) (bench.Kind, string, string) {
	k := kinds[c.rng.IntN(len(kinds))]
	f := formats[c.rng.IntN(len(formats))]
	ns := namespaces[c.rng.IntN(len(namespaces))]
	if c.rng.IntN(all) == 0 {
		ns = ""
	}
	return k, f, ns
}

// reader runs LISTs and GETs of every kind, mode and format.
type reader struct{ client }

func (r *reader) run(ctx context.Context) {
	for ctx.Err() == nil {
		k, f, ns := r.target(4)
		sel := ""
		if r.rng.IntN(3) == 0 {
			sel = "tier=" + tiers[r.rng.IntN(len(tiers))]
		}
		o := &op{ID: r.h.nextID(), Client: "reader" + strconv.Itoa(r.id), Resource: k.Resource, Namespace: ns, Selector: sel, Format: format(k, f)}
		switch roll := r.rng.IntN(10); {
		case roll < 3:
			r.listOnce(ctx, k, o, "consistent", 0, 0)
		case roll < 5:
			r.listOnce(ctx, k, o, "rv0", 0, 0)
		case roll < 6:
			r.listOnce(ctx, k, o, "exact", r.rng.Int64N(300), 0)
		case roll < 7:
			r.listOnce(ctx, k, o, "notolderthan", r.rng.Int64N(50), 0)
		case roll < 8:
			r.listOnce(ctx, k, o, "paged", 0, int64(1+r.rng.IntN(6)))
		default:
			if ns == "" {
				ns = namespaces[0]
				o.Namespace = ns
			}
			o.Selector = ""
			r.getOnce(ctx, k, o, fmt.Sprintf("obj-%02d", r.rng.IntN(namesPerNamespace)), r.rng.IntN(3) == 0)
		}
		r.h.record(o)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(r.rng.IntN(30)) * time.Millisecond): // the traffic's pace
		}
	}
}

// listOnce runs a LIST in mode (back is how far behind the model's
// revision an exact or notolderthan revision is, limit the page size)
// and follows continue tokens.
func (r *reader) listOnce(ctx context.Context, k bench.Kind, o *op, mode string, back, limit int64) {
	o.Verb, o.Mode = "list", mode
	opts := metav1.ListOptions{LabelSelector: o.Selector, Limit: limit}
	switch mode {
	case "rv0":
		opts.ResourceVersion = "0"
	case "exact", "notolderthan":
		rv := max(r.h.model.seen()-back, 1)
		o.FromRV = rv
		opts.ResourceVersion = strconv.FormatInt(rv, 10)
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchExact
		if mode == "notolderthan" {
			opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
	}
	o.Query = fmt.Sprintf("%+v", opts)
	o.Acked, o.Gen = r.h.acked.rev.Load(), r.h.gen.Load()
	o.Start = time.Now()
	defer func() {
		o.End, o.EndGen, o.Stopped = time.Now(), r.h.gen.Load(), ctx.Err() != nil
		o.Compacted = r.h.compacted.Load()
	}()
	for {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		obj, err := r.h.clients.list(cctx, k, o.Format, o.Namespace, opts)
		cancel()
		if err != nil {
			o.setErr(err)
			return
		}
		p, cont, err := toPage(r.h.prefix, k, obj)
		if err != nil {
			o.Err = "undecodable answer: " + err.Error()
			return
		}
		o.Pages = append(o.Pages, p)
		if cont == "" || len(o.Pages) > 1000 {
			return
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = cont, "", ""
	}
}

func (r *reader) getOnce(ctx context.Context, k bench.Kind, o *op, name string, rv0 bool) {
	o.Verb, o.Name, o.Mode = "get", name, "consistent"
	opts := metav1.GetOptions{}
	if rv0 {
		o.Mode, opts.ResourceVersion = "rv0", "0"
	}
	o.Query = fmt.Sprintf("%+v", opts)
	o.Acked, o.Gen = r.h.acked.rev.Load(), r.h.gen.Load()
	o.Start = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	obj, err := r.h.clients.get(cctx, k, o.Format, o.Namespace, name, opts)
	cancel()
	o.End, o.EndGen, o.Stopped, o.Compacted = time.Now(), r.h.gen.Load(), ctx.Err() != nil, r.h.compacted.Load()
	if err != nil {
		o.setErr(err)
		if o.Code == 404 {
			// etcd's revision now bounds the one the server read at.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if resp, err := r.h.cli.Get(cctx, "compact_rev_key"); err == nil {
				o.EndRev = resp.Header.Revision
			}
			cancel()
		}
		return
	}
	it, err := toItem(r.h.prefix, k, obj)
	if err != nil {
		o.Err = "undecodable answer: " + err.Error()
		return
	}
	o.Item = &it
}
