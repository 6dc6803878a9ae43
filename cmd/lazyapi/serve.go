package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/lazyapi/lazyapi/internal/demo"
	"github.com/lazyapi/lazyapi/internal/embedetcd"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/store"
)

// etcdBenign are warnings the embedded etcd always logs; they say nothing
// about this process.
var etcdBenign = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// serve starts the components in order — the listeners, etcd (embedded or
// remote), the etcd client, demo data, then serveAPI's — and stops them in
// reverse order when ctx ends. Each stop is a defer registered right after
// its start; the configurations come from o's *Config methods.
func serve(ctx context.Context, o *Options, p *parts, lg *zap.Logger, stdout io.Writer) error {
	// 0. The listeners, first: a port in use fails before etcd starts.
	// Connections made before the server serves wait in the backlog.
	ln, secureLn, closeListeners, err := listen(o)
	if err != nil {
		return err
	}
	defer closeListeners() // no-op after the server closed them

	// 1. etcd. Its server and client log a lot at info and retry noisily
	// at warn; keep their problems only.
	endpoints, stopEtcd, err := startEtcd(o, lg)
	if err != nil {
		return err
	}
	defer stopEtcd()

	// 2. etcd client, probed once so that a wrong address fails now.
	stopClient, err := connectEtcd(ctx, o, p, endpoints, lg)
	if err != nil {
		return err
	}
	if stopClient == nil {
		return nil // stopped while starting
	}
	defer stopClient()
	lg.Info("etcd reachable", zap.Strings("endpoints", endpoints), zap.String("prefix", o.Etcd.prefix))

	// 3. Demo data, only into an empty embedded etcd.
	if o.Misc.demo {
		stopDemo, err := startDemo(ctx, o, p.cli, lg, stdout)
		if err != nil {
			return err
		}
		defer stopDemo() // before the etcd client closes
	}

	// 4-6. Resource table, watch cache and HTTP server.
	return serveAPI(ctx, o, p, ln, secureLn, lg, stdout)
}

// listen opens --port (nil when 0) and --secure-port (nil when 0, else
// TLS); closeAll closes both.
func listen(o *Options) (ln, secureLn net.Listener, closeAll func(), err error) {
	var open []net.Listener
	closeAll = func() {
		for _, l := range open {
			l.Close()
		}
	}
	if o.Serving.port != 0 {
		addr := o.listenAddress(o.Serving.port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot listen on %s (--bind-address, --port): %w", addr, err)
		}
		open = append(open, l)
		ln = l
		if o.Serving.authenticated() {
			// Credentials over clear text: refused unless
			// --plain-port-tokens; no profiles (proxy.ClearText).
			ln = proxy.ClearText(l, o.Serving.plainTokens)
		}
	}
	if o.Serving.securePort != 0 {
		addr := o.listenAddress(o.Serving.securePort)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("cannot listen on %s (--bind-address, --secure-port): %w", addr, err)
		}
		open = append(open, l)
		// Counted under TLS: write guards measure their clients' progress.
		secureLn = tls.NewListener(proxy.CountWrites(l), o.Serving.servingTLS)
	}
	return ln, secureLn, closeAll, nil
}

// startEtcd starts the embedded etcd in --data-dir without --etcd-servers
// and returns the endpoints to read from.
func startEtcd(o *Options, lg *zap.Logger) (endpoints []string, stop func(), err error) {
	if len(o.Etcd.servers) > 0 {
		return o.Etcd.servers, func() {}, nil
	}
	var closing atomic.Bool
	etcdLog := filtered(lg.Named("etcd"), func(e zapcore.Entry) bool {
		return e.Level >= zapcore.WarnLevel && !etcdBenign[e.Message] && !closing.Load()
	})
	dir := o.Etcd.dataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("cannot create --data-dir: %w", err)
	}
	emb, err := embedetcd.Start(embedetcd.Config{Dir: dir, Logger: etcdLog})
	if err != nil {
		return nil, nil, fmt.Errorf("cannot start the embedded etcd (--data-dir %q): %w", dir, err)
	}
	lg.Info("embedded etcd started", zap.String("dataDir", dir), zap.String("endpoint", emb.Endpoint()))
	return []string{emb.Endpoint()}, func() {
		closing.Store(true) // listeners closing: expected errors
		emb.Close()
		lg.Debug("embedded etcd stopped")
	}, nil
}

