//go:build lazyapi_revert_replay_bound

package cache

// Reverted (build tag lazyapi_revert_replay_bound, only to show that the
// robustness suite catches the bug): a fill replays its whole window of
// history (BackfillRevisions, the ring's size) whatever its bytes, as
// before f476bc6: etcd sends it in watch responses with no byte bound.
const (
	replayChecked = true
	replayBounded = false
)
