package authn

// CacheRetained returns the entries of the verified-token cache and the
// bytes of their keys.
func (v *ServiceAccountVerifier) CacheRetained() (entries, keyBytes int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := range v.cache {
		entries++
		keyBytes += len(k)
	}
	return entries, keyBytes
}
