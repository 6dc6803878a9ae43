package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/audit"
	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// serveAPI starts, in order, the decryption, the resource table (built-ins,
// then CRDs from etcd), the watch cache, authorization, authentication, the
// audit log and the HTTP server; serves until ctx ends, drains, and stops
// them in reverse order. secureLn, when not nil, is the --secure-port TLS
// listener. It reads as the start order: the configurations come from o.
func serveAPI(ctx context.Context, o *Options, p *parts, ln, secureLn net.Listener, lg *zap.Logger, stdout io.Writer) error {
	// 4. Encryption at rest (KMS connections closed last): CRDs, RBAC
	// objects and every served value may be encrypted.
	enc, err := o.openEncryption(lg.Named("encryption"), p.metrics)
	if err != nil {
		return err
	}
	if enc != nil {
		defer enc.Close()
	}
	p.enc = enc

	// 4a. Resource table. The CRD watch runs until the server has drained.
	stopSync, err := startResources(ctx, o, p, lg)
	if err != nil || stopSync == nil {
		return err // nil: stopped while starting
	}
	defer stopSync()

	// 5. Watch cache (closed after the server has drained).
	if o.WatchCache.enabled {
		wc, err := cache.New(o.cacheConfig(p.cli, p, lg.Named("cache")))
		if err != nil {
			return fmt.Errorf("cannot create the watch cache: %w", err)
		}
		defer closeCache(wc, lg)
		p.cache = wc
	}

	// 5b. Authorization (RBAC follows etcd until the server has drained).
	authorizer, stopAuthz, err := startAuthz(ctx, o, p, lg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopAuthz()
	p.authorizer = authorizer

	// 5c. Authentication; certificate files are re-read while serving.
	stopCerts, err := startAuthn(ctx, o, p, lg)
	if err != nil {
		return err
	}
	defer stopCerts()

	// 5d. Audit log (closed after the server has drained).
	if cfg, ok := o.auditConfig(lg.Named("audit"), p.metrics); ok {
		al, err := audit.New(cfg)
		if err != nil {
			return usageErrorf("--audit-log-path: cannot use %q: %v", cfg.Path, err)
		}
		defer closeAudit(al, lg)
		p.audit = al
	}

	// 5e. Forwarding to kube-apiserver (idle upstream connections closed
	// after the server has drained).
	if cfg, ok := o.forwardConfig(lg.Named("forward"), p.metrics); ok {
		fwd, err := forward.New(cfg)
		if err != nil {
			return fmt.Errorf("--upstream-kubeconfig: %w", err)
		}
		defer fwd.Close()
		p.forward = fwd
	}

	// 6. HTTP server.
	srv, err := proxy.New(o.proxyConfig(p, lg.Named("proxy")))
	if err != nil {
		return fmt.Errorf("cannot create the HTTP server: %w", err)
	}
	preloadCache(o, p, srv, lg)
	return runServer(ctx, o, p, srv, ln, secureLn, lg, stdout)
}

// startAuthn sets p.authn; the certificate files it reads are re-read
// while serving, until stop.
func startAuthn(ctx context.Context, o *Options, p *parts, lg *zap.Logger) (stop func(), err error) {
	acfg, err := o.authnConfig(p, lg)
	if err != nil {
		return nil, err
	}
	p.authn = authn.New(acfg)
	o.Serving.watchFiles(p.certs, p.authn)
	if p.certs.Len() == 0 {
		return func() {}, nil
	}
	certCtx, stopCerts := context.WithCancel(ctx)
	go p.certs.Run(certCtx)
	return stopCerts, nil
}

// preloadCache warms before the storm: a restarted lazyapi fills the
// caches of --watch-cache-preload before the informers that re-watch them
// arrive.
func preloadCache(o *Options, p *parts, srv *proxy.Server, lg *zap.Logger) {
	if p.cache == nil || len(o.WatchCache.preload) == 0 {
		return
	}
	n := srv.PreloadCache(o.WatchCache.preloadFilter())
	lg.Info("watch cache filling at start", zap.Int("resources", n), zap.Strings("preload", o.WatchCache.preload))
}

// startResources fills p.resources (built-ins, then the CRDs in etcd, with
// their OpenAPI documents in p.openAPI) and follows the CRDs until stop. It
// returns nil, nil when ctx ended while it read.
func startResources(ctx context.Context, o *Options, p *parts, lg *zap.Logger) (stop func(), err error) {
	res := resource.NewBuiltin()
	res.SetLogger(lg.Named("resource"))
	res.SetDecrypt(decryptFor(p.enc, "customresourcedefinitions.apiextensions.k8s.io"))
	// Before the CRDs are loaded, so that each gets its OpenAPI documents.
	p.openAPI = proxy.NewOpenAPI(res)
	syncCtx, stopSync := context.WithCancel(context.Background())
	if err := res.StartCRDSync(syncCtx, p.cli, o.Etcd.prefix); err != nil {
		stopSync()
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot load CustomResourceDefinitions from etcd: %w", err)
	}
	p.resources = res
	return stopSync, nil
}

func closeCache(wc *cache.Cache, lg *zap.Logger) {
	if err := wc.Close(); err != nil {
		lg.Warn("cannot close the watch cache", zap.Error(err))
	}
	lg.Debug("watch cache closed")
}

func closeAudit(al *audit.Log, lg *zap.Logger) {
	if err := al.Close(); err != nil {
		lg.Warn("cannot close the audit log", zap.Error(err))
	}
}

// runServer serves on ln and secureLn, announces where, and when ctx ends
// drains in-flight requests for at most --request-timeout.
func runServer(ctx context.Context, o *Options, p *parts, srv *proxy.Server, ln, secureLn net.Listener, lg *zap.Logger, stdout io.Writer) error {
	served := make(chan error, 1)
	secureServed := make(chan error, 1)
	if ln != nil {
		go func() { served <- srv.Serve(ln) }()
	}
	if secureLn != nil {
		go func() { secureServed <- srv.Serve(secureLn) }()
	}
	bound := announce(o, p, ln, secureLn, lg, stdout)

	select {
	case <-ctx.Done():
	case err := <-served:
		// Serve ends on its own only when the listener fails.
		return fmt.Errorf("cannot serve on %s: %w", bound, err)
	case err := <-secureServed:
		return fmt.Errorf("cannot serve on %s (--secure-port): %w", secureLn.Addr(), err)
	}

	// Stop: stop accepting, end watches, drain in-flight requests for at
	// most --request-timeout, then let the deferred stops run (watch cache,
	// CRD watch, etcd client, embedded etcd).
	timeout := o.Serving.requestTimeout
	lg.Info("shutting down: draining in-flight requests", zap.Duration("timeout", timeout))
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		lg.Warn("drain incomplete: cut the requests still running", zap.Error(err))
	}
	if ln != nil {
		if err := <-served; err != nil {
			lg.Warn("server stopped with an error", zap.Error(err))
		}
	}
	if secureLn != nil {
		if err := <-secureServed; err != nil {
			lg.Warn("TLS server stopped with an error", zap.Error(err))
		}
	}
	lg.Info("stopped serving")
	return nil
}

