package cache

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/embedetcd"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// seedConfigMaps writes n ConfigMaps with dataBytes of data each in
// transactions of 100 and returns the sum of the stored value bytes.
func seedConfigMaps(b *testing.B, cli *clientv3.Client, n, dataBytes int) int64 {
	b.Helper()
	var total int64
	var ops []clientv3.Op
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range n {
		k, v := configMap(b, fmt.Sprintf("ns%02d", i%20), fmt.Sprintf("cm-%06d", i), map[string]string{"app": fmt.Sprint(i % 7)}, dataBytes, uint64(i))
		total += int64(len(v))
		ops = append(ops, clientv3.OpPut(k, string(v)))
		if len(ops) == 100 {
			flush()
		}
	}
	flush()
	return total
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkCacheMemoryPerStoredByte fills the cache with 10,000 ConfigMaps
// of 10 KiB (and 50,000 small ones) and reports the heap the cache adds per
// stored value byte (target <= 1.3 for 10 KiB), and what the budget charges
// per value byte.
func BenchmarkCacheMemoryPerStoredByte(b *testing.B) {
	b.Run("10000x10KiB", func(b *testing.B) { benchMemory(b, 10000, 10<<10) })
	b.Run("50000x256B", func(b *testing.B) { benchMemory(b, 50000, 256) })
}

func benchMemory(b *testing.B, n, dataBytes int) {
	// etcd runs in a child process so that its own heap (raft log, request
	// buffers) does not move the measurement.
	cli := startEtcdProcess(b)
	valueBytes := seedConfigMaps(b, cli, n, dataBytes)
	b.ResetTimer()
	var heapRatio, chargedRatio float64
	for range b.N {
		before := heapInuse()
		c, err := New(Config{Client: cli, MemoryBytes: 1 << 30, Metrics: metrics.NewSet()})
		if err != nil {
			b.Fatal(err)
		}
		r := c.Resource(cmSpec)
		for !r.Ready() {
			time.Sleep(10 * time.Millisecond) // polling the fill, not synchronising
		}
		after := heapInuse()
		heapRatio = float64(after-before) / float64(valueBytes)
		chargedRatio = float64(r.Bytes()) / float64(valueBytes)
		runtime.KeepAlive(r)
		c.Close()
	}
	b.ReportMetric(heapRatio, "heap/value-byte")
	b.ReportMetric(chargedRatio, "charged/value-byte")
	b.ReportMetric(float64(valueBytes), "value-bytes")
}

// BenchmarkListCacheVsEtcd iterates the same 10,000 ConfigMaps of 1 KiB
// from a cache snapshot (rv=0 and consistent) and from etcd in pages of
// 500 at one revision, in the same run, and reports the ratios.
func BenchmarkListCacheVsEtcd(b *testing.B) {
	srv := etcdtest.Start(b)
	cli := srv.Client
	valueBytes := seedConfigMaps(b, cli, 10000, 1<<10)
	c, err := New(Config{Client: cli, MemoryBytes: 1 << 30, Metrics: metrics.NewSet()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := c.Resource(cmSpec)
	for !r.Ready() {
		time.Sleep(10 * time.Millisecond) // polling the fill, not synchronising
	}
	ctx := context.Background()
	listCache := func(mode ReadMode) int64 {
		s, err := r.Snapshot(ctx, ReadOptions{Mode: mode})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for it := range s.Range(cmPrefix, prefixEnd(cmPrefix)) {
			n += int64(len(it.Value))
		}
		return n
	}
	listEtcd := func() int64 {
		var n, rev int64
		key, end := cmPrefix, clientv3.GetPrefixRangeEnd(cmPrefix)
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(500)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := cli.Get(ctx, key, opts...)
			if err != nil {
				b.Fatal(err)
			}
			rev = resp.Header.Revision
			for _, kv := range resp.Kvs {
				n += int64(len(kv.Value))
			}
			if !resp.More {
				return n
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	b.SetBytes(valueBytes)
	b.ResetTimer()
	var tAny, tCons, tEtcd time.Duration
	for range b.N {
		t0 := time.Now()
		n1 := listCache(ReadAny)
		t1 := time.Now()
		n2 := listCache(ReadConsistent)
		t2 := time.Now()
		n3 := listEtcd()
		t3 := time.Now()
		if n1 != valueBytes || n2 != valueBytes || n3 != valueBytes {
			b.Fatalf("listed %d, %d, %d bytes, want %d", n1, n2, n3, valueBytes)
		}
		tAny += t1.Sub(t0)
		tCons += t2.Sub(t1)
		tEtcd += t3.Sub(t2)
	}
	b.ReportMetric(float64(tAny.Nanoseconds())/float64(b.N), "ns-cache-rv0/op")
	b.ReportMetric(float64(tCons.Nanoseconds())/float64(b.N), "ns-cache-consistent/op")
	b.ReportMetric(float64(tEtcd.Nanoseconds())/float64(b.N), "ns-etcd/op")
	b.ReportMetric(float64(tEtcd)/float64(tAny), "etcd/cache-rv0")
	b.ReportMetric(float64(tEtcd)/float64(tCons), "etcd/cache-consistent")
}

// startEtcdProcess runs an embedded etcd in a child process (this test
// binary running TestEtcdChild) and returns a client connected to it.
func startEtcdProcess(b *testing.B) *clientv3.Client {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEtcdChild$", "-test.v")
	cmd.Env = append(os.Environ(), "LAZYAPI_ETCD_CHILD_DIR="+b.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	endpoint := ""
	for sc.Scan() {
		if e, ok := strings.CutPrefix(sc.Text(), "ENDPOINT "); ok {
			endpoint = e
			break
		}
	}
	if endpoint == "" {
		b.Fatal("etcd child did not start")
	}
	go io.Copy(io.Discard, stdout)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// TestEtcdChild is the child process of startEtcdProcess; it is skipped in
// normal runs.
func TestEtcdChild(t *testing.T) {
	dir := os.Getenv("LAZYAPI_ETCD_CHILD_DIR")
	if dir == "" {
		t.Skip("only runs as the etcd child of a benchmark")
	}
	e, err := embedetcd.Start(embedetcd.Config{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fmt.Printf("ENDPOINT %s\n", e.Endpoint())
	io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
}
