package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/klog/v2"

	"github.com/lazyapi/lazyapi/encryption"
)

// encryptionFlags are kube-apiserver's encryption-at-rest flags, plus
// --watch-cache-decrypted.
type encryptionFlags struct {
	file           string // --encryption-provider-config
	reload         bool   // --encryption-provider-config-automatic-reload
	cacheDecrypted bool   // --watch-cache-decrypted
}

func (f *encryptionFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "encryption-provider-config", "",
		"The EncryptionConfiguration file kube-apiserver encrypts data at rest with (apiserver.config.k8s.io/v1: aescbc, aesgcm, secretbox, identity, kms apiVersion v2); values it encrypted are decrypted when read.")
	fs.BoolVar(&f.reload, "encryption-provider-config-automatic-reload", false,
		"Reload --encryption-provider-config when its content changes (checked every minute), so that a key rotation needs no restart.")
	fs.BoolVar(&f.cacheDecrypted, "watch-cache-decrypted", false,
		"Hold decrypted values in the watch cache: reads skip the decryption, but plaintext Secrets stay in memory. Default: the cache holds values as stored and every read decrypts.")
}

func (f *encryptionFlags) validate() error {
	if f.file == "" && f.reload {
		return usageErrorf("--encryption-provider-config-automatic-reload needs --encryption-provider-config")
	}
	if f.file == "" && f.cacheDecrypted {
		return usageErrorf("--watch-cache-decrypted needs --encryption-provider-config")
	}
	return nil
}

// open loads the configuration; nil without --encryption-provider-config.
func (f *encryptionFlags) open(lg *zap.Logger, ms *metrics.Set) (*encryption.Transformers, error) {
	if f.file == "" {
		return nil, nil
	}
	// k8s.io/apiserver's transformers and KMS client log with klog: into
	// lazyapi's JSON log, not as text on stderr. (klog's logger is
	// process-wide; main owns it.)
	klog.SetLogger(zapr.NewLogger(lg.Named("k8s")))
	t, err := encryption.New(encryption.Config{File: f.file, AutomaticReload: f.reload, Logger: lg, Metrics: ms})
	if err != nil {
		return nil, fmt.Errorf("--encryption-provider-config: %w", err)
	}
	return t, nil
}

// decryptFor returns a decryption of resource's values for readers of
// etcd outside the proxy (CRDs, RBAC); nil without t.
func decryptFor(t *encryption.Transformers, resource string) func(key string, value []byte) ([]byte, error) {
	if t == nil {
		return nil
	}
	return func(key string, value []byte) ([]byte, error) {
		return t.Decrypt(context.Background(), resource, []byte(key), value)
	}
}

// rbacDecrypt decrypts RBAC objects, whose resource is the key's segment
// after the prefix ("/registry/roles/ns/name").
func rbacDecrypt(t *encryption.Transformers) func(key string, value []byte) ([]byte, error) {
	if t == nil {
		return nil
	}
	return func(key string, value []byte) ([]byte, error) {
		res := "roles"
		for _, r := range []string{"/clusterrolebindings/", "/clusterroles/", "/rolebindings/", "/roles/"} {
			if strings.Contains(key, r) {
				res = strings.Trim(r, "/")
				break
			}
		}
		return t.Decrypt(context.Background(), res+".rbac.authorization.k8s.io", []byte(key), value)
	}
}

// cacheDecrypt is the watch cache's Config.Decrypt for t (nil: none).
func cacheDecrypt(t *encryption.Transformers) func(ctx context.Context, resource string, key, value []byte) ([]byte, error) {
	if t == nil {
		return nil
	}
	return t.Decrypt
}