// announce logs and prints where lazyapi serves (the start-up banner and
// hint) and warns about risky settings. It returns the address the
// resource table reports as the server's.
func announce(o *Options, p *parts, ln, secureLn net.Listener, lg *zap.Logger, stdout io.Writer) (bound string) {
	s := &o.Serving
	var fields []zap.Field
	url, secureURL := "", ""
	if ln != nil {
		bound = ln.Addr().String()
		url = "http://" + clientAddress(ln.Addr().(*net.TCPAddr))
		fields = append(fields, zap.String("address", bound), zap.String("url", url))
		if s.authenticated() {
			mode := "refused (--plain-port-tokens=false)"
			if s.plainTokens {
				mode = "bearer tokens accepted in clear text (--plain-port-tokens)"
			}
			fields = append(fields, zap.String("plainPortCredentials", mode))
			if !s.bindAddress.IsLoopback() {
				lg.Warn("--port serves plain HTTP beyond loopback with authentication on: anyone on the path reads what it sends; prefer --port=0 and --secure-port")
			}
		}
	} else {
		fields = append(fields, zap.String("plainPort", "off (--port=0, the default with an authenticator)"))
	}
	if secureLn != nil {
		if bad := s.insecureSuites(); len(bad) > 0 {
			lg.Warn("--tls-cipher-suites names cipher suites crypto/tls calls insecure", zap.Strings("suites", bad))
		}
		secureURL = "https://" + clientAddress(secureLn.Addr().(*net.TCPAddr))
		fields = append(fields, zap.String("secureAddress", secureLn.Addr().String()), zap.String("secureURL", secureURL))
		fmt.Fprintf(stdout, "lazyapi: serving the Kubernetes read API over TLS on %s\n", secureURL)
		if bound == "" {
			bound = secureLn.Addr().String()
		}
	}
	p.resources.SetServerAddress(bound)
	if p.audit != nil {
		fields = append(fields, zap.String("auditLog", o.Audit.path))
	}
	if m := s.authMethods(); len(m) > 0 {
		fields = append(fields, zap.Strings("authentication", m))
	} else if !s.bindAddress.IsLoopback() {
		lg.Warn("serving without authentication beyond loopback: anyone who reaches --bind-address can read everything, Secrets included (see --client-ca-file, --token-auth-file)")
	}
	if p.forward != nil {
		fields = append(fields, zap.String("mode", "forwarding"), zap.String("upstream", p.forward.Upstream()))
	} else {
		fields = append(fields, zap.String("mode", "read-only"))
	}
	lg.Info("serving", fields...)
	if url != "" {
		fmt.Fprintf(stdout, "lazyapi: serving the Kubernetes read API on %s\n", url)
	}
	fmt.Fprint(stdout, banner(o, url, secureURL, p.cli.Endpoints()))
	fmt.Fprint(stdout, startHint(url, secureURL, s.authMethods()))
	return bound
}

// clientAddress returns the host:port a local client uses to reach a listener
// bound to a: loopback for the unspecified address.
func clientAddress(a *net.TCPAddr) string {
	ip := a.IP
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

// etcdMoved is f.Moved, or nil without --etcd-preferred-server.
func etcdMoved(f *store.Failover) func() (uint64, <-chan struct{}) {
	if f == nil {
		return nil
	}
	return f.Moved
}

// etcdFailoverStatus is f.Status, or nil without --etcd-preferred-server.
func etcdFailoverStatus(f *store.Failover) func() store.FailoverStatus {
	if f == nil {
		return nil
	}
	return f.Status
}
