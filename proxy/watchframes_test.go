package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
)

// readWatchUntil reads the frames of a watch response (JSON lines, or
// 4-byte length-prefixed protobuf frames) until one contains marker, and
// returns them.
func readWatchUntil(body io.Reader, protobuf bool, marker []byte) ([][]byte, error) {
	br := bufio.NewReader(body)
	var frames [][]byte
	for {
		var f []byte
		if protobuf {
			var n [4]byte
			if _, err := io.ReadFull(br, n[:]); err != nil {
				return frames, err
			}
			f = make([]byte, 4+binary.BigEndian.Uint32(n[:]))
			copy(f, n[:])
			if _, err := io.ReadFull(br, f[4:]); err != nil {
				return frames, err
			}
		} else {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return frames, err
			}
			f = line
		}
		frames = append(frames, f)
		if bytes.Contains(f, marker) {
			return frames, nil
		}
	}
}

// TestWatchSharedFrames opens many concurrent watches (from the cache, or
// from etcd) with mixed formats and selectors while ConfigMaps change (selector moves included),
// then, with frame sharing off, one lone watcher per format and selector
// from the same revision: every concurrent watcher must have received
// exactly the lone watcher's bytes, and frames must have been shared.
func TestWatchSharedFrames(t *testing.T) {
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) { testWatchSharedFrames(t, m.cached) })
	}
}

func testWatchSharedFrames(t *testing.T, cached bool) {
	e := watchEnv(t, cached, 1000)
	for i := range 6 {
		app := []string{"web", "db"}[i%2]
		e.put(t, "configmaps", cm("cm-"+strconv.Itoa(i), app, "0"))
	}
	rev0 := e.put(t, "configmaps", cm("cm-6", "web", "0"))

	formats := []struct {
		name, accept string
		protobuf     bool
	}{
		{"json", "application/json", false},
		{"protobuf", "application/vnd.kubernetes.protobuf", true},
		{"partial-json", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", false},
		{"partial-protobuf", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", true},
	}
	// Every selector selects the end marker (app=web, name zz-end-marker).
	selectors := []string{"", "labelSelector=app%3Dweb", "labelSelector=app%21%3Ddb", "fieldSelector=metadata.name%21%3Dcm-1"}
	marker := []byte("zz-end-marker")
	const copies = 3

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(accept, sel string) (*http.Response, error) {
		u := e.url + "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=" + strconv.FormatInt(rev0, 10)
		if sel != "" {
			u += "&" + sel
		}
		req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err == nil && resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
		}
		return resp, err
	}

	type combo struct{ f, s int }
	var mu sync.Mutex
	got := map[combo][][][]byte{}
	var wg sync.WaitGroup
	for fi, f := range formats {
		for si, sel := range selectors {
			for range copies {
				resp, err := open(f.accept, sel)
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer resp.Body.Close()
					frames, err := readWatchUntil(resp.Body, f.protobuf, marker)
					if err != nil {
						t.Errorf("%s %q: after %d frames: %v", f.name, sel, len(frames), err)
					}
					mu.Lock()
					got[combo{fi, si}] = append(got[combo{fi, si}], frames)
					mu.Unlock()
				}()
			}
		}
	}

	// Changes while the watchers read: updates that move objects in and
	// out of the label selectors, creates and deletes.
	writes := 1
	for round := range 4 {
		for i := range 7 {
			app := []string{"web", "db"}[(i+round+1)%2]
			e.put(t, "configmaps", cm("cm-"+strconv.Itoa(i), app, strconv.Itoa(round+1)))
			writes++
		}
		if _, err := e.cli.Delete(ctx, "/registry/configmaps/ns/cm-"+strconv.Itoa(round)); err != nil {
			t.Fatal(err)
		}
		writes++
	}
	e.put(t, "configmaps", cm(string(marker), "web", "end"))
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	shared, err := metricValue(e.ms, `lazyapi_watch_frames_total{result="shared"}`)
	if err != nil || shared == 0 {
		t.Errorf(`lazyapi_watch_frames_total{result="shared"} = %v, %v; want > 0`, shared, err)
	}
	t.Logf("%d writes, %d concurrent watchers, %v frames shared", writes, len(formats)*len(selectors)*copies, shared)

	// The lone watchers, one at a time, each encoding its own frames.
	proxy.SetWatchFrameCacheBytes(e.srv, 0)
	shared0, _ := metricValue(e.ms, `lazyapi_watch_frames_total{result="shared"}`)
	for fi, f := range formats {
		for si, sel := range selectors {
			resp, err := open(f.accept, sel)
			if err != nil {
				t.Fatal(err)
			}
			want, err := readWatchUntil(resp.Body, f.protobuf, marker)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("lone %s %q: after %d frames: %v", f.name, sel, len(want), err)
			}
			if sel == "" && len(want) != writes {
				t.Errorf("lone %s %q: %d frames, want %d (one per write)", f.name, sel, len(want), writes)
			}
			for ci, frames := range got[combo{fi, si}] {
				if len(frames) != len(want) {
					t.Errorf("%s %q watcher %d: %d frames, lone watcher %d", f.name, sel, ci, len(frames), len(want))
					continue
				}
				for i := range want {
					if !bytes.Equal(frames[i], want[i]) {
						t.Errorf("%s %q watcher %d frame %d:\n got %q\nwant %q", f.name, sel, ci, i, frames[i], want[i])
						break
					}
				}
			}
		}
	}
	if v, _ := metricValue(e.ms, `lazyapi_watch_frames_total{result="shared"}`); v != shared0 {
		t.Errorf("frames shared with sharing off: %v, want 0", v-shared0)
	}
}

