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
	// ServerArgs returns lazyapi flags for the cluster's endpoints (e.g.
	// --etcd-preferred-server on the member FaultPartitionServed cuts off).
	ServerArgs func(endpoints []string) []string
}

// Profiles are the targeted runs by name.
var Profiles = map[string]Profile{
	"reopen": {
		Name: "reopen",
		Doc: "the member lazyapi reads from cut off every ~2 s (lazyapi prefers it): every cached resource re-opens its etcd watch " +
			"with changes to catch up while the others ask for progress, and 12 readers read at once (905ce5d, tag lazyapi_revert_own_stream)",
		Faults:     []string{FaultPartitionServed},
		FaultEvery: 2 * time.Second,
		Readers:    12,
		ServerArgs: func(eps []string) []string { return []string{"--etcd-preferred-server=" + eps[0]} },
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
