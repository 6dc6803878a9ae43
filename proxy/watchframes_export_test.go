package proxy

// SetWatchFrameCacheBytes changes s's shared watch frame bound; 0 makes
// every watcher encode its own frames.
func SetWatchFrameCacheBytes(s *Server, n int64) { s.frames.setMaxBytes(n) }

// WatchFrameCacheBytes is the default shared watch frame bound.
const WatchFrameCacheBytes = frameCacheBytes
