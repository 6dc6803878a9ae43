package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// aggGroup and aggVersion are the aggregated API the stand-in serves.
const (
	aggGroup   = "widgets.lazyapi.test"
	aggVersion = "v1"
)

// aggregatedStandIn is a small aggregated API server as kube-apiserver's
// aggregation layer reaches one (through an APIService, a Service and an
// EndpointSlice naming it, over TLS): discovery of widgets.lazyapi.test/v1
// (legacy documents: the aggregator falls back to them) and one namespaced
// resource, widgets, with get and list (and watch of a list: one ADDED
// event per item, then the stream held open until the client goes). It
// records the X-Remote-User kube-apiserver's proxy sent with each
// resource request (the caller as kube-apiserver authenticated it).
type aggregatedStandIn struct {
	srv  *httptest.Server
	host string
	port int

	mu    sync.Mutex
	users []string // X-Remote-User of each resource request, in order
}

var aggWidgets = []string{"alpha", "beta"}

func startAggregatedStandIn(t *testing.T, host string) *aggregatedStandIn {
	t.Helper()
	a := &aggregatedStandIn{host: host}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.srv.Listener = ln
	a.srv.StartTLS()
	a.port = ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() {
		a.srv.CloseClientConnections()
		a.srv.Close()
	})
	return a
}

// remoteUsers returns the X-Remote-User of the resource requests so far.
func (a *aggregatedStandIn) remoteUsers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.users...)
}

func widget(ns, name string) map[string]any {
	return map[string]any{"apiVersion": aggGroup + "/" + aggVersion, "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": "7", "uid": "uid-" + name},
		"spec":     map[string]any{"size": len(name)}}
}

func (a *aggregatedStandIn) serve(w http.ResponseWriter, r *http.Request) {
	gv := aggGroup + "/" + aggVersion
	write := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	notFound := func() {
		write(404, map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": "the server could not find the requested resource", "reason": "NotFound", "details": map[string]any{}, "code": 404})
	}
	groupDoc := map[string]any{"name": aggGroup,
		"versions":         []any{map[string]any{"groupVersion": gv, "version": aggVersion}},
		"preferredVersion": map[string]any{"groupVersion": gv, "version": aggVersion}}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/apis":
		write(200, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{groupDoc}})
		return
	case "/apis/" + aggGroup:
		doc := map[string]any{"kind": "APIGroup", "apiVersion": "v1"}
		for k, v := range groupDoc {
			doc[k] = v
		}
		write(200, doc)
		return
	case "/apis/" + gv:
		write(200, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
			"resources": []any{map[string]any{"name": "widgets", "singularName": "widget", "namespaced": true,
				"kind": "Widget", "verbs": []string{"get", "list", "watch"}, "shortNames": []string{"wd"}}}})
		return
	}
	rest, ok := strings.CutPrefix(path, "/apis/"+gv+"/")
	if !ok || r.Method != http.MethodGet {
		notFound()
		return
	}
	a.mu.Lock()
	a.users = append(a.users, r.Header.Get("X-Remote-User"))
	a.mu.Unlock()
	parts := strings.Split(rest, "/")
	ns := ""
	if len(parts) >= 2 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	switch {
	case len(parts) == 1 && parts[0] == "widgets":
		var items []any
		for _, n := range aggWidgets {
			items = append(items, widget(ns, n))
		}
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			for _, it := range items {
				enc.Encode(map[string]any{"type": "ADDED", "object": it})
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		write(200, map[string]any{"kind": "WidgetList", "apiVersion": gv,
			"metadata": map[string]any{"resourceVersion": "7"}, "items": items})
	case len(parts) == 2 && parts[0] == "widgets" && ns != "":
		for _, n := range aggWidgets {
			if n == parts[1] {
				write(200, widget(ns, n))
				return
			}
		}
		write(404, map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": `widgets.` + aggGroup + ` "` + parts[1] + `" not found`, "reason": "NotFound",
			"details": map[string]any{"name": parts[1], "group": aggGroup, "kind": "widgets"}, "code": 404})
	default:
		notFound()
	}
}
