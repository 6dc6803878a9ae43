package robustness

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// violation is a broken guarantee: the op that shows it, what the model
// expected and what the server answered, and etcd's history of the keys
// involved.
type violation struct {
	Guarantee string   `json:"guarantee"`
	Detail    string   `json:"detail"`
	Op        *op      `json:"op"`
	History   []string `json:"history,omitempty"`
}

func (v violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "guarantee violated: %s\n  %s\n  request: %s %s %s ns=%q name=%q selector=%q format=%s %s (client %s, op %d, %s..%s)\n",
		v.Guarantee, v.Detail, v.Op.Verb, v.Op.Mode, v.Op.Resource, v.Op.Namespace, v.Op.Name, v.Op.Selector, v.Op.Format, v.Op.Query,
		v.Op.Client, v.Op.ID, v.Op.Start.Format(time.TimeOnly+".000"), v.Op.End.Format(time.TimeOnly+".000"))
	fmt.Fprintf(&b, "  acked before it: %d, compacted: %d\n", v.Op.Acked, v.Op.Compacted)
	if len(v.History) > 0 {
		b.WriteString("  etcd's history of the keys involved:\n")
		for _, h := range v.History {
			b.WriteString("    " + h + "\n")
		}
	}
	return b.String()
}

// modelWait bounds the wait for etcd's history to reach a revision an
// answer names: an answer at a revision etcd never reached is a violation.
const modelWait = 30 * time.Second

// validate checks o against the model; nil when it holds.
func (h *harness) validate(o *op) *violation {
	bad := func(guarantee, format string, args ...any) *violation {
		return &violation{Guarantee: guarantee, Detail: fmt.Sprintf(format, args...), Op: o}
	}
	if o.Err != "" {
		if strings.HasPrefix(o.Err, "undecodable") {
			return bad("answers are Kubernetes objects", "%s", o.Err)
		}
		switch {
		case o.Stopped:
			h.stats.count("transport error (the run's end)")
		case o.EndGen != o.Gen || strings.Contains(o.Err, "connection refused"):
			// (Refused: a restarted server that does not listen yet.)
			h.stats.count("transport error (server killed or restarting)")
		default:
			// No SIGKILL while it ran: the server ended the response
			// (a LIST aborted after its first byte, a stalled write)
			// or the client's 60 s timeout. Counted apart.
			h.stats.count(o.Verb + " transport error (server running)")
		}
		return nil
	}
	if o.Code != 0 {
		return h.validateStatus(o, bad)
	}
	sc, err := h.scope(o)
	if err != nil {
		return bad("harness", "%v", err)
	}
	switch o.Verb {
	case "list":
		return h.validateList(o, sc, bad)
	case "get":
		return h.validateGet(o, sc, bad)
	default:
		return h.validateWatch(o, sc, bad)
	}
}

type badFunc func(guarantee, format string, args ...any) *violation

func (h *harness) scope(o *op) (scope, error) {
	var s scope
	for _, k := range kinds {
		if k.Resource == o.Resource {
			s.prefix = kindKeyPrefix(h.prefix, k)
		}
	}
	if o.Namespace != "" {
		s.prefix += o.Namespace + "/"
	}
	if o.Name != "" {
		s.name = s.prefix + o.Name
	}
	if o.Selector != "" {
		sel, err := labels.Parse(o.Selector)
		if err != nil {
			return s, err
		}
		s.sel = sel
	}
	return s, nil
}

// validateStatus: 410 only for a revision etcd really compacted (a LIST's
// Exact revision or continue token, a watch's resourceVersion); 429,
// 503 and 504 are documented refusals (counted); anything else is not.
func (h *harness) validateStatus(o *op, bad badFunc) *violation {
	h.stats.count(fmt.Sprintf("%s %d %s", o.Verb, o.Code, o.Reason))
	switch o.Code {
	case 429, 503, 504:
		return nil
	case 404:
		if o.Verb == "get" {
			sc, _ := h.scope(o)
			// A delete etcd applied while the GET was served makes 404
			// right: the model waits for etcd's revision read just
			// after the answer (EndRev) before it judges.
			if o.EndRev > 0 {
				h.model.waitFor(o.EndRev, timeAfter(modelWait))
			}
			if o.Mode == "rv0" || h.model.absentSince(sc.name, o.Acked, o.EndRev) {
				return nil
			}
			return h.withHistory(bad("a consistent read is at least as new as every acknowledged write",
				"GET answered 404 but the object existed at every revision from %d (acknowledged before the request) to %d (etcd's, read after the answer)", o.Acked, o.EndRev), sc.name, o.Acked)
		}
	case 410:
		rv := o.FromRV
		if o.Verb == "list" && len(o.Pages) > 0 {
			rv = o.Pages[0].RV // an expired continue token
		}
		if rv > 0 && rv < o.Compacted {
			return nil
		}
		return bad("410 Gone only for a compacted revision", "%d %s for revision %d, etcd compacted at %d", o.Code, o.Reason, rv, o.Compacted)
	}
	return bad("no error but the documented ones", "%d %s", o.Code, o.Reason)
}