// connectEtcd creates the etcd client (p.cli) and, with several endpoints
// or --etcd-preferred-server, the failover (p.failover), then probes etcd.
// It returns nil, nil when ctx ended while it probed.
func connectEtcd(ctx context.Context, o *Options, p *parts, endpoints []string, lg *zap.Logger) (stop func(), err error) {
	failover := len(endpoints) > 1 || o.Etcd.preferred != ""
	var retry *store.ReadRetry // reads in flight follow the failover's moves
	var dial []grpc.DialOption
	if failover {
		retry = store.NewReadRetry(p.metrics)
		dial = append(dial, retry.DialOption())
	}
	cli, err := clientv3.New(o.etcdClientConfig(endpoints, atLeast(lg.Named("etcd-client"), zapcore.ErrorLevel), dial))
	if err != nil {
		return nil, fmt.Errorf("cannot create etcd client for --etcd-servers %s: %w", strings.Join(endpoints, ","), err)
	}
	p.cli = cli
	stops := []func(){func() { cli.Close(); lg.Debug("etcd client closed") }}
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if failover {
		// Reads go to the members that answer linearizable reads: the
		// local one alone while it does (--etcd-preferred-server), else
		// the others that do (store.Failover).
		f, err := store.NewFailover(ctx, cli, o.failoverConfig(endpoints, retry, lg.Named("etcd-failover"), p.metrics))
		if err != nil {
			stop()
			return nil, fmt.Errorf("cannot probe the --etcd-servers: %w", err)
		}
		fctx, stopFailover := context.WithCancel(context.Background())
		fdone := make(chan struct{})
		go func() { defer close(fdone); f.Run(fctx) }()
		stops = append(stops, func() { stopFailover(); <-fdone; f.Close() })
		p.failover = f
	}
	err = probeEtcd(ctx, cli, o.Etcd.prefix, endpoints, o.Etcd.tls)
	if ctx.Err() != nil || err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return stop, nil
}

// startDemo seeds an empty embedded etcd with the demo objects and, with
// --demo-churn, keeps changing a few of them until stop.
func startDemo(ctx context.Context, o *Options, cli *clientv3.Client, lg *zap.Logger, stdout io.Writer) (stop func(), err error) {
	prefix := o.Etcd.prefix
	if err := seedDemo(ctx, cli, prefix, lg, stdout); err != nil {
		return nil, err
	}
	if !o.Misc.demoChurn {
		return func() {}, nil
	}
	cctx, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		if err := demo.Churn(cctx, cli, prefix, demo.DefaultChurnInterval); err != nil && cctx.Err() == nil {
			lg.Warn("demo: churn stopped", zap.Error(err))
		}
	}()
	fmt.Fprintf(stdout, "demo: a ConfigMap in %s changes every %s, with Events, the Deployment's status and the node Lease (--demo-churn=false: static)\n",
		demo.AppNamespace, demo.DefaultChurnInterval)
	return func() { stopChurn(); <-churned }, nil
}

func seedDemo(ctx context.Context, cli *clientv3.Client, prefix string, lg *zap.Logger, stdout io.Writer) error {
	empty, err := demo.Empty(ctx, cli, prefix)
	if err != nil {
		return fmt.Errorf("cannot check for demo data: %w", err)
	}
	if !empty {
		lg.Info("demo: etcd prefix already has keys; not seeding", zap.String("prefix", prefix))
		fmt.Fprintf(stdout, "demo: etcd already has keys under %s; not seeding (serving what is there)\n", prefix)
		return nil
	}
	start := time.Now()
	n, err := demo.Seed(ctx, cli, prefix, time.Now())
	if err != nil {
		return fmt.Errorf("cannot seed demo data: %w", err)
	}
	lg.Info("demo: seeded", zap.Int("objects", n), zap.Duration("took", time.Since(start)))
	fmt.Fprintf(stdout, "demo: wrote %d objects into the embedded etcd under %s\n", n, prefix)
	return nil
}

// probeEtcd reads one key under prefix, within etcdProbeTimeout, and
// meanwhile connects to every endpoint itself (store.DialCause): when the
// read fails, or every endpoint has failed to connect (then at once), the
// error names each endpoint's cause (refused, DNS, TLS, timeout).
func probeEtcd(ctx context.Context, cli *clientv3.Client, prefix string, endpoints []string, tlsCfg *tls.Config) error {
	pctx, cancel := context.WithTimeout(ctx, etcdProbeTimeout)
	defer cancel()
	read := make(chan error, 1)
	go func() {
		_, err := cli.Get(pctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		read <- err
	}()
	type cause struct {
		i   int
		err error
	}
	causes := make(chan cause, len(endpoints))
	for i, ep := range endpoints {
		go func() { causes <- cause{i, store.DialCause(pctx, ep, tlsCfg)} }()
	}
	errs := make([]error, len(endpoints))
	failed, got := 0, 0
	var readErr error
	for readDone := false; !readDone || got < len(endpoints); {
		if readDone {
			c := <-causes
			errs[c.i], got = c.err, got+1
			continue
		}
		select {
		case readErr = <-read:
			if readErr == nil {
				return nil
			}
			readDone = true
		case c := <-causes:
			errs[c.i], got = c.err, got+1
			if c.err != nil {
				failed++
			}
			if failed == len(endpoints) {
				readErr, readDone = errors.New("no endpoint connects"), true
				cancel()
			}
		}
	}
	var msgs []string
	for i, ep := range endpoints {
		switch {
		case errs[i] != nil:
			msgs = append(msgs, ep+": "+errs[i].Error())
		case errors.Is(readErr, context.DeadlineExceeded):
			msgs = append(msgs, fmt.Sprintf("%s: connects, but a read got no answer within %s", ep, etcdProbeTimeout))
		default:
			msgs = append(msgs, fmt.Sprintf("%s: connects, but a read failed: %v", ep, readErr))
		}
	}
	return fmt.Errorf("cannot reach etcd (--etcd-servers): %s", strings.Join(msgs, "; "))
}
