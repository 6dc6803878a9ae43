// Package encryption decrypts values that kube-apiserver encrypted at rest:
// an EncryptionConfiguration (--encryption-provider-config) loaded by
// k8s.io/apiserver's own loader, with its own value transformers (aescbc,
// aesgcm, secretbox, identity, and KMS v2 through the plugin's gRPC socket,
// with kube-apiserver's DEK seed cache).
//
// It knows no HTTP server and no etcd types: a value is (resource, etcd key,
// stored bytes) in and plaintext out.
package encryption

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"sigs.k8s.io/yaml"
)

// DefaultReloadInterval is how often an automatically reloaded
// configuration file is checked for changes (kube-apiserver's
// EncryptionConfigFileChangePollDuration).
const DefaultReloadInterval = time.Minute

// ServerID is the API server ID lazyapi gives k8s.io/apiserver's KMS v2
// transformer (it labels kube-apiserver's own metrics only).
const ServerID = "lazyapi"

// Config configures Transformers.
type Config struct {
	// File is the EncryptionConfiguration
	// (apiserver.config.k8s.io/v1) to load (--encryption-provider-config).
	// Required.
	File string
	// AutomaticReload reloads File when its content changes
	// (--encryption-provider-config-automatic-reload): a key rotation
	// needs no restart.
	AutomaticReload bool
	// ReloadInterval is how often File is checked with AutomaticReload;
	// 0 means DefaultReloadInterval.
	ReloadInterval time.Duration
	// Logger receives reloads and their failures (never key material).
	// Nil means zap.NewNop().
	Logger *zap.Logger
	// Metrics receives lazyapi_encryption_* metrics; nil means a private
	// set.
	Metrics *metrics.Set
	// Wrap, when set, wraps k8s.io/apiserver's transformer of each
	// resource ("resource[.group]") once it is resolved: tests count the
	// decryptions of a read with it.
	Wrap func(resource string, t value.Transformer) value.Transformer
}

// ErrDecrypt is the errors.Is target of a *DecryptError.
var ErrDecrypt = errors.New("encryption: cannot decrypt")

// DecryptError reports a stored value that could not be decrypted. Its
// message names the resource, the etcd key and the provider, never data.
type DecryptError struct {
	Resource string // "resource[.group]"
	Key      string // etcd key
	Provider string // aescbc, aesgcm, secretbox, kms, identity (value not encrypted)
	KeyName  string // the provider's key name (kms: the provider's name)
	// Unavailable is true when a KMS plugin did not answer (unreachable or
	// timed out): the read may succeed once the plugin is back.
	Unavailable bool
	Err         error
}

func (e *DecryptError) Error() string {
	if e.Provider == "identity" {
		return fmt.Sprintf("cannot decrypt %s stored at %q: the value is not encrypted and no identity provider is configured for it: %v",
			e.Resource, e.Key, e.Err)
	}
	return fmt.Sprintf("cannot decrypt %s stored at %q with provider %q key %q: %v", e.Resource, e.Key, e.Provider, e.KeyName, e.Err)
}

// Is reports whether target is ErrDecrypt.
func (e *DecryptError) Is(target error) bool { return target == ErrDecrypt }

func (e *DecryptError) Unwrap() error { return e.Err }

// Transformers decrypts stored values with the transformers of an
// EncryptionConfiguration. It is safe for concurrent use; with
// Config.AutomaticReload the configuration is swapped atomically when the
// file changes (reads in flight finish with the old one).
type Transformers struct {
	cfg    Config
	cur    atomic.Pointer[state]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	hash   string // of the loaded file; owned by the reload goroutine after New

	reloadOK, reloadFailed *metrics.Counter
	failures               sync.Map // "resource\x00provider" -> *metrics.Counter
}

// state is one loaded configuration.
type state struct {
	overrides map[schema.GroupResource]value.Transformer // the configured resources
	byName    sync.Map                                   // resource name -> value.Transformer (resolved once)
	health    []healthz.HealthChecker
	kms       bool
	cancel    context.CancelFunc                                // stops the transformers' goroutines (KMS probes, connections)
	grace     time.Duration                                     // how long a replaced state lives on for reads in flight
	wrap      func(string, value.Transformer) value.Transformer // Config.Wrap
}

