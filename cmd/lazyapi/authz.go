package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/zapr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/klog/v2"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/authz/rbacetcd"
	authzwebhook "github.com/lazyapi/lazyapi/authz/webhook"
	"github.com/lazyapi/lazyapi/encryption"
)

// rbacLoadTimeout bounds the first read of the RBAC objects at start.
const rbacLoadTimeout = 10 * time.Second

// startAuthz builds the --authorization-mode chain; for RBAC it reads the
// RBAC objects from etcd and follows them until stop is called. A nil
// chain (no modes) authorizes nothing: every authenticated request passes.
func startAuthz(ctx context.Context, o *Options, p *parts, lg *zap.Logger) (chain *authz.Chain, stop func(), err error) {
	stop = func() {}
	if len(o.Serving.modes) == 0 {
		return nil, stop, nil
	}
	var modes []authz.Mode
	for _, m := range o.Serving.modes {
		switch m {
		case authz.ModeRBAC:
			rbac := authz.NewRBAC()
			lctx, cancel := context.WithTimeout(ctx, rbacLoadTimeout)
			src, err := rbacetcd.Start(lctx, o.rbacConfig(p, rbac, lg.Named("rbac")))
			cancel()
			if err != nil {
				return nil, nil, fmt.Errorf("cannot read the RBAC objects for --authorization-mode RBAC: %w", err)
			}
			stop = src.Close
			r, cr, rb, crb := rbac.Stats()
			lg.Info("RBAC objects read", zap.Int("roles", r), zap.Int("clusterRoles", cr),
				zap.Int("roleBindings", rb), zap.Int("clusterRoleBindings", crb), zap.Int64("revision", src.Revision()))
			modes = append(modes, authz.Mode{Name: m, Authorizer: rbac})
		case authz.ModeWebhook:
			useKlog(lg)
			cfg, flag := o.authzWebhookConfig(p.metrics)
			w, err := authzwebhook.New(cfg)
			if err != nil {
				stop()
				return nil, nil, fmt.Errorf("%s: %w", flag, err)
			}
			lg.Info("authorization webhook", zap.Duration("authorizedTTL", cfg.AuthorizedTTL),
				zap.Duration("unauthorizedTTL", cfg.UnauthorizedTTL))
			modes = append(modes, authz.Mode{Name: m, Authorizer: w})
		case authz.ModeAlwaysAllow:
			lg.Warn("--authorization-mode AlwaysAllow: every authenticated user may read everything lazyapi serves, Secrets included")
			modes = append(modes, authz.Mode{Name: m, Authorizer: authz.AlwaysAllow{}})
		case authz.ModeAlwaysDeny:
			modes = append(modes, authz.Mode{Name: m, Authorizer: authz.AlwaysDeny{}})
		}
	}
	chain, err = authz.NewChain(modes, p.metrics)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return chain, stop, nil
}

// etcdLookup reads bound objects of service account tokens from etcd
// (serializable reads of the member lazyapi runs beside), decrypted with
// --encryption-provider-config when enc is set.
type etcdLookup struct {
	cli    *clientv3.Client
	prefix string
	enc    *encryption.Transformers
}

func (l etcdLookup) Get(ctx context.Context, key string) ([]byte, bool, error) {
	resp, err := l.cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return nil, false, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	val := resp.Kvs[0].Value
	if l.enc != nil {
		// The resource is the key's first segment after the prefix;
		// nodes are stored under "minions".
		res, _, _ := strings.Cut(strings.TrimPrefix(key, l.prefix+"/"), "/")
		if res == "minions" {
			res = "nodes"
		}
		if val, err = l.enc.Decrypt(ctx, res, resp.Kvs[0].Key, val); err != nil {
			return nil, false, err
		}
	}
	return val, true, nil
}

// useKlog sends k8s.io/apiserver's and client-go's klog output (the
// webhooks' "Failed to make webhook ... request") into lazyapi's JSON log.
// klog's logger is process-wide; openEncryption sets the same.
func useKlog(lg *zap.Logger) {
	klog.SetLogger(zapr.NewLogger(lg.Named("k8s")))
}

// startHint is the command the start-up message suggests. kubectl sends
// no credentials (tokens, client certificates) over plain HTTP, so with
// an authenticator the --port URL answers it 401: the hint then names
// the HTTPS URL, or says that --secure-port is needed.
func startHint(url, secureURL string, authMethods []string) string {
	switch {
	case len(authMethods) == 0 && url == "":
		return fmt.Sprintf("try: kubectl --server %s --certificate-authority=<CA of --tls-cert-file> get configmaps -A\n", secureURL)
	case len(authMethods) == 0:
		return fmt.Sprintf("try: kubectl --server %s get configmaps -A\n", url)
	case secureURL != "":
		return fmt.Sprintf("try: kubectl --server %s --certificate-authority=<CA of --tls-cert-file> --token=<token> get configmaps -A\n", secureURL)
	}
	return fmt.Sprintf("note: authentication is on and kubectl sends no credentials over plain HTTP (%s answers it 401): add --secure-port with --tls-cert-file and --tls-private-key-file\n", url)
}
