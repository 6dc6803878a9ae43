package proxy

import (
	"context"
	"errors"

	"github.com/lazyapi/lazyapi/encryption"
)

// Decryption (Config.Encryption).
//
// Every stored value leaves etcd or the watch cache through plaintext, once
// per value per read, before the codec unwraps it: GET (serveGet), LIST
// (lister.item, after a cached item's selector attributes rejected it or
// not), WATCH (watchEncoder.event, etcdWatch.match). The watch cache
// derives selector attributes from plaintext itself (cache.Config.Decrypt)
// and holds values as stored unless --watch-cache-decrypted. A value that
// does not decrypt fails its request with a 500 naming resource, key and
// provider (a LIST stream already started is aborted; a watch gets an
// ERROR event and ends), and is counted in lazyapi_decrypt_failures_total.

// plaintext returns the value stored at key of resource gr
// ("resource[.group]") as kube-apiserver's transformer for it returns it.
// cached says the value comes from the watch cache: with
// Config.CacheDecrypted such values are plaintext already unless they
// still carry the "k8s:enc:" prefix (the cache could not decrypt them
// when it read them).
func (s *Server) plaintext(ctx context.Context, gr string, key, value []byte, cached bool) ([]byte, error) {
	enc := s.cfg.Encryption
	if enc == nil {
		return value, nil
	}
	if cached && s.cfg.CacheDecrypted && !encryption.Encrypted(value) {
		return value, nil
	}
	return enc.Decrypt(ctx, gr, key, value)
}

// decrypts reports whether plaintext runs a transformer on value: the
// cost a LIST's size pass avoids when the watch cache's attributes and
// recorded sizes tell (lister.item).
func (s *Server) decrypts(gr string, value []byte, cached bool) bool {
	enc := s.cfg.Encryption
	if enc == nil || cached && s.cfg.CacheDecrypted && !encryption.Encrypted(value) {
		return false
	}
	return enc.Transforms(gr, value)
}

// keepsNoPlaintext reports whether the rendering of a stored value must not
// outlive the request: the value is encrypted at rest and the watch cache
// does not hold decrypted values (so no shared watch frame may hold its
// plaintext either; the rendered-object cache is off in that mode).
func (s *Server) keepsNoPlaintext(value []byte) bool {
	return s.cfg.Encryption != nil && !s.cfg.CacheDecrypted && encryption.Encrypted(value)
}

// decryptStatus returns the Status of a decryption failure: kube-apiserver
// answers 500 InternalError ("unable to transform key"). ok is false when
// err is not one.
func decryptStatus(err error) (*StatusError, bool) {
	var de *encryption.DecryptError
	if !errors.As(err, &de) {
		return nil, false
	}
	return internalErr(de.Error()), true
}
