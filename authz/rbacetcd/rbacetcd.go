// Package rbacetcd keeps an authz.RBAC current with the Roles,
// ClusterRoles, RoleBindings and ClusterRoleBindings stored in etcd: it
// reads them once at one revision, then follows one etcd watch per kind
// and rebuilds the authorizer's index after every batch of changes.
package rbacetcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/codec"
)

// Config configures a Source.
type Config struct {
	// Client reads etcd. Required.
	Client *clientv3.Client
	// Prefix is --etcd-prefix; "" means "/registry".
	Prefix string
	// RBAC receives the objects. Required.
	RBAC *authz.RBAC
	// Decrypt, when set, turns an encrypted stored value ("k8s:enc:...")
	// into the plain one; key is its etcd key. Nil: encrypted RBAC
	// objects are skipped with an error log.
	Decrypt func(key string, value []byte) ([]byte, error)
	// Logger logs decode and watch errors; nil discards.
	Logger *zap.Logger
	// Metrics receives lazyapi_rbac_objects{kind},
	// lazyapi_rbac_rebuilds_total and lazyapi_rbac_decode_errors_total;
	// nil creates a private set.
	Metrics *metrics.Set
}

// kinds are the four RBAC resources, in the order of their etcd prefixes.
var kinds = [4]string{"roles", "clusterroles", "rolebindings", "clusterrolebindings"}

// Source follows the RBAC objects in etcd. Create it with Start; Close
// stops it. It is safe for concurrent use.
type Source struct {
	cfg    Config
	prefix string
	log    *zap.Logger

	// objs holds the current decoded objects per kind, by etcd key;
	// only the run goroutine touches them.
	roles, clusterRoles       map[string]authz.Role
	bindings, clusterBindings map[string]authz.Binding

	rebuilds, decodeErrs *metrics.Counter

	mu  sync.Mutex
	rev int64 // revision of the last applied change; guarded by mu

	cancel context.CancelFunc
	done   chan struct{}
}

