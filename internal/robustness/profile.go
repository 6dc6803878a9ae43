package robustness

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Profile is a targeted run: faults and traffic tuned to reach one class
// of bug within minutes, where the default mix may take hours. Each names
// the fix whose revert (a build tag) it is known to catch
// (bench/RESULTS.md, ## robustness).
type Profile struct {
	Name string
	Doc  string
	// Faults and FaultEvery replace the run's defaults; Readers too when
	// not zero.
	Faults     []string
	FaultEvery time.Duration
	Readers    int
	// MemoryLimit is lazyapi's --memory-limit (checked) when not given.
	MemoryLimit string
	// ReorderHold is Config.ReorderHold.
	ReorderHold time.Duration
	// ServerArgs returns lazyapi flags for the cluster's endpoints (e.g.
	// --etcd-preferred-server on the member FaultPartitionServed cuts off).
	ServerArgs func(endpoints []string) []string
}

// Profiles are the targeted runs by name.
var Profiles = map[string]Profile{
	"reopen": {
		Name: "reopen",
		Doc: "the member lazyapi reads from cut off for 4-7 s every ~8 s (lazyapi prefers it): every cached resource re-opens its etcd watch " +
			"with changes to catch up while the others ask for progress every millisecond (--watch-cache-progress-interval=1ms), " +
			"and 12 readers read at once (905ce5d, tag lazyapi_revert_own_stream)",
		Faults:     []string{FaultPartitionServed},
		FaultEvery: 8 * time.Second,
		Readers:    12,
		// Progress asked for every millisecond by each idle resource, as
		// cache's TestConsistentReadsAcrossReopens does: on a shared
		// stream (the revert) a notification must be asked for within
		// one watch creation's round trip to overtake its catch-up
		// events; the default (5 s when idle, and consistent reads' asks)
		// did not in 4 runs of 3 minutes.
		ServerArgs: func(eps []string) []string {
			return []string{"--etcd-preferred-server=" + eps[0], "--watch-cache-progress-interval=1ms"}
		},
	},
	"replay-order": {
		Name: "replay-order",
		Doc: "lazyapi reads etcd through a proxy that holds a new watch's events for 1 s and passes progress notifications on ahead of them, " +
			"with lazyapi killed and restarted and compactions to the head (fills and re-lists); no member faults (c7bbc95/c505a5e, tag lazyapi_revert_replay_check)",
		Faults:      []string{FaultKillServer, FaultCompactAll, FaultCompact, FaultDefrag},
		FaultEvery:  5 * time.Second,
		ReorderHold: time.Second,
	},
	"replay-bytes": {
		Name: "replay-bytes",
		Doc: "200 Secrets of 1 MiB written, lazyapi killed and restarted while they exist, then deleted, every ~15 s, " +
			"with compactions and defragmentation to keep etcd under its quota, under --memory-limit=384Mi (f476bc6, tag lazyapi_revert_replay_bound)",
		Faults:      []string{FaultBurstRestart, FaultCompactAll, FaultDefrag},
		FaultEvery:  15 * time.Second,
		MemoryLimit: "384Mi",
	},
}

// ProfileNames lists the profiles, for flag help.
func ProfileNames() string {
	var names []string
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// LookupProfile returns the profile called name.
func LookupProfile(name string) (Profile, error) {
	p, ok := Profiles[name]
	if !ok {
		return p, fmt.Errorf("unknown profile %q (profiles: %s)", name, ProfileNames())
	}
	return p, nil
}
