package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// kubeletClients are the simulated nodes' watches against one target.
type kubeletClients struct {
	t   Target
	cfg KubeletConfig
	tp  kubeletTopology
	r0  int64
	trs []*http.Transport // one per node

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	measuring                                 atomic.Bool
	opened                                    atomic.Int64
	delivered, bookmarks, cut, refused, errEv atomic.Int64
	hist                                      *Histogram
	// acks, when set, also times each timed event from etcd's
	// acknowledgement of its write (set before open).
	acks *kubeletAcks

	mu    sync.Mutex
	first string
}

func newKubeletClients(t Target, cfg KubeletConfig, tp kubeletTopology, r0 int64) *kubeletClients {
	c := &kubeletClients{t: t, cfg: cfg, tp: tp, r0: r0, hist: NewHistogram()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for n := range cfg.Nodes {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		if !cfg.SameAddress {
			d.LocalAddr = &net.TCPAddr{IP: stormLocalAddr(n)}
		}
		// A kubelet's client: its own transport, HTTP/2 when the server
		// negotiates it (every watch a stream of one connection), else
		// one HTTP/1.1 connection per watch.
		c.trs = append(c.trs, &http.Transport{
			DialContext:         d.DialContext,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback benchmark targets
			ForceAttemptHTTP2:   true,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 8,
			ReadBufferSize:      4 << 10,
			WriteBufferSize:     4 << 10,
		})
	}
	return c
}

func (c *kubeletClients) fail(err error) {
	c.mu.Lock()
	if c.first == "" {
		c.first = err.Error()
	}
	c.mu.Unlock()
}

func (c *kubeletClients) firstErr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// paths are node n's watches (without resourceVersion).
func (c *kubeletClients) paths(n int) []string {
	node := kubeletNode(n)
	q := func(base, name string) string {
		return base + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&fieldSelector=" + url.QueryEscape("metadata.name="+name)
	}
	ps := []string{
		"/api/v1/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&fieldSelector=" + url.QueryEscape("spec.nodeName="+node),
		q("/api/v1/nodes", node),
		q("/apis/coordination.k8s.io/v1/namespaces/"+kubeletLeaseNS+"/leases", node),
	}
	for _, d := range c.tp.nodeDeployments(n) {
		for i := range c.cfg.SecretsPerPod {
			ps = append(ps, q("/api/v1/namespaces/"+depNS(d)+"/secrets", depSecret(d, i)))
		}
		for i := range c.cfg.ConfigMapsPerPod {
			ps = append(ps, q("/api/v1/namespaces/"+depNS(d)+"/configmaps", depConfigMap(d, i)))
		}
	}
	return ps
}

// open starts every watch (at most 256 being opened at once) and returns
// how many are open after all tried, or 10 minutes.
func (c *kubeletClients) open(ctx context.Context) int {
	sem := make(chan struct{}, 256)
	total := 0
	var tried sync.WaitGroup
	for n := range c.cfg.Nodes {
		for _, p := range c.paths(n) {
			total++
			tried.Add(1)
			c.wg.Go(func() { c.stream(n, p, sem, tried.Done) })
		}
	}
	done := make(chan struct{})
	go func() { tried.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(10 * time.Minute):
	}
	return int(c.opened.Load())
}

// stream holds one watch: opened (through sem) from r0, reopened from its
// last resourceVersion when the server ends it.
func (c *kubeletClients) stream(n int, path string, sem chan struct{}, tried func()) {
	rv := strconv.FormatInt(c.r0, 10)
	first := true
	for c.ctx.Err() == nil {
		sem <- struct{}{}
		resp, err := c.request(n, path+"&resourceVersion="+rv)
		<-sem
		if c.ctx.Err() != nil {
			if err == nil {
				resp.Body.Close()
			}
			break
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			c.refused.Add(1)
			wait := time.Second
			if err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
				resp.Body.Close()
				if s, e := strconv.Atoi(resp.Header.Get("Retry-After")); e == nil && s > 0 {
					wait = time.Duration(s) * time.Second
				}
				err = fmt.Errorf("watch %s: %d %s", path, resp.StatusCode, body)
				if resp.StatusCode == http.StatusGone {
					c.fail(err)
					break
				}
			}
			c.fail(err)
			sleepCtx(c.ctx, wait)
			continue
		}
		if first {
			first = false
			c.opened.Add(1)
			tried()
		}
		last, err := c.read(resp.Body)
		resp.Body.Close()
		if last != "" {
			rv = last
		}
		if c.ctx.Err() != nil {
			break
		}
		c.cut.Add(1)
		if err != nil {
			c.fail(fmt.Errorf("watch %s: %w", path, err))
		}
	}
	if first {
		tried()
	}
}

