package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
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

// etcdProbeTimeout bounds the first request to etcd at start.
const etcdProbeTimeout = 5 * time.Second

// slowMargin is FailoverConfig.SlowMargin for --etcd-slow-member-margin
// (0 turns the latency choice off).
func slowMargin(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// etcdBenign are warnings the embedded etcd always logs; they say nothing
// about this process.
var etcdBenign = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// serve starts the components in order — the listener, etcd (embedded or
// remote), the etcd client, demo data, the resource table, the watch cache,
// the HTTP server — and stops them in reverse order when ctx ends. Each stop
// is a defer registered right after its start.
func serve(ctx context.Context, c *config, pt parts, lg *zap.Logger, stdout io.Writer) error {
	// etcd's server and client log a lot at info and retry noisily at warn;
	// keep their problems only.
	var etcdClosing atomic.Bool
	etcdLog := filtered(lg.Named("etcd"), func(e zapcore.Entry) bool {
		return e.Level >= zapcore.WarnLevel && !etcdBenign[e.Message] && !etcdClosing.Load()
	})
	etcdClientLog := atLeast(lg.Named("etcd-client"), zapcore.ErrorLevel)

	// 0. The listener, first: a port in use fails before etcd starts.
	// Connections made before the server serves wait in the backlog.
	var ln net.Listener // --port; nil when 0
	if c.port != 0 {
		addr := net.JoinHostPort(c.bindAddress.String(), strconv.Itoa(c.port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("cannot listen on %s (--bind-address, --port): %w", addr, err)
		}
		defer l.Close() // no-op after the server closed it
		ln = l
		if c.serving.authenticated() {
			// Credentials over clear text: refused unless
			// --plain-port-tokens; no profiles (proxy.ClearText).
			ln = proxy.ClearText(l, c.plainTokens)
		}
	}

	var secureLn net.Listener // --secure-port; nil when 0
	if c.serving.securePort != 0 {
		addr := net.JoinHostPort(c.bindAddress.String(), strconv.Itoa(c.serving.securePort))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("cannot listen on %s (--bind-address, --secure-port): %w", addr, err)
		}
		defer l.Close()
		// Counted under TLS: write guards measure their clients' progress.
		secureLn = tls.NewListener(proxy.CountWrites(l), c.serving.servingTLS)
	}

	// 1. etcd.
	endpoints := c.etcdServers
	if len(endpoints) == 0 {
		if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
			return fmt.Errorf("cannot create --data-dir: %w", err)
		}
		emb, err := embedetcd.Start(embedetcd.Config{Dir: c.dataDir, Logger: etcdLog})
		if err != nil {
			return fmt.Errorf("cannot start the embedded etcd (--data-dir %q): %w", c.dataDir, err)
		}
		defer func() {
			etcdClosing.Store(true) // listeners closing: expected errors
			emb.Close()
			lg.Debug("embedded etcd stopped")
		}()
		endpoints = []string{emb.Endpoint()}
		lg.Info("embedded etcd started", zap.String("dataDir", c.dataDir), zap.String("endpoint", emb.Endpoint()))
	}

	// 2. etcd client, probed once so that a wrong address fails now.
	failover := len(endpoints) > 1 || c.etcdPreferred != ""
	var retry *store.ReadRetry // reads in flight follow the failover's moves
	var dialOpts []grpc.DialOption
	if failover {
		retry = store.NewReadRetry(pt.metrics)
		dialOpts = append(dialOpts, retry.DialOption())
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: etcdProbeTimeout,
		TLS:         c.etcdTLS,
		Logger:      etcdClientLog,
		DialOptions: dialOpts,
	})
	if err != nil {
		return fmt.Errorf("cannot create etcd client for --etcd-servers %s: %w", strings.Join(endpoints, ","), err)
	}
	defer func() {
		cli.Close()
		lg.Debug("etcd client closed")
	}()
	if failover {
		// Reads go to the members that answer linearizable reads: the
		// local one alone while it does (--etcd-preferred-server), else
		// the others that do (store.Failover).
		f, err := store.NewFailover(ctx, cli, store.FailoverConfig{
			Endpoints: endpoints, Preferred: c.etcdPreferred,
			TLS: c.etcdTLS, DialTimeout: etcdProbeTimeout,
			SlowMargin: slowMargin(c.etcdSlow), Retry: retry,
			Logger: lg.Named("etcd-failover"), Metrics: pt.metrics,
		})
		if err != nil {
			return fmt.Errorf("cannot probe the --etcd-servers: %w", err)
		}
		fctx, stopFailover := context.WithCancel(context.Background())
		fdone := make(chan struct{})
		go func() { defer close(fdone); f.Run(fctx) }()
		defer func() {
			stopFailover()
			<-fdone
			f.Close()
		}()
		pt.failover = f
	}
	err = probeEtcd(ctx, cli, c.etcdPrefix, endpoints, c.etcdTLS)
	if ctx.Err() != nil {
		return nil // stopped while starting
	}
	if err != nil {
		return err
	}
	lg.Info("etcd reachable", zap.Strings("endpoints", endpoints), zap.String("prefix", c.etcdPrefix))

	// 3. Demo data, only into an empty embedded etcd.
	if c.demo {
		if err := seedDemo(ctx, cli, c.etcdPrefix, lg, stdout); err != nil {
			return err
		}
		if c.demoChurn {
			// Stopped before the etcd client closes (defers run in
			// reverse).
			cctx, stopChurn := context.WithCancel(ctx)
			churned := make(chan struct{})
			go func() {
				defer close(churned)
				if err := demo.Churn(cctx, cli, c.etcdPrefix, demo.DefaultChurnInterval); err != nil && cctx.Err() == nil {
					lg.Warn("demo: churn stopped", zap.Error(err))
				}
			}()
			defer func() { stopChurn(); <-churned }()
			fmt.Fprintf(stdout, "demo: a ConfigMap in %s changes every %s, with Events, the Deployment's status and the node Lease (--demo-churn=false: static)\n",
				demo.AppNamespace, demo.DefaultChurnInterval)
		}
	}

	// 4-6. Resource table, watch cache and HTTP server.
	return serveAPI(ctx, c, pt, cli, ln, secureLn, lg, stdout)
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
