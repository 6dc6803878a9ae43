package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	kaudit "k8s.io/apiserver/pkg/audit"

	"github.com/lazyapi/lazyapi/audit"
	"github.com/lazyapi/lazyapi/proxy"
)

// TestAuditEvents: with an audit log, an allowed, a forbidden, an
// impersonated and an unauthenticated request each produce one
// audit.k8s.io/v1 Event, a watch two (ResponseStarted, ResponseComplete at
// its end; a refused watch both at once), every authenticated request a
// RequestReceived event before them (the requestor's, without
// impersonated user: kube-apiserver logs it before impersonation),
// (decoded strictly with kube-apiserver's audit
// scheme) with kube-apiserver's fields at level Metadata; health probes
// produce none, and no token reaches the file.
func TestAuditEvents(t *testing.T) {
	ms := metrics.NewSet()
	path := filepath.Join(t.TempDir(), "audit.log")
	al, err := audit.New(audit.Config{Path: path, Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, withRBAC(t, ms), func(c *proxy.Config) { c.Audit = al })
	e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}})
	do := func(uri, token string, hdr ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", e.url+uri, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", "audit-test/1.0")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		return resp.StatusCode, resp.Header.Get("Audit-Id")
	}
	type want struct {
		uri, token  string
		hdr         []string
		code        int
		stage       auditv1.Stage
		verb, user  string
		impersonate string
		decision    string
	}
	cases := []want{
		{uri: "/api/v1/namespaces/ns/configmaps/cm", token: "token-20", code: 200, stage: auditv1.StageResponseComplete, verb: "get", user: "root", decision: "allow"},
		{uri: "/api/v1/namespaces/zz-none/secrets", token: "token-00", code: 403, stage: auditv1.StageResponseComplete, verb: "list", user: "alice", decision: "forbid"},
		{uri: "/api/v1/namespaces/zz-none/secrets/s1", token: "token-20", hdr: []string{"Impersonate-User", "nobody"}, code: 403,
			stage: auditv1.StageResponseComplete, verb: "get", user: "root", impersonate: "nobody", decision: "forbid"},
		{uri: "/api/v1/namespaces/ns/secrets?labelSelector=a%3Db", token: "wrong-token", code: 401, stage: auditv1.StageResponseStarted, verb: "list"},
		{uri: "/api/v1/namespaces/ns/configmaps?watch=1&timeoutSeconds=1", token: "token-20", code: 200, stage: auditv1.StageResponseStarted, verb: "watch", user: "root", decision: "allow"},
		// Refused: ResponseStarted and ResponseComplete at once (checked apart).
		{uri: "/api/v1/namespaces/zz-none/secrets?watch=1", token: "token-00", code: 403, stage: auditv1.StageResponseStarted, verb: "watch", user: "alice", decision: "forbid"},
	}
	// Every authenticated request also has a RequestReceived event
	// (the default policy omits no stage), the refused watch two events.
	const received = 5
	ids := map[string]bool{}
	for _, c := range cases {
		code, id := do(c.uri, c.token, c.hdr...)
		if code != c.code || id == "" {
			t.Fatalf("GET %s: %d, Audit-Id %q; want %d and an Audit-Id", c.uri, code, id, c.code)
		}
		ids[id] = true
	}
	if code, _ := do("/livez", ""); code != 200 {
		t.Fatalf("/livez: %d", code)
	}
	// The watch's ResponseComplete is logged when its stream has ended,
	// just after its client saw the end.
	waitFor(t, "the audit events written", func() error {
		if n, _ := metricValue(ms, "lazyapi_audit_events_total"); int(n) != len(cases)+2+received {
			return fmt.Errorf("%v events written, want %d", n, len(cases)+2+received)
		}
		return nil
	})
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"token-20", "token-00", "wrong-token"} {
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("the audit log holds the token %q", secret)
		}
	}
	dec := serializer.NewCodecFactory(kaudit.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var events, rr []*auditv1.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		obj, gvk, err := dec.Decode(sc.Bytes(), nil, nil)
		if err != nil {
			t.Fatalf("event %s does not decode strictly: %v", sc.Bytes(), err)
		}
		ev, ok := obj.(*auditv1.Event)
		if !ok {
			t.Fatalf("decoded a %s (%T), want audit.k8s.io/v1 Event", gvk, obj)
		}
		if ev.Stage == auditv1.StageRequestReceived {
			rr = append(rr, ev)
			continue
		}
		events = append(events, ev)
	}
	if len(events) != len(cases)+2 || len(rr) != received {
		t.Fatalf("%d events and %d RequestReceived, want %d (two for each watch, none for /livez) and %d:\n%s", len(events), len(rr), len(cases)+2, received, data)
	}
	if started, done := events[4], events[5]; done.Stage != auditv1.StageResponseComplete || done.AuditID != started.AuditID ||
		done.Verb != "watch" || done.ResponseStatus.Code != 200 || done.StageTimestamp.Before(&started.StageTimestamp) {
		t.Errorf("the watch's ResponseComplete: %+v\nafter %+v", done, started)
	}
	// RequestReceived: the requestor, no impersonated user, decision or
	// response, the ID of the request's later events.
	for i, ev := range rr {
		if ev.User.Username == "" || ev.ImpersonatedUser != nil || ev.ResponseStatus != nil || len(ev.Annotations) != 0 ||
			!ids[string(ev.AuditID)] || ev.ObjectRef == nil || ev.Verb == "" || ev.Level != auditv1.LevelMetadata {
			t.Errorf("RequestReceived event %d: %+v", i, ev)
		}
	}
	if rr[2].User.Username != "root" || rr[2].Verb != "get" || !strings.Contains(rr[2].RequestURI, "/secrets/s1") {
		t.Errorf("the impersonated request's RequestReceived event: %+v, want root's", rr[2])
	}
	if started, done := events[6], events[7]; started.Stage != auditv1.StageResponseStarted || done.Stage != auditv1.StageResponseComplete ||
		started.AuditID != done.AuditID || started.ResponseStatus.Code != 403 || done.ResponseStatus.Code != 403 || done.Verb != "watch" {
		t.Errorf("the refused watch's events: %+v\n%+v; want ResponseStarted and ResponseComplete, 403", started, done)
	}
	for i, c := range cases[:len(cases)-1] {
		ev := events[i]
		if ev.Level != auditv1.LevelMetadata || ev.Stage != c.stage || ev.RequestURI != c.uri || ev.Verb != c.verb ||
			ev.User.Username != c.user || ev.ResponseStatus == nil || int(ev.ResponseStatus.Code) != c.code ||
			ev.UserAgent != "audit-test/1.0" || len(ev.SourceIPs) != 1 || ev.SourceIPs[0] != "127.0.0.1" || !ids[string(ev.AuditID)] ||
			ev.RequestReceivedTimestamp.IsZero() || ev.StageTimestamp.Before(&ev.RequestReceivedTimestamp) {
			t.Errorf("event %d (GET %s): %+v\nwant level Metadata, stage %s, verb %s, user %q, code %d, user agent, source IP, audit ID, timestamps",
				i, c.uri, ev, c.stage, c.verb, c.user, c.code)
		}
		if got := ev.Annotations["authorization.k8s.io/decision"]; got != c.decision {
			t.Errorf("event %d (GET %s): decision %q, want %q", i, c.uri, got, c.decision)
		}
		if _, ok := ev.Annotations["authorization.k8s.io/reason"]; ok != (c.decision != "") {
			t.Errorf("event %d (GET %s): annotations %v: authorization reason present %v, want %v", i, c.uri, ev.Annotations, ok, c.decision != "")
		}
		if c.impersonate != "" && (ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != c.impersonate) {
			t.Errorf("event %d (GET %s): impersonatedUser %+v, want %s", i, c.uri, ev.ImpersonatedUser, c.impersonate)
		}
		if c.user == "root" && !slices.Contains(ev.User.Groups, "system:masters") {
			t.Errorf("event %d: user groups %v, want system:masters", i, ev.User.Groups)
		}
		ref := ev.ObjectRef
		wantNS := strings.Split(c.uri, "/")[4]
		if ref == nil || ref.APIVersion != "v1" || ref.APIGroup != "" || ref.Namespace != wantNS ||
			(ref.Resource != "configmaps" && ref.Resource != "secrets") {
			t.Errorf("event %d (GET %s): objectRef %+v", i, c.uri, ref)
		}
	}
	if ref := events[0].ObjectRef; ref.Name != "cm" {
		t.Errorf("allowed GET: objectRef.name %q, want cm", ref.Name)
	}
	if st := events[1].ResponseStatus; st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, `User "alice" cannot list resource "secrets"`) {
		t.Errorf("forbidden: responseStatus %+v", st)
	}
	if st := events[3].ResponseStatus; st.Message != "Authentication failed, attempted: bearer" {
		t.Errorf("unauthenticated: responseStatus %+v", st)
	}
}
