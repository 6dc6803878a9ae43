package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
)

func newLimiter(r float64) *rate.Limiter {
	if r <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(r), max(1, int(r/10)))
}

func workers(ctx context.Context, n int, lim *rate.Limiter, fn func(ctx context.Context, w int, r *rand.Rand)) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for ctx.Err() == nil {
				if lim != nil && lim.Wait(ctx) != nil {
					return
				}
				fn(ctx, w, r)
			}
		})
	}
	wg.Wait()
}

func runLists(ctx context.Context, cl *client, s *Scenario, expected int64) error {
	path := s.Kind.Path(s.Namespace)
	workers(ctx, s.Concurrency, newLimiter(s.Rate), func(ctx context.Context, _ int, _ *rand.Rand) {
		cl.listOnce(ctx, s, path, expected)
	})
	return nil
}

// runListFlood runs the lists and, when etcd is known, a GET probe beside
// them (see RunProbe; in its own process with Env.ProbeCommand).
func runListFlood(ctx context.Context, env Env, t Target, cl *client, s *Scenario, expected int64) (*ProbeResult, error) {
	if env.Etcd == nil {
		return nil, runLists(ctx, cl, s, expected)
	}
	names, err := objectNames(ctx, env, s.Kind, s.Namespace, 100000)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = s.Kind.Path(n[0]) + "/" + n[1]
	}
	wait := startProbe(ctx, env, t, cl.accept, paths)
	err = runLists(ctx, cl, s, expected)
	probe, perr := wait()
	if err == nil {
		err = perr
	}
	return probe, err
}

// objectNames returns namespace/name of the kind's objects in etcd (in ns
// when set), at most max.
func objectNames(ctx context.Context, env Env, k Kind, ns string, limit int64) ([][2]string, error) {
	if env.Etcd == nil {
		return nil, errors.New("this scenario needs --etcd-servers to find object names")
	}
	p := strings.TrimSuffix(env.Prefix, "/") + "/" + k.KeyPrefix + "/"
	if ns != "" {
		p += ns + "/"
	}
	resp, err := env.Etcd.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("cannot read keys under %q: %w", p, err)
	}
	var out [][2]string
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), strings.TrimSuffix(env.Prefix, "/")+"/"+k.KeyPrefix+"/")
		ns, name, ok := strings.Cut(rest, "/")
		if ok {
			out = append(out, [2]string{ns, name})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in etcd under %q: seed first", k.Resource, p)
	}
	return out, nil
}

func runGets(ctx context.Context, env Env, cl *client, s *Scenario) error {
	names, err := objectNames(ctx, env, s.Kind, s.Namespace, 100000)
	if err != nil {
		return err
	}
	workers(ctx, s.Concurrency, newLimiter(s.Rate), func(ctx context.Context, _ int, r *rand.Rand) {
		n := names[r.IntN(len(names))]
		p := s.Kind.Path(n[0]) + "/" + n[1]
		if s.ResourceVersion != "" {
			p += "?resourceVersion=" + url.QueryEscape(s.ResourceVersion)
		}
		_, _, _ = cl.get(ctx, p, nil)
	})
	return nil
}

// runMixed: 70% GETs, 20% LISTs of one namespace paged by 500, 10% full
// LISTs of the scenario's scope.
func runMixed(ctx context.Context, env Env, cl *client, s *Scenario, expected int64) error {
	names, err := objectNames(ctx, env, s.Kind, s.Namespace, 100000)
	if err != nil {
		return err
	}
	paged := *s
	paged.Limit = 500
	nsCount := map[string]int64{}
	if s.LabelSelector == "" {
		for _, n := range names {
			nsCount[n[0]]++
		}
	}
	var nss []string
	for ns := range nsCount {
		nss = append(nss, ns)
	}
	workers(ctx, s.Concurrency, newLimiter(s.Rate), func(ctx context.Context, _ int, r *rand.Rand) {
		switch x := r.Float64(); {
		case x < 0.7:
			n := names[r.IntN(len(names))]
			_, _, _ = cl.get(ctx, s.Kind.Path(n[0])+"/"+n[1], nil)
		case x < 0.9 && len(nss) > 0:
			ns := nss[r.IntN(len(nss))]
			want := nsCount[ns]
			if len(names) >= 100000 {
				want = -1
			}
			cl.listOnce(ctx, &paged, s.Kind.Path(ns), want)
		default:
			cl.listOnce(ctx, s, s.Kind.Path(s.Namespace), expected)
		}
	})
	return nil
}