func (h *harness) validateList(o *op, sc scope, bad badFunc) *violation {
	n := o.Pages[0].RV
	for i, p := range o.Pages {
		if p.RV != n {
			return bad("a paginated LIST is one snapshot", "page %d at revision %d, the first at %d", i, p.RV, n)
		}
	}
	switch o.Mode {
	case "consistent", "paged":
		if n < o.Acked {
			return bad("a consistent read is at least as new as every acknowledged write", "LIST at revision %d, a write was acknowledged at %d before it", n, o.Acked)
		}
	case "exact":
		if n != o.FromRV {
			return bad("an Exact LIST is at its revision", "LIST at revision %d, asked for exactly %d", n, o.FromRV)
		}
	case "notolderthan":
		if n < o.FromRV {
			return bad("a NotOlderThan LIST is not older", "LIST at revision %d, asked for not older than %d", n, o.FromRV)
		}
	}
	if !h.model.waitFor(n, timeAfter(modelWait)) {
		return bad("answers are at revisions etcd had", "LIST at revision %d; etcd's history reached only %d", n, h.model.seen())
	}
	var got []item
	for _, p := range o.Pages {
		got = append(got, p.Items...)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Key <= got[i-1].Key {
			return bad("a LIST is in key order, each object once", "item %d %s after %s", i, got[i].Key, got[i-1].Key)
		}
	}
	want := h.model.state(sc, n)
	if d := diffItems(want, got); d != "" {
		return h.withHistory(bad("a LIST at revision N holds exactly etcd's state at N", "at revision %d: %s", n, d), keysOf(want, got), n)
	}
	return nil
}

func (h *harness) validateGet(o *op, sc scope, bad badFunc) *violation {
	it := *o.Item
	if it.Key != sc.name {
		return bad("a GET returns the object asked for", "asked for %s, got %s", sc.name, it.Key)
	}
	if !h.model.waitFor(it.RV, timeAfter(modelWait)) {
		return bad("answers are at revisions etcd had", "GET of resourceVersion %d; etcd's history reached only %d", it.RV, h.model.seen())
	}
	v, until := h.model.versionOf(it.Key, it.RV)
	if v == nil || v.Write != it.Write {
		return h.withHistory(bad("a GET returns a version etcd stored", "%s at resourceVersion %d (%s) is not a version of the key", it.Key, it.RV, it.Write), it.Key, it.RV)
	}
	if o.Mode == "consistent" && until != 0 && until <= o.Acked {
		return h.withHistory(bad("a consistent read is at least as new as every acknowledged write",
			"GET returned the version at %d, replaced at %d, before the write acknowledged at %d", it.RV, until, o.Acked), it.Key, it.RV)
	}
	return nil
}

