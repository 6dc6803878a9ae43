package etcdtest

import (
	"testing"

	"github.com/lazyapi/lazyapi/internal/embedetcd"
)

// Cluster is embedetcd's multi-member cluster for tests: started in
// t.TempDir and stopped when the test ends.
type Cluster struct {
	*embedetcd.Cluster
}

// Member is one etcd of a Cluster.
type Member = embedetcd.Member

// StartCluster starts an n-member cluster in t.TempDir on free loopback
// ports and stops it when the test ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	c, err := embedetcd.StartCluster(tb.TempDir(), n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return &Cluster{c}
}
