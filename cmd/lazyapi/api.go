package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// serveAPI starts the resource table (built-ins, then CRDs from etcd), the
// watch cache and the HTTP server, serves until ctx ends, drains, and stops
// them in reverse order.
// secureLn, when not nil, is the --secure-port TLS listener.
func serveAPI(ctx context.Context, c *config, pt parts, cli *clientv3.Client, ln, secureLn net.Listener, lg *zap.Logger, stdout io.Writer) error {
	// 4. Encryption at rest (KMS connections closed last): CRDs, RBAC
	// objects and every served value may be encrypted.
	enc, err := c.encryption.open(lg.Named("encryption"), pt.metrics)
	if err != nil {
		return err
	}
	if enc != nil {
		defer enc.Close()
	}
	pt.enc = enc

	// 4a. Resource table. The CRD watch runs until the server has drained.
	res := resource.NewBuiltin()
	res.SetLogger(lg.Named("resource"))
	res.SetDecrypt(decryptFor(enc, "customresourcedefinitions.apiextensions.k8s.io"))
	// Before the CRDs are loaded, so that each gets its OpenAPI documents.
	oapi := proxy.NewOpenAPI(res)
	syncCtx, stopSync := context.WithCancel(context.Background())
	defer stopSync()
	if err := res.StartCRDSync(syncCtx, cli, c.etcdPrefix); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("cannot load CustomResourceDefinitions from etcd: %w", err)
	}

	// 5. Watch cache (closed after the server has drained).
	var wc *cache.Cache
	if c.watchCache {
		var err error
		wc, err = cache.New(cache.Config{
			Client:        cli,
			Logger:        lg.Named("cache"),
			Metrics:       pt.metrics,
			MemoryBytes:   c.cacheBytes,
			Sizes:         c.cacheSizes,
			Decrypt:       cacheDecrypt(enc),
			HoldDecrypted: c.encryption.cacheDecrypted,
			EtcdMoved:     etcdMoved(pt.failover),
			Filled:        returnFillMemory(lg.Named("cache"), fillMemoryMinBytes(c.cacheBytes)),
		})
		if err != nil {
			return fmt.Errorf("cannot create the watch cache: %w", err)
		}
		defer func() {
			if err := wc.Close(); err != nil {
				lg.Warn("cannot close the watch cache", zap.Error(err))
			}
			lg.Debug("watch cache closed")
		}()
	}

	// 5b. Authorization (RBAC follows etcd until the server has drained).
	authorizer, stopAuthz, err := startAuthz(ctx, c, pt, cli, lg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopAuthz()

	acfg, err := authnConfig(c, cli, enc, pt.metrics, lg)
	if err != nil {
		return err
	}

	// 5c. Audit log (closed after the server has drained).
	al, err := c.audit.open(lg.Named("audit"), pt.metrics)
	if err != nil {
		return err
	}
	if al != nil {
		defer func() {
			if err := al.Close(); err != nil {
				lg.Warn("cannot close the audit log", zap.Error(err))
			}
		}()
	}

	// 6. HTTP server; certificate files are re-read while it serves.
	au := authn.New(acfg)
	c.serving.watchFiles(pt.certs, au)
	if pt.certs.Len() > 0 {
		certCtx, stopCerts := context.WithCancel(ctx)
		defer stopCerts()
		go pt.certs.Run(certCtx)
	}
	// 5d. Forwarding to kube-apiserver (idle upstream connections closed
	// after the server has drained).
	fwd, err := c.forward.open(lg.Named("forward"), pt.metrics, c.writeTimeout)
	if err != nil {
		return fmt.Errorf("cannot forward to kube-apiserver (--upstream-kubeconfig): %w", err)
	}
	if fwd != nil {
		defer fwd.Close()
	}
	srv, err := proxy.New(proxy.Config{
		Store: store.New(cli, store.Config{Prefix: c.etcdPrefix, PageSize: c.listPageSize, PageBytes: c.listPageBytes,
			Metrics: pt.metrics}),
		RequestTimeout:     c.requestTimeout,
		WriteTimeout:       c.writeTimeout,
		DisableCompression: !c.compression,
		Resources:          res,
		Logger:             lg.Named("proxy"),
		Metrics:            pt.metrics,
		Limiter:            pt.limiter,
		Cache:              wc,
		Authenticator:      au,
		Profiling:          c.profiling,
		OpenAPI:            oapi,
		Authorizer:         authorizer,
		Encryption:         enc,
		CacheDecrypted:     c.encryption.cacheDecrypted,
		EtcdFailover:       etcdFailoverStatus(pt.failover),
		Audit:              al,
		Forward:            fwd,
	})
	if err != nil {
		return fmt.Errorf("cannot create the HTTP server: %w", err)
	}
	if wc != nil && len(c.cachePreload) > 0 {
		// Warm before the storm: a restarted lazyapi fills the caches its
		// informers will re-watch before they arrive.
		n := srv.PreloadCache(c.preloadFilter())
		lg.Info("watch cache filling at start", zap.Int("resources", n), zap.Strings("preload", c.cachePreload))
	}
	served := make(chan error, 1)
	secureServed := make(chan error, 1)
	var fields []zap.Field
	url, secureURL, bound := "", "", ""
	if ln != nil {
		bound = ln.Addr().String()
		go func() { served <- srv.Serve(ln) }()
		url = "http://" + clientAddress(ln.Addr().(*net.TCPAddr))
		fields = append(fields, zap.String("address", bound), zap.String("url", url))
		if c.serving.authenticated() {
			mode := "refused (--plain-port-tokens=false)"
			if c.plainTokens {
				mode = "bearer tokens accepted in clear text (--plain-port-tokens)"
			}
			fields = append(fields, zap.String("plainPortCredentials", mode))
			if !c.bindAddress.IsLoopback() {
				lg.Warn("--port serves plain HTTP beyond loopback with authentication on: anyone on the path reads what it sends; prefer --port=0 and --secure-port")
			}
		}
	} else {
		fields = append(fields, zap.String("plainPort", "off (--port=0, the default with an authenticator)"))
	}
	if secureLn != nil {
		if bad := c.serving.insecureSuites(); len(bad) > 0 {
			lg.Warn("--tls-cipher-suites names cipher suites crypto/tls calls insecure", zap.Strings("suites", bad))
		}
		go func() { secureServed <- srv.Serve(secureLn) }()
		secureURL = "https://" + clientAddress(secureLn.Addr().(*net.TCPAddr))
		fields = append(fields, zap.String("secureAddress", secureLn.Addr().String()), zap.String("secureURL", secureURL))
		fmt.Fprintf(stdout, "lazyapi: serving the Kubernetes read API over TLS on %s\n", secureURL)
		if bound == "" {
			bound = secureLn.Addr().String()
		}
	}
	res.SetServerAddress(bound)
	if al != nil {
		fields = append(fields, zap.String("auditLog", c.audit.path))
	}
	if m := c.serving.authMethods(); len(m) > 0 {
		fields = append(fields, zap.Strings("authentication", m))
	} else if !c.bindAddress.IsLoopback() {
		lg.Warn("serving without authentication beyond loopback: anyone who reaches --bind-address can read everything, Secrets included (see --client-ca-file, --token-auth-file)")
	}
	if fwd != nil {
		fields = append(fields, zap.String("mode", "forwarding"), zap.String("upstream", fwd.Upstream()))
	} else {
		fields = append(fields, zap.String("mode", "read-only"))
	}
	lg.Info("serving", fields...)
	if url != "" {
		fmt.Fprintf(stdout, "lazyapi: serving the Kubernetes read API on %s\n", url)
	}
	fmt.Fprint(stdout, banner(c, url, secureURL, cli.Endpoints()))
	fmt.Fprint(stdout, startHint(url, secureURL, c.serving.authMethods()))

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
	lg.Info("shutting down: draining in-flight requests", zap.Duration("timeout", c.requestTimeout))
	dctx, cancel := context.WithTimeout(context.Background(), c.requestTimeout)
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