// TestWatchReplayFarBehind: a watcher replaying more than 4,096 events
// encodes the far ones itself without keeping them (private), then shares
// the recent ones; a second replay gets the same bytes.
func TestWatchReplayFarBehind(t *testing.T) {
	e := watchEnv(t, true, 6000)
	rev0 := e.put(t, "configmaps", cm("first", "web", "0"))
	const n = 5000
	kvs := make([][2]string, n)
	for i := range kvs {
		obj := cm("cm-"+strconv.Itoa(i), "web", strconv.Itoa(i))
		v, err := storagefmt.Protobuf(obj)
		if err != nil {
			t.Fatal(err)
		}
		kvs[i] = [2]string{storagefmt.Key("/registry", "configmaps", "ns", obj.Name), string(v)}
	}
	e.putMany(t, kvs)
	marker := []byte("zz-end-marker")
	revEnd := e.put(t, "configmaps", cm(string(marker), "web", "end"))
	watchFrom := func(rev int64) [][]byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion="+strconv.FormatInt(rev, 10), nil)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		frames, err := readWatchUntil(resp.Body, false, marker)
		if err != nil {
			t.Fatalf("after %d frames: %v", len(frames), err)
		}
		return frames
	}
	// The cache applies the writes after etcd acknowledged them: a watch
	// that sees the marker shows that the whole history is there.
	watchFrom(revEnd - 1)
	replay := func() [][]byte {
		t.Helper()
		frames := watchFrom(rev0)
		if len(frames) != n+1 {
			t.Fatalf("%d frames, want %d", len(frames), n+1)
		}
		return frames
	}
	metric := func(result string) float64 {
		v, _ := metricValue(e.ms, `lazyapi_watch_frames_total{result="`+result+`"}`)
		return v
	}
	first := replay()
	if p, enc := metric("private"), metric("encoded"); p < n+1-4096 || enc == 0 {
		t.Errorf("first replay: %v private, %v encoded for sharing; want >= %d private and some shared", p, enc, n+1-4096)
	}
	second := replay()
	if metric("shared") == 0 {
		t.Error("second replay shared no frame")
	}
	for i := range first {
		if !bytes.Equal(first[i], second[i]) {
			t.Fatalf("frame %d differs:\n%q\n%q", i, first[i], second[i])
		}
	}
	if v, _ := metricValue(e.ms, "lazyapi_watch_frame_cache_bytes"); v <= 0 || v > proxy.WatchFrameCacheBytes {
		t.Errorf("lazyapi_watch_frame_cache_bytes = %v, want in (0, %d]", v, proxy.WatchFrameCacheBytes)
	}
	// A small bound: frames are evicted, the bytes stay the same.
	const small = 16 << 10
	proxy.SetWatchFrameCacheBytes(e.srv, small)
	if v, _ := metricValue(e.ms, "lazyapi_watch_frame_cache_bytes"); v > small {
		t.Errorf("after lowering the bound: lazyapi_watch_frame_cache_bytes = %v, want <= %d", v, small)
	}
	third := replay()
	if v, _ := metricValue(e.ms, "lazyapi_watch_frame_cache_bytes"); v > small {
		t.Errorf("lazyapi_watch_frame_cache_bytes = %v, want <= %d", v, small)
	}
	for i := range first {
		if !bytes.Equal(first[i], third[i]) {
			t.Fatalf("bound %d: frame %d differs:\n%q\n%q", small, i, first[i], third[i])
		}
	}
}
