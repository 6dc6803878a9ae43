package audit_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/lazyapi/lazyapi/audit"
)

// BenchmarkWrite measures the writer's throughput: events of a typical
// size (a namespaced GET by a service account, ~700 bytes of JSON)
// emitted and written to a file, waiting for the last; ns/op is the cost
// per event, 1e9/ns-op the rate above which events are dropped.
func BenchmarkWrite(b *testing.B) {
	ms := metrics.NewSet()
	l, err := audit.New(audit.Config{Path: filepath.Join(b.TempDir(), "audit.log"), Metrics: ms, MaxSize: 0})
	if err != nil {
		b.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for l.Queued() > 8<<20 {
			time.Sleep(time.Millisecond) // the benchmark waits for the writer instead of dropping
		}
		l.Emit(&auditv1.Event{Level: auditv1.LevelMetadata, AuditID: "0b5c6a8e-5d2f-4b1e-9a44-3f1b2c3d4e5f", Stage: auditv1.StageResponseComplete,
			RequestURI: "/api/v1/namespaces/team-a/secrets/allowed-secret", Verb: "get",
			User:      authnv1.UserInfo{Username: "system:serviceaccount:team-a:reader", UID: "4f9e0c1a-1111-2222-3333-444455556666", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"}},
			SourceIPs: []string{"10.0.3.17"}, UserAgent: "kubectl/v1.37.2 (linux/amd64) kubernetes/abcdef0",
			ObjectRef:      &auditv1.ObjectReference{Resource: "secrets", Namespace: "team-a", Name: "allowed-secret", APIVersion: "v1"},
			ResponseStatus: &metav1.Status{Code: 200}, RequestReceivedTimestamp: now, StageTimestamp: now,
			Annotations: map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": `RBAC: allowed by RoleBinding "reader/team-a" of Role "secret-reader" to ServiceAccount "reader/team-a"`}})
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	if d := ms.GetOrCreateCounter("lazyapi_audit_events_dropped_total").Get(); d > 0 {
		b.Fatalf("%d events dropped", d)
	}
}
