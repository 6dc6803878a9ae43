package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// RefServer is a reference Kubernetes read API for the kinds in Kinds. Per
// request it does what kube-apiserver does without a watch cache: read the
// etcd range, decode every stored object with apimachinery, build the list
// object, and encode it as JSON or protobuf. It stands in for kube-apiserver
// where that cannot be built; it serves GET, LIST (limit, continue,
// labelSelector) and WATCH (resourceVersion, sendInitialEvents), plus
// /healthz and /metrics (process_resident_memory_bytes). It is safe for
// concurrent use.
type RefServer struct {
	cli    *clientv3.Client
	prefix string
	proto  *protobuf.Serializer
	json   *jsonserializer.Serializer
}

var _ http.Handler = (*RefServer)(nil)

// NewRefServer returns a reference server reading cli under prefix ("" is
// /registry).
func NewRefServer(cli *clientv3.Client, prefix string) *RefServer {
	if prefix == "" {
		prefix = "/registry"
	}
	return &RefServer{
		cli:    cli,
		prefix: strings.TrimSuffix(prefix, "/"),
		proto:  protobuf.NewSerializer(scheme.Scheme, scheme.Scheme),
		json:   jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, jsonserializer.SerializerOptions{}),
	}
}

type refRequest struct {
	kind      Kind
	namespace string
	name      string
}

// route parses /api/v1[/namespaces/NS]/RES[/NAME] and the /apis form.
func route(path string) (refRequest, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group, version string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, version, parts = parts[1], parts[2], parts[3:]
	default:
		return refRequest{}, false
	}
	var r refRequest
	if len(parts) >= 3 && parts[0] == "namespaces" {
		r.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 2 {
		return r, false
	}
	k, ok := LookupKind(parts[0])
	if !ok || k.Resource != parts[0] || k.Group != group || k.Version != version {
		return r, false
	}
	r.kind = k
	if len(parts) == 2 {
		r.name = parts[1]
	}
	return r, true
}

func (s *RefServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/livez":
		_, _ = w.Write([]byte("ok"))
		return
	case "/metrics":
		rss, err := ProcRSS(os.Getpid())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %d\n", rss)
		return
	}
	if r.Method != http.MethodGet {
		s.status(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "only GET is served")
		return
	}
	req, ok := route(r.URL.Path)
	if !ok {
		s.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
		return
	}
	accept := r.Header.Get("Accept")
	if strings.Contains(accept, "as=Table") || strings.Contains(accept, "as=PartialObjectMetadata") {
		s.status(w, http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, "the reference server serves only JSON and protobuf")
		return
	}
	proto := strings.Contains(accept, "application/vnd.kubernetes.protobuf") && !req.kind.Custom
	q := r.URL.Query()
	switch {
	case req.name != "":
		s.get(w, r.Context(), req, proto)
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		s.watch(w, r, req, proto)
	default:
		s.list(w, r, req, proto)
	}
}

func (s *RefServer) status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	}
	b, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func (s *RefServer) collectionKey(req refRequest) string {
	k := s.prefix + "/" + req.kind.KeyPrefix + "/"
	if req.namespace != "" {
		k += req.namespace + "/"
	}
	return k
}

// decode turns stored bytes into an object with its resourceVersion set.
func (s *RefServer) decode(k Kind, val []byte, rv int64) (runtime.Object, error) {
	var obj runtime.Object
	if k.Custom {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(val); err != nil {
			return nil, fmt.Errorf("cannot decode custom resource: %w", err)
		}
		obj = u
	} else {
		var err error
		if bytes.HasPrefix(val, protoMagic) {
			obj, _, err = s.proto.Decode(val, nil, nil)
		} else {
			obj, _, err = s.json.Decode(val, nil, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot decode stored object: %w", err)
		}
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	acc.SetResourceVersion(strconv.FormatInt(rv, 10))
	return obj, nil
}

func (s *RefServer) gvk(k Kind, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: kind}
}

func (s *RefServer) kindName(k Kind) string { return k.ObjectKind }

func mustNew(k Kind) runtime.Object {
	obj, err := scheme.Scheme.New(schema.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.ObjectKind})
	if err != nil {
		panic("BUG: no type for kind " + k.Name)
	}
	return obj
}

