package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vmetrics "github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/embedetcd"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// TestMain lets the memory test run etcd in a child process (this test
// binary re-executed with LAZYAPI_ETCD_CHILD=<dir>), so that etcd's own
// allocations do not count as lazyapi's.
func TestMain(m *testing.M) {
	if dir := os.Getenv("LAZYAPI_ETCD_CHILD"); dir != "" {
		e, err := embedetcd.Start(embedetcd.Config{Dir: dir, UnsafeNoFsync: true})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("ENDPOINT", e.Endpoint())
		io.Copy(io.Discard, os.Stdin) // until the parent closes stdin or exits
		e.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startEtcdChild starts etcd in a child process and returns a client.
func startEtcdChild(t *testing.T) *clientv3.Client {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LAZYAPI_ETCD_CHILD="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	endpoint, ok := strings.CutPrefix(strings.TrimSpace(line), "ENDPOINT ")
	if err != nil || !ok {
		t.Fatalf("etcd child: %q %v", line, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// heapSampler samples the Go heap (runtime/metrics
// /memory/classes/heap/objects:bytes: live and not yet swept objects)
// every millisecond and keeps the peak.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func heapNow() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := heapNow(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) finish() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

// TestListMemory: a LIST of 2,000 ConfigMaps of 100 KiB (~200 MiB) raises
// lazyapi's heap by less than 32 MiB, in JSON and in protobuf; the baseline
// in the same run is holding the collection's stored bytes (what any
// materializing server holds at least). Gated: LAZYAPI_MEMTEST=1 go test
// ./proxy -run TestListMemory -v
func TestListMemory(t *testing.T) {
	if os.Getenv("LAZYAPI_MEMTEST") != "1" {
		t.Skip("set LAZYAPI_MEMTEST=1 to run the memory test (writes ~200 MiB to etcd)")
	}
	cli := startEtcdChild(t)
	const n, size = 2000, 100 << 10
	payload := strings.Repeat("x", size)
	ctx := context.Background()
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "mem", Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"payload": payload}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, storagefmt.Key("/registry", "configmaps", "mem", cm.Name), string(val)); err != nil {
			t.Fatal(err)
		}
	}
	table := resource.NewBuiltin()
	srv, err := proxy.New(proxy.Config{Client: cli, Resources: table, Metrics: vmetrics.NewSet()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	url := "http://" + ln.Addr().String() + "/api/v1/namespaces/mem/configmaps"

	measure := func(what string, run func() int64) (rise uint64, bytes int64) {
		runtime.GC()
		runtime.GC()
		base := heapNow()
		h := startSampler()
		bytes = run()
		peak := h.finish()
		if peak > base {
			rise = peak - base
		}
		t.Logf("%s: heap base %.1f MiB, peak %.1f MiB, rise %.1f MiB, %d bytes", what, mib(base), mib(peak), mib(rise), bytes)
		return rise, bytes
	}
	baseRise, baseBytes := measure("baseline: hold the stored values", func() int64 {
		var held [][]byte
		var total int64
		_, err := store.New(cli, store.Config{}).List(ctx, store.ListOptions{Prefix: "/registry/configmaps/mem/"}, func(kv store.KV) (bool, error) {
			held = append(held, append([]byte(nil), kv.Value...))
			total += int64(len(kv.Value))
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		runtime.KeepAlive(held)
		return total
	})
	for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		rise, nb := measure("LIST "+accept, func() int64 { return discardGet(t, url, accept) })
		if nb < n*size {
			t.Fatalf("%s: response %d bytes, want >= %d", accept, nb, n*size)
		}
		if rise >= 32<<20 {
			t.Errorf("%s: heap rose %.1f MiB during a %.0f MiB LIST, want < 32 MiB", accept, mib(rise), mib(uint64(nb)))
		}
		t.Logf("%s: heap rise / baseline rise = %.3f (baseline %.1f MiB for %.0f MiB stored)", accept, float64(rise)/float64(baseRise), mib(baseRise), mib(uint64(baseBytes)))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