// New loads cfg.File and, with cfg.AutomaticReload, starts watching it.
// Close releases the KMS connections and stops the reload.
func New(cfg Config) (*Transformers, error) {
	if cfg.File == "" {
		return nil, errors.New("encryption: Config.File is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	if cfg.ReloadInterval <= 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	t := &Transformers{cfg: cfg}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.reloadOK = cfg.Metrics.GetOrCreateCounter(`lazyapi_encryption_config_reloads_total{status="success"}`)
	t.reloadFailed = cfg.Metrics.GetOrCreateCounter(`lazyapi_encryption_config_reloads_total{status="failure"}`)
	st, hash, err := t.load()
	if err != nil {
		t.cancel()
		return nil, err
	}
	t.cur.Store(st)
	t.hash = hash
	if cfg.AutomaticReload {
		t.wg.Add(1)
		go t.reloadLoop()
	}
	return t, nil
}

// load reads and builds the configuration in cfg.File.
func (t *Transformers) load() (*state, string, error) {
	if err := checkKMSv1(t.cfg.File); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithCancel(t.ctx)
	ec, err := encryptionconfig.LoadEncryptionConfig(ctx, t.cfg.File, t.cfg.AutomaticReload, ServerID)
	if err != nil {
		cancel()
		return nil, "", fmt.Errorf("cannot load encryption configuration %q: %w", t.cfg.File, err)
	}
	st := &state{overrides: ec.Transformers, health: ec.HealthChecks, cancel: cancel, grace: ec.KMSCloseGracePeriod,
		kms: ec.KMSCloseGracePeriod > 0, wrap: t.cfg.Wrap}
	return st, ec.EncryptionFileContentHash, nil
}

// checkKMSv1 refuses KMS v1 providers with a clear error: kube-apiserver
// turned them off by default (feature gate KMSv1) and lazyapi has no such
// gate.
func checkKMSv1(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("cannot read encryption configuration: %w", err)
	}
	var c apiserverv1.EncryptionConfiguration
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil // the loader reports it with its own, precise message
	}
	for _, r := range c.Resources {
		for _, p := range r.Providers {
			if p.KMS != nil && (p.KMS.APIVersion == "" || p.KMS.APIVersion == "v1") {
				return fmt.Errorf("KMS provider %q uses apiVersion v1 (the default when apiVersion is empty), which is deprecated and off by default in kube-apiserver and not supported by lazyapi: set apiVersion: v2 (KMS v2 plugin)", p.KMS.Name)
			}
		}
	}
	return nil
}

// Close stops the reload and closes the KMS connections.
func (t *Transformers) Close() {
	t.cancel()
	t.wg.Wait()
}

// Decrypt returns the plaintext of value, stored in etcd under key, of
// resource ("resource[.group]", e.g. "secrets", "deployments.apps",
// "widgets.example.com"), as kube-apiserver's transformer for that
// resource returns it: a value of a resource the configuration does not
// name, or not encrypted (no "k8s:enc:" prefix) under an identity provider,
// is returned as it is; otherwise the provider whose prefix the value
// carries decrypts it, trying its keys in order, with key as authenticated
// data where the provider uses it (aesgcm, KMS v2). The result is a new
// buffer except when value is returned. Errors are *DecryptError.
func (t *Transformers) Decrypt(ctx context.Context, resource string, key, value []byte) ([]byte, error) {
	st := t.cur.Load()
	tr, configured := st.transformer(resource)
	if !configured && !bytes.HasPrefix(value, encPrefix) {
		return value, nil // the identity transformer's answer, without its cost
	}
	return t.transform(ctx, tr, resource, key, value)
}

// Transforms reports whether Decrypt runs a transformer on value of
// resource: the value is encrypted, or a rule names the resource (an
// identity provider's plaintext goes through k8s.io/apiserver's identity
// transformer). When it is false Decrypt returns value itself at the cost
// of a prefix check.
func (t *Transformers) Transforms(resource string, value []byte) bool {
	_, configured := t.cur.Load().transformer(resource)
	return configured || bytes.HasPrefix(value, encPrefix)
}

// transform runs tr. A panic in a provider is a DecryptError: k8s.io/
// apiserver v0.37's aescbc indexes result[-1] on a ciphertext of one block
// (the IV alone), found by FuzzDecrypt.
func (t *Transformers) transform(ctx context.Context, tr value.Transformer, resource string, key, v []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, t.decryptError(resource, key, v, fmt.Errorf("malformed value: the provider failed: %v", r))
		}
	}()
	out, _, err = tr.TransformFromStorage(ctx, v, valueContext(key))
	if err != nil {
		return nil, t.decryptError(resource, key, v, err)
	}
	return out, nil
}

// Encrypted reports whether a value carries kube-apiserver's encryption
// prefix "k8s:enc:".
func Encrypted(value []byte) bool { return bytes.HasPrefix(value, encPrefix) }

var encPrefix = []byte("k8s:enc:")

// valueContext is kube-apiserver's authenticatedDataString: the etcd key.
func valueContext(key []byte) value.Context { return value.DefaultContext(key) }

// transformer returns the transformer of a resource and whether the
// configuration names it (or a wildcard covering it).
func (st *state) transformer(resource string) (value.Transformer, bool) {
	if v, ok := st.byName.Load(resource); ok {
		rt := v.(resolved)
		return rt.t, rt.configured
	}
	gr := schema.ParseGroupResource(resource)
	_, configured := st.overrides[gr]
	if !configured {
		_, configured = st.overrides[schema.GroupResource{Group: gr.Group, Resource: "*"}]
	}
	if !configured {
		_, configured = st.overrides[schema.GroupResource{Group: "*", Resource: "*"}]
	}
	rt := resolved{t: encryptionconfig.StaticTransformers(st.overrides).TransformerForResource(gr), configured: configured}
	if st.wrap != nil {
		rt.t = st.wrap(resource, rt.t)
	}
	st.byName.Store(resource, rt)
	return rt.t, rt.configured
}