// Start reads the RBAC objects (failing when etcd does not answer within
// ctx), hands them to cfg.RBAC, and follows changes until Close.
func Start(ctx context.Context, cfg Config) (*Source, error) {
	if cfg.Client == nil || cfg.RBAC == nil {
		return nil, errors.New("rbacetcd: Config.Client and Config.RBAC are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/registry"
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	s := &Source{
		cfg:        cfg,
		prefix:     "/" + strings.Trim(cfg.Prefix, "/") + "/",
		log:        cfg.Logger,
		rebuilds:   cfg.Metrics.GetOrCreateCounter("lazyapi_rbac_rebuilds_total"),
		decodeErrs: cfg.Metrics.GetOrCreateCounter("lazyapi_rbac_decode_errors_total"),
		done:       make(chan struct{}),
	}
	for _, k := range kinds {
		k := k
		cfg.Metrics.GetOrCreateGauge(`lazyapi_rbac_objects{kind="`+k+`"}`, func() float64 {
			r, cr, rb, crb := s.cfg.RBAC.Stats()
			return float64(map[string]int{"roles": r, "clusterroles": cr, "rolebindings": rb, "clusterrolebindings": crb}[k])
		})
	}
	rev, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(rctx, rev)
	return s, nil
}

// Close stops following etcd and waits for the watch goroutine.
func (s *Source) Close() {
	s.cancel()
	<-s.done
}

// Revision returns the etcd revision of the RBAC objects in effect: every
// RBAC write at or before it is applied.
func (s *Source) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

func (s *Source) kindPrefix(k string) string { return s.prefix + k + "/" }

// load reads every RBAC object at one revision and installs them.
func (s *Source) load(ctx context.Context) (int64, error) {
	s.roles, s.clusterRoles = map[string]authz.Role{}, map[string]authz.Role{}
	s.bindings, s.clusterBindings = map[string]authz.Binding{}, map[string]authz.Binding{}
	var rev int64
	for _, k := range kinds {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cfg.Client.Get(ctx, s.kindPrefix(k), opts...)
		if err != nil {
			return 0, fmt.Errorf("cannot read %s from etcd: %w", k, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			s.put(k, string(kv.Key), kv.Value)
		}
	}
	s.install(rev)
	return rev, nil
}

// run watches the four prefixes from rev+1, applies each batch of events
// and rebuilds; after a watch failure (compaction, etcd restart) it reads
// everything again.
func (s *Source) run(ctx context.Context, rev int64) {
	defer close(s.done)
	for ctx.Err() == nil {
		err := s.watch(ctx, rev)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("RBAC watch ended; reading the RBAC objects again", zap.Error(err))
		for ctx.Err() == nil {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			rev, err = s.load(lctx)
			cancel()
			if err == nil {
				break
			}
			s.log.Warn("cannot read the RBAC objects; the previous ones stay in effect", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// watch follows the prefixes from rev+1 until an error.
func (s *Source) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	type batch struct {
		kind string
		resp clientv3.WatchResponse
	}
	ch := make(chan batch)
	for _, k := range kinds {
		wch := s.cfg.Client.Watch(wctx, s.kindPrefix(k), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
		go func() {
			for resp := range wch {
				select {
				case ch <- batch{k, resp}:
				case <-wctx.Done():
					return
				}
			}
			select {
			case ch <- batch{kind: k, resp: clientv3.WatchResponse{Canceled: true}}:
			case <-wctx.Done():
			}
		}()
	}
	for {
		var b batch
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b = <-ch:
		}
		if err := b.resp.Err(); err != nil {
			return err
		}
		if b.resp.Canceled {
			return fmt.Errorf("watch of %s closed", b.kind)
		}
		if len(b.resp.Events) == 0 {
			continue
		}
		for _, ev := range b.resp.Events {
			key := string(ev.Kv.Key)
			if ev.Type == mvccpb.DELETE {
				s.del(b.kind, key)
				continue
			}
			s.put(b.kind, key, ev.Kv.Value)
		}
		s.install(b.resp.Header.Revision)
	}
}

// install rebuilds the authorizer's index from the current objects.
func (s *Source) install(rev int64) {
	objs := &authz.Objects{}
	for _, r := range s.roles {
		objs.Roles = append(objs.Roles, r)
	}
	for _, r := range s.clusterRoles {
		objs.ClusterRoles = append(objs.ClusterRoles, r)
	}
	for _, b := range s.bindings {
		objs.RoleBindings = append(objs.RoleBindings, b)
	}
	for _, b := range s.clusterBindings {
		objs.ClusterRoleBindings = append(objs.ClusterRoleBindings, b)
	}
	s.cfg.RBAC.Replace(objs)
	s.rebuilds.Inc()
	s.mu.Lock()
	if rev > s.rev {
		s.rev = rev
	}
	s.mu.Unlock()
}

func (s *Source) del(kind, key string) {
	switch kind {
	case "roles":
		delete(s.roles, key)
	case "clusterroles":
		delete(s.clusterRoles, key)
	case "rolebindings":
		delete(s.bindings, key)
	case "clusterrolebindings":
		delete(s.clusterBindings, key)
	}
}

// put decodes a stored value and records it; a value that does not
// decode removes the key's previous object (it no longer grants anything
// lazyapi can read) and is logged without its content.
func (s *Source) put(kind, key string, value []byte) {
	if err := s.decodePut(kind, key, value); err != nil {
		s.decodeErrs.Inc()
		s.del(kind, key)
		s.log.Error("cannot decode RBAC object; it grants nothing until it decodes", zap.String("key", key), zap.Error(err))
	}
}

func (s *Source) decodePut(kind, key string, value []byte) error {
	obj, err := codec.Unwrap(value)
	if errors.Is(err, codec.ErrEncrypted) && s.cfg.Decrypt != nil {
		var plain []byte
		if plain, err = s.cfg.Decrypt(key, value); err == nil {
			obj, err = codec.Unwrap(plain)
		}
	}
	if err != nil {
		return err
	}
	unmarshal := func(pb interface{ Unmarshal([]byte) error }, v any) error {
		if obj.Format == codec.FormatProtobuf {
			return pb.Unmarshal(obj.Raw)
		}
		return json.Unmarshal(obj.Raw, v)
	}
	switch kind {
	case "roles", "clusterroles":
		var meta rbacObject
		var rules []rbacv1.PolicyRule
		if kind == "roles" {
			var r rbacv1.Role
			if err := unmarshal(&r, &r); err != nil {
				return err
			}
			meta, rules = rbacObject{r.Namespace, r.Name}, r.Rules
		} else {
			var r rbacv1.ClusterRole
			if err := unmarshal(&r, &r); err != nil {
				return err
			}
			meta, rules = rbacObject{"", r.Name}, r.Rules
		}
		role := authz.Role{Namespace: meta.ns, Name: meta.name, Rules: convertRules(rules)}
		if kind == "roles" {
			s.roles[key] = role
		} else {
			s.clusterRoles[key] = role
		}
	case "rolebindings", "clusterrolebindings":
		var b authz.Binding
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		if kind == "rolebindings" {
			var r rbacv1.RoleBinding
			if err := unmarshal(&r, &r); err != nil {
				return err
			}
			b.Namespace, b.Name, ref, subjects = r.Namespace, r.Name, r.RoleRef, r.Subjects
		} else {
			var r rbacv1.ClusterRoleBinding
			if err := unmarshal(&r, &r); err != nil {
				return err
			}
			b.Name, ref, subjects = r.Name, r.RoleRef, r.Subjects
		}
		b.RoleRef = authz.RoleRef{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
		b.Subjects = make([]authz.Subject, len(subjects))
		for i, sub := range subjects {
			b.Subjects[i] = authz.Subject{Kind: sub.Kind, APIGroup: sub.APIGroup, Name: sub.Name, Namespace: sub.Namespace}
		}
		if kind == "rolebindings" {
			s.bindings[key] = b
		} else {
			s.clusterBindings[key] = b
		}
	}
	return nil
}

type rbacObject struct{ ns, name string }

func convertRules(rules []rbacv1.PolicyRule) []authz.PolicyRule {
	out := make([]authz.PolicyRule, len(rules))
	for i, r := range rules {
		out[i] = authz.PolicyRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources,
			ResourceNames: r.ResourceNames, NonResourceURLs: r.NonResourceURLs}
	}
	return out
}
