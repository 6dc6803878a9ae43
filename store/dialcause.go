package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"time"
)

// DialCause connects to an etcd endpoint (scheme://host:port) as the etcd
// client would, TLS handshake included for https (with tlsCfg), and
// returns why it cannot: an error naming the cause ("DNS: ...",
// "connection refused", "TLS handshake: ...", "no answer within ..."), or
// nil when the connection is made. The etcd client's own errors say only
// that a request found no connection in time (gRPC retries the dial
// behind them).
func DialCause(ctx context.Context, endpoint string, tlsCfg *tls.Config) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("cannot parse the endpoint %q: want scheme://host:port", endpoint)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "2379")
	}
	start := time.Now()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return dialError(err, time.Since(start))
	}
	defer conn.Close()
	if u.Scheme != "https" && u.Scheme != "unixs" {
		return nil
	}
	cfg := &tls.Config{}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("TLS handshake: no answer within %s", time.Since(start).Round(100*time.Millisecond))
		}
		return fmt.Errorf("TLS handshake: %w", err)
	}
	return nil
}

// dialError names the cause of a failed TCP dial.
func dialError(err error, took time.Duration) error {
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return fmt.Errorf("DNS: no such host %q", dnsErr.Name)
		}
		return fmt.Errorf("DNS: cannot resolve %q: %w", dnsErr.Name, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.New("connection refused (nothing listens there)")
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("unreachable: %w", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no answer within %s (a firewall, or a host that is down)", took.Round(100*time.Millisecond))
	}
	return err
}
