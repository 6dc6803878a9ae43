package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/lazyapi/lazyapi/encryption"
)

// encryptionOptions are kube-apiserver's encryption-at-rest flags, plus
// --watch-cache-decrypted.
type encryptionOptions struct {
	file           string // --encryption-provider-config
	reload         bool   // --encryption-provider-config-automatic-reload
	cacheDecrypted bool   // --watch-cache-decrypted
}

func (f *encryptionOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("encryption")
	fs.StringVar(&f.file, "encryption-provider-config", "",
		"The EncryptionConfiguration file kube-apiserver encrypts data at rest with (apiserver.config.k8s.io/v1: aescbc, aesgcm, secretbox, identity, kms apiVersion v2); values it encrypted are decrypted when read.")
	fs.BoolVar(&f.reload, "encryption-provider-config-automatic-reload", false,
		"Reload --encryption-provider-config when its content changes (checked every minute), so that a key rotation needs no restart.")
	fs.BoolVar(&f.cacheDecrypted, "watch-cache-decrypted", false,
		"Hold decrypted values in the watch cache: reads skip the decryption, but plaintext Secrets stay in memory. Default: the cache holds values as stored and every read decrypts.")
}

func (f *encryptionOptions) validate(*Options) []error {
	var errs []error
	if f.file == "" && f.reload {
		errs = append(errs, flagError("encryption-provider-config-automatic-reload", "needs --encryption-provider-config"))
	}
	if f.file == "" && f.cacheDecrypted {
		errs = append(errs, flagError("watch-cache-decrypted", "needs --encryption-provider-config"))
	}
	return errs
}

// openEncryption loads --encryption-provider-config; nil without it.
func (o *Options) openEncryption(lg *zap.Logger, ms *metrics.Set) (*encryption.Transformers, error) {
	cfg, ok := o.encryptionConfig(lg, ms)
	if !ok {
		return nil, nil
	}
	// k8s.io/apiserver's transformers and KMS client log with klog: into
	// lazyapi's log, not as text on stderr.
	useKlog(lg)
	t, err := encryption.New(cfg)
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