func (h *harness) validateWatch(o *op, sc scope, bad badFunc) *violation {
	from := o.FromRV
	evs := o.Events
	if o.Mode == "initial" {
		end := slices.IndexFunc(evs, func(e event) bool { return e.InitialEnd })
		if end < 0 {
			// Ended before its initial events did: only their form is checked.
			for _, e := range evs {
				if e.Type != "ADDED" {
					return bad("initial events are ADDED, then the initial-events-end bookmark", "a %s event before the bookmark", e.Type)
				}
			}
			return nil
		}
		b := evs[end].RV
		if b < o.Acked {
			return bad("a consistent read is at least as new as every acknowledged write", "initial-events-end bookmark at %d, a write was acknowledged at %d before the watch", b, o.Acked)
		}
		if !h.model.waitFor(b, timeAfter(modelWait)) {
			return bad("answers are at revisions etcd had", "initial-events-end bookmark at %d; etcd's history reached only %d", b, h.model.seen())
		}
		var got []item
		for _, e := range evs[:end] {
			if e.Type != "ADDED" {
				return bad("initial events are ADDED, then the initial-events-end bookmark", "a %s event before the bookmark", e.Type)
			}
			got = append(got, item{Key: e.Key, RV: e.RV, Write: e.Write})
		}
		slices.SortFunc(got, func(a, b item) int { return strings.Compare(a.Key, b.Key) })
		want := h.model.state(sc, b)
		if d := diffItems(want, got); d != "" {
			return h.withHistory(bad("initial events equal etcd's state at the bookmark's revision", "at revision %d: %s", b, d), keysOf(want, got), b)
		}
		from, evs = b, evs[end+1:]
	}
	last := from
	var got []event
	for i, e := range evs {
		if e.Type == "BOOKMARK" {
			if e.RV < last {
				return bad("watch events are ordered", "bookmark %d at revision %d after revision %d", i, e.RV, last)
			}
		} else {
			if e.RV <= last {
				return bad("watch events are ordered and unique", "event %d (%s %s) at revision %d after revision %d", i, e.Type, e.Key, e.RV, last)
			}
			got = append(got, event{Type: e.Type, Key: e.Key, RV: e.RV, Write: e.Write})
		}
		last = e.RV
	}
	if last == from {
		return nil
	}
	if !h.model.waitFor(last, timeAfter(modelWait)) {
		return bad("answers are at revisions etcd had", "watch event at %d; etcd's history reached only %d", last, h.model.seen())
	}
	want := h.model.events(sc, from, last)
	h.stats.events.Add(int64(len(got)))
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(got):
			return h.withHistory(bad("a watch misses no change", "expected %s at %d (%s %s), the watch went on to %d without it",
				want[i].Type, want[i].RV, want[i].Key, want[i].Write, last), want[i].Key, want[i].RV)
		case i >= len(want):
			return h.withHistory(bad("a watch reports only etcd's changes", "unexpected %s %s at %d (%s)", got[i].Type, got[i].Key, got[i].RV, got[i].Write), got[i].Key, got[i].RV)
		case got[i] != want[i]:
			k := map[string]bool{got[i].Key: true, want[i].Key: true}
			return h.withHistory(bad("a watch reports every change in order, selector transitions as kube-apiserver does",
				"event %d: got %s %s at %d (%s), etcd's history has %s %s at %d (%s)", i, got[i].Type, got[i].Key, got[i].RV, got[i].Write,
				want[i].Type, want[i].Key, want[i].RV, want[i].Write), k, min(got[i].RV, want[i].RV))
		}
	}
	return nil
}

func timeAfter(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}

// diffItems describes the first differences between want and got (both
// in key order); "" when equal.
func diffItems(want, got []item) string {
	var out []string
	i, j := 0, 0
	for (i < len(want) || j < len(got)) && len(out) < 5 {
		switch {
		case j >= len(got) || (i < len(want) && want[i].Key < got[j].Key):
			out = append(out, fmt.Sprintf("missing %s (rv %d, %s)", want[i].Key, want[i].RV, want[i].Write))
			i++
		case i >= len(want) || got[j].Key < want[i].Key:
			out = append(out, fmt.Sprintf("extra %s (rv %d, %s)", got[j].Key, got[j].RV, got[j].Write))
			j++
		default:
			if want[i] != got[j] {
				out = append(out, fmt.Sprintf("%s: rv %d (%s), etcd has rv %d (%s)", got[j].Key, got[j].RV, got[j].Write, want[i].RV, want[i].Write))
			}
			i++
			j++
		}
	}
	if len(out) > 0 {
		return fmt.Sprintf("%d items, etcd has %d: %s", len(got), len(want), strings.Join(out, "; "))
	}
	return ""
}

// keysOf returns the keys that differ between want and got.
func keysOf(want, got []item) map[string]bool {
	w := map[string]item{}
	for _, it := range want {
		w[it.Key] = it
	}
	keys := map[string]bool{}
	for _, it := range got {
		if w[it.Key] != it {
			keys[it.Key] = true
		}
		delete(w, it.Key)
	}
	for k := range w {
		keys[k] = true
	}
	return keys
}

// withHistory attaches etcd's history of keys (a key or a set) around
// rev: the smallest slice that shows the violation.
func (h *harness) withHistory(v *violation, keys any, rev int64) *violation {
	set := map[string]bool{}
	switch k := keys.(type) {
	case string:
		set[k] = true
	case map[string]bool:
		set = k
	}
	var lo int64 = 1
	if v.Op.FromRV > 0 {
		lo = v.Op.FromRV - 20
	}
	lo = min(lo, rev-20, v.Op.Acked-5)
	cs := h.model.slice(set, lo, max(rev, v.Op.Acked)+20)
	if len(cs) > 30 {
		cs = cs[len(cs)-30:]
	}
	for _, c := range cs {
		v.History = append(v.History, c.String())
	}
	return v
}