func (s *RefServer) encode(w http.ResponseWriter, obj runtime.Object, proto bool, code int) {
	var buf bytes.Buffer
	var err error
	if proto {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		err = s.proto.Encode(obj, &buf)
	} else {
		w.Header().Set("Content-Type", "application/json")
		err = s.json.Encode(obj, &buf)
	}
	if err != nil {
		s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "cannot encode: "+err.Error())
		return
	}
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (s *RefServer) get(w http.ResponseWriter, ctx context.Context, req refRequest, proto bool) {
	key := s.collectionKey(req) + req.name
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	if len(resp.Kvs) == 0 {
		res := req.kind.Resource
		if req.kind.Group != "" {
			res += "." + req.kind.Group
		}
		s.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("%s %q not found", res, req.name))
		return
	}
	obj, err := s.decode(req.kind, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(s.gvk(req.kind, s.kindName(req.kind)))
	s.encode(w, obj, proto, http.StatusOK)
}

type continueToken struct {
	V     string `json:"v"`
	RV    int64  `json:"rv"`
	Start string `json:"start"`
}

func (s *RefServer) list(w http.ResponseWriter, r *http.Request, req refRequest, proto bool) {
	q := r.URL.Query()
	prefix := s.collectionKey(req)
	start := prefix
	var rev int64
	if c := q.Get("continue"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		var tok continueToken
		if err == nil {
			err = json.Unmarshal(raw, &tok)
		}
		if err != nil || tok.V != "meta.k8s.io/v1" || tok.RV <= 0 || strings.Contains(tok.Start, "..") {
			s.status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "continue key is not valid")
			return
		}
		rev = tok.RV
		start = prefix + strings.TrimPrefix(tok.Start, "/")
	}
	sel := labels.Everything()
	if ls := q.Get("labelSelector"); ls != "" {
		var err error
		if sel, err = labels.Parse(ls); err != nil {
			s.status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
	}
	limit, _ := strconv.ParseInt(q.Get("limit"), 10, 64)
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(limit+1))
	}
	resp, err := s.cli.Get(r.Context(), start, opts...)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return
		}
		code, reason := http.StatusInternalServerError, metav1.StatusReasonInternalError
		if strings.Contains(err.Error(), "compacted") {
			code, reason = http.StatusGone, metav1.StatusReasonExpired
		}
		s.status(w, code, reason, err.Error())
		return
	}
	if rev == 0 {
		rev = resp.Header.Revision
	}
	kvs := resp.Kvs
	more := limit > 0 && int64(len(kvs)) > limit
	if more {
		kvs = kvs[:limit]
	}
	items := make([]runtime.Object, 0, len(kvs))
	for _, kv := range kvs {
		obj, err := s.decode(req.kind, kv.Value, kv.ModRevision)
		if err != nil {
			s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
			return
		}
		acc, _ := meta.Accessor(obj)
		if !sel.Matches(labels.Set(acc.GetLabels())) {
			continue
		}
		if !req.kind.Custom {
			obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		}
		items = append(items, obj)
	}
	var list runtime.Object
	if req.kind.Custom {
		ul := &unstructured.UnstructuredList{Object: map[string]any{}}
		ul.SetAPIVersion(CRGroup + "/" + CRVersion)
		ul.SetKind(CRListKind)
		list = ul
	} else {
		gvk := s.gvk(req.kind, s.kindName(req.kind)+"List")
		l, err := scheme.Scheme.New(gvk)
		if err != nil {
			s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
			return
		}
		l.GetObjectKind().SetGroupVersionKind(gvk)
		list = l
	}
	if err := meta.SetList(list, items); err != nil {
		s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	lacc, err := meta.ListAccessor(list)
	if err != nil {
		s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	lacc.SetResourceVersion(strconv.FormatInt(rev, 10))
	if more {
		last := string(kvs[len(kvs)-1].Key)
		tok, _ := json.Marshal(continueToken{V: "meta.k8s.io/v1", RV: rev, Start: strings.TrimPrefix(last, strings.TrimSuffix(prefix, "/")) + "\x00"})
		lacc.SetContinue(base64.RawURLEncoding.EncodeToString(tok))
		if q.Get("labelSelector") == "" {
			remaining := s.remaining(r.Context(), last, prefix, rev)
			lacc.SetRemainingItemCount(&remaining)
		}
	}
	s.encode(w, list, proto, http.StatusOK)
}

func (s *RefServer) remaining(ctx context.Context, last, prefix string, rev int64) int64 {
	resp, err := s.cli.Get(ctx, last+"\x00", clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithRev(rev), clientv3.WithCountOnly())
	if err != nil {
		return 0
	}
	return resp.Count
}

// watch streams events of req's collection. resourceVersion "" or "0", or
// sendInitialEvents=true, first sends the current objects as ADDED (the
// latter ending with an initial-events-end BOOKMARK).
func (s *RefServer) watch(w http.ResponseWriter, r *http.Request, req refRequest, proto bool) {
	q := r.URL.Query()
	ctx := r.Context()
	if ts, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && ts > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ts)*time.Second)
		defer cancel()
	}
	sel := labels.Everything()
	if ls := q.Get("labelSelector"); ls != "" {
		var err error
		if sel, err = labels.Parse(ls); err != nil {
			s.status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
	}
	prefix := s.collectionKey(req)
	rvParam := q.Get("resourceVersion")
	initial := q.Get("sendInitialEvents") == "true" || rvParam == "" || rvParam == "0"
	var rev int64
	var initialKVs []*kvPair
	if initial {
		resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			s.status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
			return
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			initialKVs = append(initialKVs, &kvPair{val: kv.Value, rev: kv.ModRevision})
		}
	} else {
		var err error
		if rev, err = strconv.ParseInt(rvParam, 10, 64); err != nil {
			s.status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "invalid resourceVersion")
			return
		}
	}
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	if proto {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush() // the client sees the headers before the first event
	}
	send := func(typ string, obj runtime.Object) bool {
		obj.GetObjectKind().SetGroupVersionKind(s.gvk(req.kind, s.kindName(req.kind)))
		var buf bytes.Buffer
		if proto {
			if err := s.proto.Encode(obj, &buf); err != nil {
				return false
			}
			ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: buf.Bytes()}}
			b, err := ev.Marshal()
			if err != nil {
				return false
			}
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
			if _, err := w.Write(hdr[:]); err != nil {
				return false
			}
			if _, err := w.Write(b); err != nil {
				return false
			}
		} else {
			if err := s.json.Encode(obj, &buf); err != nil {
				return false
			}
			objJSON := bytes.TrimSpace(buf.Bytes())
			line := make([]byte, 0, len(objJSON)+40)
			line = append(line, `{"type":"`...)
			line = append(line, typ...)
			line = append(line, `","object":`...)
			line = append(line, objJSON...)
			line = append(line, "}\n"...)
			if _, err := w.Write(line); err != nil {
				return false
			}
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	matches := func(obj runtime.Object) bool {
		acc, err := meta.Accessor(obj)
		return err == nil && sel.Matches(labels.Set(acc.GetLabels()))
	}
	for _, kv := range initialKVs {
		obj, err := s.decode(req.kind, kv.val, kv.rev)
		if err != nil || !matches(obj) {
			continue
		}
		if !send("ADDED", obj) {
			return
		}
	}
	if q.Get("sendInitialEvents") == "true" {
		var bm runtime.Object
		if req.kind.Custom {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			bm = u
		} else {
			bm = mustNew(req.kind)
		}
		acc, _ := meta.Accessor(bm)
		acc.SetResourceVersion(strconv.FormatInt(rev, 10))
		acc.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		if !send("BOOKMARK", bm) {
			return
		}
	}
	for wr := range wch {
		if err := wr.Err(); err != nil {
			st := &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonExpired, Code: http.StatusGone}
			st.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Status"})
			if !proto {
				b, _ := json.Marshal(st)
				_, _ = fmt.Fprintf(w, `{"type":"ERROR","object":%s}`+"\n", b)
			}
			return
		}
		for _, ev := range wr.Events {
			typ, val := "ADDED", ev.Kv.Value
			switch {
			case ev.Type == clientv3.EventTypeDelete:
				if ev.PrevKv == nil {
					continue
				}
				typ, val = "DELETED", ev.PrevKv.Value
			case !ev.IsCreate():
				typ = "MODIFIED"
			}
			obj, err := s.decode(req.kind, val, ev.Kv.ModRevision)
			if err != nil || !matches(obj) {
				continue
			}
			if !send(typ, obj) {
				return
			}
		}
	}
}

type kvPair struct {
	val []byte
	rev int64
}