func (c *kubeletClients) request(n int, path string) (*http.Response, error) {
	req, err := c.t.newRequest(c.ctx, path, "application/vnd.kubernetes.protobuf;stream=watch")
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "kubelet/v1.37.2 (linux/amd64) lazybench/"+kubeletNode(n))
	return c.trs[n].RoundTrip(req)
}

// read reads protobuf watch frames until the stream ends; it returns the
// last resourceVersion seen.
func (c *kubeletClients) read(body io.Reader) (string, error) {
	br := bufio.NewReaderSize(body, 4<<10)
	var frame []byte
	var last string
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return last, streamEnd(c.ctx, err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > 64<<20 {
			return last, fmt.Errorf("frame of %d bytes", n)
		}
		if cap(frame) < int(n) {
			frame = make([]byte, n)
		}
		frame = frame[:n]
		if _, err := io.ReadFull(br, frame); err != nil {
			return last, streamEnd(c.ctx, err)
		}
		now := time.Now()
		typ, rv, stamp, err := parseKubeletEvent(frame)
		if err != nil {
			return last, err
		}
		if rv != "" {
			last = rv
		}
		switch typ {
		case "BOOKMARK":
			c.bookmarks.Add(1)
		case "ERROR":
			c.errEv.Add(1)
			return last, fmt.Errorf("ERROR event")
		case "ADDED", "MODIFIED", "DELETED":
			if !c.measuring.Load() {
				continue
			}
			c.delivered.Add(1)
			if typ != "DELETED" && stamp > 0 {
				c.hist.Record(now.Sub(time.Unix(0, stamp)))
				rev, _ := strconv.ParseInt(rv, 10, 64) // 0, unmatched, when not a number
				c.acks.arrived(rev, now)
			}
		}
	}
}

// parseKubeletEvent reads a protobuf watch event's type, its object's
// resourceVersion and write stamp (0 when absent).
func parseKubeletEvent(frame []byte) (typ, rv string, stamp int64, err error) {
	typ, raw, err := protoEventObject(frame)
	if err != nil {
		return typ, "", 0, err
	}
	err = protoFields(raw, func(num int, val []byte, _ uint64) error {
		if num != 1 { // ObjectMeta
			return nil
		}
		return protoFields(val, func(num int, val []byte, _ uint64) error {
			switch num {
			case 6:
				rv = string(val)
			case 12: // annotations: map entries {key=1, value=2}
				var k, v []byte
				if err := protoFields(val, func(num int, val []byte, _ uint64) error {
					if num == 1 {
						k = val
					} else if num == 2 {
						v = val
					}
					return nil
				}); err != nil {
					return err
				}
				if string(k) == kubeletStampKey {
					stamp, _ = strconv.ParseInt(string(v), 10, 64)
				}
			}
			return nil
		})
	})
	return typ, rv, stamp, err
}

// measure starts or stops counting delivered events.
func (c *kubeletClients) measure(on bool) { c.measuring.Store(on) }

// drain waits until expected events were delivered, or maxWait.
func (c *kubeletClients) drain(ctx context.Context, expected int64, maxWait time.Duration) {
	deadline := time.Now().Add(maxWait)
	for c.delivered.Load() < expected && time.Now().Before(deadline) && ctx.Err() == nil {
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func (c *kubeletClients) result(r *KubeletResult) {
	r.Delivered, r.Bookmarks, r.Cut, r.Refused, r.ErrorEvents = c.delivered.Load(), c.bookmarks.Load(), c.cut.Load(), c.refused.Load(), c.errEv.Load()
	r.Latency = c.hist.Summary()
	if c.acks != nil {
		a := c.acks.finish()
		r.LatencyFromAck, r.EtcdWrite = a.fromAck, a.etcd
		r.AckNegative, r.AckUnmatched, r.AckOverflow = a.negative, a.unmatched, a.overflow
		r.SlowestFromAck = a.slowest
	}
	if r.FirstError == "" {
		r.FirstError = c.firstErr()
	}
}

// close ends every watch and closes the connections.
func (c *kubeletClients) close() {
	c.cancel()
	for _, tr := range c.trs {
		tr.CloseIdleConnections()
	}
	c.wg.Wait()
	for _, tr := range c.trs {
		tr.CloseIdleConnections()
	}
}
