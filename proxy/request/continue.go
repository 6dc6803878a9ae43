package request

import (
	"encoding/base64"
	"encoding/json"
	"path"
	"strings"
)

// continueToken is kube-apiserver's continue token
// (k8s.io/apiserver/pkg/storage/continue.go): unpadded base64url of this
// JSON. StartKey is the key to resume at (the last returned key + "\x00")
// relative to the list's key prefix, which ends in "/".
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

// EncodeContinue returns the token that resumes a list of keyPrefix
// (ending in "/") right after lastKey at rev.
func EncodeContinue(lastKey []byte, keyPrefix string, rev int64) (string, error) {
	next := string(lastKey) + "\x00"
	rel, ok := strings.CutPrefix(next, keyPrefix)
	if !ok {
		return "", Errorf("BUG: key %q is not under the list prefix %q", lastKey, keyPrefix)
	}
	out, err := json.Marshal(&continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rev, StartKey: rel})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// ContinueAt returns the token that resumes a list of keyPrefix at key
// (already past the last key returned) at rev: kube-apiserver's
// storage.EncodeContinue.
func ContinueAt(key, keyPrefix string, rev int64) (string, error) {
	rel, ok := strings.CutPrefix(key, keyPrefix)
	if !ok || rel == "" {
		return "", Errorf("BUG: key %q is not under the list prefix %q", key, keyPrefix)
	}
	out, err := json.Marshal(&continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rev, StartKey: rel})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// DecodeContinue validates a continue token as kube-apiserver does and
// returns the full key to start at and the revision to read at. A
// negative revision (-1, the "inconsistent continuation" token of a 410,
// ContinueAt) means the latest, as for kube-apiserver's
// ValidateListOptions. Every failure is a badRequest with kube-apiserver's
// message.
func DecodeContinue(token, keyPrefix string) (fromKey string, rev int64, err error) {
	data, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", 0, Errorf("invalid continue token: continue key is not valid: %v", err)
	}
	var c continueToken
	if err := json.Unmarshal(data, &c); err != nil {
		return "", 0, Errorf("invalid continue token: continue key is not valid: %v", err)
	}
	switch c.APIVersion {
	case "meta.k8s.io/v1":
		if c.ResourceVersion == 0 {
			return "", 0, Errorf("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
		}
		if len(c.StartKey) == 0 {
			return "", 0, Errorf("invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
		}
		// As kube-apiserver: path.Clean keeps the key inside keyPrefix.
		key := c.StartKey
		if !strings.HasPrefix(key, "/") {
			key = "/" + key
		}
		if cleaned := path.Clean(key); cleaned != key {
			return "", 0, Errorf("invalid continue token: continue key is not valid: %v", c.StartKey)
		}
		return keyPrefix + key[1:], c.ResourceVersion, nil
	default:
		return "", 0, Errorf("invalid continue token: continue key is not valid: server does not recognize this encoded version %v", c.APIVersion)
	}
}
