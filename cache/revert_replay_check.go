//go:build lazyapi_revert_replay_check

package cache

// Reverted (build tag lazyapi_revert_replay_check, only to show that the
// robustness suite catches the bug): a fill's replay ends at the first
// progress notification at or past its target, as the backfill did before
// c7bbc95, with no check that the tree holds etcd's state there; events
// that arrive after it are applied as new changes.
const (
	replayChecked = false
	replayBounded = true
)