type resolved struct {
	t          value.Transformer
	configured bool
}

// decryptError builds the error of a failed decryption and counts it.
func (t *Transformers) decryptError(resource string, key, value []byte, err error) error {
	e := &DecryptError{Resource: resource, Key: string(key), Err: err}
	e.Provider, e.KeyName = ParsePrefix(value)
	if s, ok := status.FromError(err); ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
		e.Unavailable = true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		e.Unavailable = true
	}
	ck := resource + "\x00" + e.Provider
	c, ok := t.failures.Load(ck)
	if !ok {
		c, _ = t.failures.LoadOrStore(ck, t.cfg.Metrics.GetOrCreateCounter(
			fmt.Sprintf(`lazyapi_decrypt_failures_total{resource=%q,provider=%q}`, resource, e.Provider)))
	}
	c.(*metrics.Counter).Inc()
	return e
}

// ParsePrefix returns the provider and key name of an encrypted value's
// prefix: "k8s:enc:<provider>:v1:<key>:" (aescbc, aesgcm, secretbox, kms
// v1) or "k8s:enc:kms:v2:<name>:". A value without the prefix gives
// ("identity", ""); a truncated one the parts it has.
func ParsePrefix(v []byte) (provider, keyName string) {
	if !bytes.HasPrefix(v, encPrefix) {
		return "identity", ""
	}
	rest := v[len(encPrefix):]
	next := func() string {
		i := bytes.IndexByte(rest, ':')
		if i < 0 || i > 256 {
			rest = nil
			return ""
		}
		s := string(rest[:i])
		rest = rest[i+1:]
		return s
	}
	provider = next()
	if provider == "" {
		return "unknown", ""
	}
	if next() == "" {
		return provider, ""
	}
	return provider, next()
}

// KMS reports whether the loaded configuration uses KMS v2 plugins.
func (t *Transformers) KMS() bool { return t.cur.Load().kms }

// Check runs the KMS plugins' health checks (kube-apiserver's
// "kms-providers" check: the plugin's Status is ok, its key ID known); nil
// without KMS providers.
func (t *Transformers) Check(ctx context.Context) error {
	st := t.cur.Load()
	if len(st.health) == 0 {
		return nil
	}
	// k8s.io/apiserver's checks take an *http.Request for its context only.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/readyz", nil)
	if err != nil {
		return err
	}
	var errs []string
	for _, h := range st.health {
		if err := h.Check(req); err != nil {
			errs = append(errs, h.Name()+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// reloadLoop checks the file every ReloadInterval and swaps in a new
// configuration when its content changed and it loads and its KMS
// plugins are healthy (as kube-apiserver's
// DynamicEncryptionConfigContent); a failed reload keeps the old
// configuration and is retried at the next tick.
func (t *Transformers) reloadLoop() {
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.ReloadInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		t.reloadOnce()
	}
}

// Reload reloads the file now if its content changed (what the reload
// loop does on each tick). It reports whether a new configuration is in
// use.
func (t *Transformers) reloadOnce() bool {
	hash, err := encryptionconfig.GetEncryptionConfigHash(t.cfg.File)
	if err != nil {
		t.reloadFailed.Inc()
		t.cfg.Logger.Error("cannot read the encryption configuration for reload", zap.String("file", t.cfg.File), zap.Error(err))
		return false
	}
	if hash == t.hash {
		return false
	}
	st, hash, err := t.load()
	if err == nil {
		err = st.waitHealthy(t.ctx)
		if err != nil {
			st.cancel()
		}
	}
	if err != nil {
		t.reloadFailed.Inc()
		t.cfg.Logger.Error("cannot reload the encryption configuration; keeping the previous one", zap.String("file", t.cfg.File), zap.Error(err))
		return false
	}
	old := t.cur.Swap(st)
	t.hash = hash
	t.reloadOK.Inc()
	t.cfg.Logger.Info("reloaded the encryption configuration", zap.String("file", t.cfg.File), zap.String("hash", hash))
	// Reads in flight may still use old: close it after its grace period.
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		select {
		case <-time.After(old.grace):
		case <-t.ctx.Done():
		}
		old.cancel()
	}()
	return true
}

// waitHealthy polls a new configuration's KMS checks until they pass, at
// most 20 s (kube-apiserver's validateNewTransformersHealth).
func (st *state) waitHealthy(ctx context.Context) error {
	if len(st.health) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tmp := &Transformers{}
	tmp.cur.Store(st)
	for {
		err := tmp.Check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("KMS plugins of the new configuration are not healthy: %w", err)
		case <-time.After(time.Second):
		}
	}
}
