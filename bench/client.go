package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// collector accumulates one target's measurements; safe for concurrent use.
type collector struct {
	lat, ttfb                        *Histogram
	requests, errs, throttled, bytes atomic.Int64
	lists, complete, incomplete      atomic.Int64
	mu                               sync.Mutex
	codes                            map[string]int64
	firstErr                         string
}

func newCollector() *collector {
	return &collector{lat: NewHistogram(), ttfb: NewHistogram(), codes: map[string]int64{}}
}

func (c *collector) code(code string) {
	c.mu.Lock()
	c.codes[code]++
	c.mu.Unlock()
}

func (c *collector) fail(err error) {
	c.mu.Lock()
	if c.firstErr == "" {
		c.firstErr = err.Error()
	}
	c.mu.Unlock()
}

// client issues requests to one target and records them.
type client struct {
	t      Target
	http   *http.Client
	accept string
	c      *collector
}

// get issues one GET and returns the body in buf (reused) with the status.
func (cl *client) get(ctx context.Context, path string, buf []byte) ([]byte, int, error) {
	code, err := cl.do(ctx, path, func(r io.Reader, status int) (int64, []byte, error) {
		var err error
		buf, err = readAll(r, buf[:0])
		return int64(len(buf)), buf, err
	})
	return buf, code, err
}

// getList issues one LIST request and reads a 200 body as it streams
// (readList), never holding it: the list's info and the status.
func (cl *client) getList(ctx context.Context, path string) (listInfo, int, error) {
	var info listInfo
	code, err := cl.do(ctx, path, func(r io.Reader, status int) (int64, []byte, error) {
		if status != http.StatusOK {
			body, err := readAll(io.LimitReader(r, 4096), nil)
			n, _ := io.Copy(io.Discard, r)
			return int64(len(body)) + n, body, err
		}
		var n int64
		var err error
		info, n, err = readList(r)
		if err != nil {
			err = fmt.Errorf("LIST %s: %w", path, err)
		}
		return n, nil, err
	})
	return info, code, err
}

// do issues one GET of path, reads its body with read (given the status;
// it returns the bytes read and, for a failure message, the body or its
// start) and records the request in the collector: status, bytes, latency
// and time to first byte. A request cut by ctx is not recorded.
func (cl *client) do(ctx context.Context, path string, read func(r io.Reader, status int) (int64, []byte, error)) (int, error) {
	req, err := cl.t.newRequest(ctx, path, cl.accept)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var first time.Time
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { first = time.Now() },
	}))
	resp, err := cl.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		cl.c.requests.Add(1)
		cl.c.errs.Add(1)
		cl.c.code("error")
		cl.c.fail(err)
		return 0, err
	}
	n, body, err := read(resp.Body, resp.StatusCode)
	resp.Body.Close()
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	d := time.Since(start)
	cl.c.requests.Add(1)
	cl.c.bytes.Add(n)
	cl.c.code(strconv.Itoa(resp.StatusCode))
	if err != nil {
		cl.c.errs.Add(1)
		cl.c.fail(err)
		return resp.StatusCode, err
	}
	cl.c.lat.Record(d)
	if !first.IsZero() {
		cl.c.ttfb.Record(first.Sub(start))
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		cl.c.throttled.Add(1)
	case resp.StatusCode >= 300:
		cl.c.errs.Add(1)
		cl.c.fail(fmt.Errorf("GET %s: status %d: %.200s", path, resp.StatusCode, body))
	}
	return resp.StatusCode, nil
}

func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// listOnce performs one full LIST (following continue tokens when paged)
// and judges its completeness.
func (cl *client) listOnce(ctx context.Context, s *Scenario, path string, expected int64) {
	q := url.Values{}
	if s.Limit > 0 {
		q.Set("limit", strconv.Itoa(s.Limit))
	}
	if s.LabelSelector != "" {
		q.Set("labelSelector", s.LabelSelector)
	}
	if s.ResourceVersion != "" {
		q.Set("resourceVersion", s.ResourceVersion)
	}
	total := 0
	ok := true
	for {
		p := path
		if len(q) > 0 {
			p += "?" + q.Encode()
		}
		info, code, err := cl.getList(ctx, p)
		if ctx.Err() != nil {
			return // cut off by the end of the run: not counted
		}
		if err != nil || code != http.StatusOK {
			ok = false
			break
		}
		total += info.Items
		if info.Continue == "" || s.Limit == 0 {
			break
		}
		q.Set("continue", info.Continue)
		q.Del("resourceVersion")
	}
	cl.c.lists.Add(1)
	if ok && (expected < 0 || int64(total) == expected) {
		cl.c.complete.Add(1)
	} else {
		if ok {
			cl.c.fail(fmt.Errorf("LIST %s returned %d items, want %d", path, total, expected))
		}
		cl.c.incomplete.Add(1)
	}
}
