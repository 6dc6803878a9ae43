// Package certfile keeps TLS key pairs and CA bundles loaded from PEM files
// current: a Reloader re-reads the files and swaps in what changed, as
// kube-apiserver's dynamiccertificates do for --tls-cert-file,
// --tls-private-key-file and --client-ca-file, so that a rotation on disk
// needs no restart. A change that does not parse (a key pair written half,
// a key that does not match its certificate) keeps the previous content in
// force and is retried at the next check.
package certfile

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// KeyPair is a certificate (with intermediates) and its key, loaded from
// two PEM files. Its methods are safe for concurrent use.
type KeyPair struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	certPEM, keyPEM   []byte // what cur was parsed from; owned by the Reloader
}

// LoadKeyPair loads certFile and keyFile.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the key pair in force.
func (k *KeyPair) Certificate() *tls.Certificate { return k.cur.Load() }

// GetCertificate is for tls.Config.GetCertificate (serving).
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.cur.Load(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate (a client
// certificate, e.g. etcd's).
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.cur.Load(), nil
}

// reload re-reads the files and swaps them in when they changed and parse.
func (k *KeyPair) reload() (changed bool, err error) {
	certPEM, err := os.ReadFile(k.certFile)
	if err != nil {
		return false, err
	}
	keyPEM, err := os.ReadFile(k.keyFile)
	if err != nil {
		return false, err
	}
	if k.cur.Load() != nil && bytes.Equal(certPEM, k.certPEM) && bytes.Equal(keyPEM, k.keyPEM) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, err
	}
	k.certPEM, k.keyPEM = certPEM, keyPEM
	k.cur.Store(&cert)
	return true, nil
}

// CAs is a bundle of CA certificates loaded from a PEM file. Its methods are
// safe for concurrent use.
type CAs struct {
	file string
	cur  atomic.Pointer[x509.CertPool]
	pem  []byte // what cur was parsed from; owned by the Reloader
}

// LoadCAs loads file.
func LoadCAs(file string) (*CAs, error) {
	c := &CAs{file: file}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Pool returns the CA pool in force.
func (c *CAs) Pool() *x509.CertPool { return c.cur.Load() }

func (c *CAs) reload() (changed bool, err error) {
	b, err := os.ReadFile(c.file)
	if err != nil {
		return false, err
	}
	if c.cur.Load() != nil && bytes.Equal(b, c.pem) {
		return false, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return false, errors.New("no PEM certificate found")
	}
	c.pem = b
	c.cur.Store(pool)
	return true, nil
}

// VerifyServer returns a tls.Config.VerifyConnection that verifies a
// server's certificate chain and name against the pool in force; the
// config needs InsecureSkipVerify, since tls.Config.RootCAs cannot change
// (Go's TLS client has no GetConfigForClient).
func (c *CAs) VerifyServer() func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("certfile: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: c.Pool(), DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// DefaultInterval is how often a Reloader re-reads its files. Reading a few
// small files once a second costs nothing measurable; kube-apiserver reacts
// to file events and re-reads every minute.
const DefaultInterval = time.Second

// Reloader re-reads key pairs and CA bundles every Interval. Add files
// before Run; Run and Check are safe to call from one goroutine at a time.
type Reloader struct {
	// Interval between checks; 0 means DefaultInterval.
	Interval time.Duration
	// Logger reports reloads and files that cannot be used (never their
	// contents); nil discards.
	Logger *zap.Logger

	mu    sync.Mutex
	items []item
}

type item struct {
	name     string // the flags, e.g. "--tls-cert-file/--tls-private-key-file"
	reload   func() (bool, error)
	onChange func()
	failing  bool // the last check failed (logged once per failure run)
}

// AddKeyPair watches k under name (the flags that name its files);
// onChange, when not nil, runs after k changed.
func (r *Reloader) AddKeyPair(name string, k *KeyPair, onChange func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = append(r.items, item{name: name, reload: k.reload, onChange: onChange})
}

// AddCAs watches c under name; onChange, when not nil, runs after c changed.
func (r *Reloader) AddCAs(name string, c *CAs, onChange func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = append(r.items, item{name: name, reload: c.reload, onChange: onChange})
}

// Len returns how many key pairs and bundles r watches.
func (r *Reloader) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

// Check re-reads every file once and returns how many changed.
func (r *Reloader) Check() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	lg := r.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	n := 0
	for i := range r.items {
		it := &r.items[i]
		changed, err := it.reload()
		if err != nil {
			if !it.failing {
				lg.Warn("cannot reload "+it.name+"; keeping the loaded certificates", zap.Error(err))
			}
			it.failing = true
			continue
		}
		it.failing = false
		if changed {
			n++
			lg.Info("reloaded " + it.name)
			if it.onChange != nil {
				it.onChange()
			}
		}
	}
	return n
}

// Run checks every Interval until ctx ends.
func (r *Reloader) Run(ctx context.Context) {
	iv := r.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Check()
		}
	}
}

// String names what r watches, for logs.
func (r *Reloader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ""
	for i, it := range r.items {
		if i > 0 {
			s += ", "
		}
		s += it.name
	}
	return fmt.Sprintf("[%s]", s)
}
