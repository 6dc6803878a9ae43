package bench

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

func TestRunScenariosAgainstRefServer(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	cm, _ := LookupKind("configmap")
	if _, err := Seed(ctx, srv.Client, SeedConfig{Kind: cm, Count: 40, Namespaces: 2, Size: SizeDist{Kind: "fixed", Size: 2048}}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(NewRefServer(srv.Client, "/registry"))
	t.Cleanup(hs.Close)
	target := Target{Name: "reference", URL: hs.URL, PID: os.Getpid()}
	env := Env{Etcd: srv.Client}

	tests := []struct {
		name  string
		s     Scenario
		check func(t *testing.T, r Result)
	}{
		{"list full json", Scenario{Name: ScenarioList, Kind: cm, Concurrency: 2, Duration: 700 * time.Millisecond, Accept: "json", Idle: 250 * time.Millisecond},
			func(t *testing.T, r Result) {
				if r.ExpectedItems != 40 {
					t.Errorf("expected items %d, want 40", r.ExpectedItems)
				}
				if r.Lists == 0 || r.Complete != r.Lists || r.Incomplete != 0 {
					t.Errorf("lists %d complete %d incomplete %d; want all complete (%s)", r.Lists, r.Complete, r.Incomplete, r.FirstError)
				}
				if r.Latency.Count != r.Requests || r.TTFB.Count == 0 || r.Bytes < r.Requests*40*2048 {
					t.Errorf("latency count %d ttfb %d bytes %d for %d requests", r.Latency.Count, r.TTFB.Count, r.Bytes, r.Requests)
				}
				if len(r.Memory) < 3 || r.IdleRSS == 0 || r.PeakRSS == 0 {
					t.Errorf("memory samples %d idle %d peak %d; want samples", len(r.Memory), r.IdleRSS, r.PeakRSS)
				}
			}},
		{"list paged protobuf one namespace", Scenario{Name: ScenarioList, Kind: cm, Namespace: NamespaceName(DefaultNamespacePrefix, 1), Limit: 7, Concurrency: 1, Duration: 400 * time.Millisecond, Accept: "protobuf"},
			func(t *testing.T, r Result) {
				if r.ExpectedItems != 20 || r.Lists == 0 || r.Complete != r.Lists {
					t.Errorf("expected %d lists %d complete %d (%s); want 20 items, all complete", r.ExpectedItems, r.Lists, r.Complete, r.FirstError)
				}
				if r.Requests < r.Lists*3 {
					t.Errorf("%d requests for %d paged lists of 20 by 7", r.Requests, r.Lists)
				}
			}},
		{"get", Scenario{Name: ScenarioGet, Kind: cm, Concurrency: 2, Duration: 300 * time.Millisecond, Accept: "protobuf"},
			func(t *testing.T, r Result) {
				if r.Requests == 0 || r.StatusCodes["200"] != r.Requests {
					t.Errorf("get: %d requests, codes %v; want all 200", r.Requests, r.StatusCodes)
				}
			}},
		{"mixed with selector", Scenario{Name: ScenarioMixed, Kind: cm, Concurrency: 2, Duration: 400 * time.Millisecond, Accept: "json", LabelSelector: GroupLabel + "=g3"},
			func(t *testing.T, r Result) {
				if r.Requests == 0 || r.StatusCodes["200"] != r.Requests || r.Complete != r.Lists {
					t.Errorf("mixed: %d requests, codes %v, lists %d complete %d", r.Requests, r.StatusCodes, r.Lists, r.Complete)
				}
			}},
		// 3 s: the scenario's duration includes the watchers' opening
		// (a -race CI run at load 12 opened none within 600 ms: no writes).
		{"watch", Scenario{Name: ScenarioWatch, Kind: cm, Concurrency: 2, Rate: 20, Duration: 3 * time.Second, Accept: "json"},
			func(t *testing.T, r Result) {
				w := r.Watch
				if w == nil || w.Writes == 0 || w.Received != w.Expected || w.Latency.Count != w.Received {
					t.Fatalf("watch result %+v (%s); want every write delivered to both watchers", w, r.FirstError)
				}
			}},
		{"informers", Scenario{Name: ScenarioInformers, Kind: cm, Concurrency: 2, Duration: 5 * time.Second, Accept: "protobuf"},
			func(t *testing.T, r Result) {
				if r.Informers == nil || r.Informers.Synced != 2 || r.Informers.Complete != 2 {
					t.Errorf("informers %+v; want 2 synced with 40 items", r.Informers)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := RunScenario(ctx, env, target, tt.s)
			if err != nil {
				t.Fatalf("RunScenario: %v", err)
			}
			if r.Errors != 0 {
				t.Errorf("%d errors: %s (codes %v)", r.Errors, r.FirstError, r.StatusCodes)
			}
			tt.check(t, r)
		})
	}
	// The watch scenario removes what it wrote.
	if n, _, err := CountObjects(ctx, srv.Client, "", cm, ""); err != nil || n != 40 {
		t.Errorf("after the watch scenario etcd holds %d configmaps (%v), want 40", n, err)
	}
}
