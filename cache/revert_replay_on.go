//go:build !lazyapi_revert_replay_check && !lazyapi_revert_replay_bound

package cache

// The fixes the robustness suite shows it catches when reverted (bench/
// RESULTS.md, ## robustness), each by a build tag never used otherwise:
// lazyapi_revert_replay_check ends a fill's replay at the first progress
// notification at its target, without checkReplay (c7bbc95, then
// c505a5e); lazyapi_revert_replay_bound replays a fill's whole window of
// history whatever its bytes (f476bc6). See revert_replay_off.go.
const (
	replayChecked = true
	replayBounded = true
)
