//go:build !race

package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The two unauthenticated memory attacks of issue 23, against the real
// binary with TLS, a client CA, a token file and service-account keys:
// neither carries a credential that authenticates, and before the fix each
// took more memory than --memory-limit (1,500 forged 0.5 MB tokens: RSS
// 70 MB -> 1.08 GB; 500 bodies declared 1 MiB: 68 -> 576 MiB). Each case
// checks that the process's peak RSS (VmHWM) stays under unauthLimit and
// that an authenticated client's GETs all succeed meanwhile.
//
// LAZYAPI_HOSTILE_BIN=path runs them against another build and only
// reports (the "before" figures in bench/RESULTS.md).

const (
	unauthLimit     = 384 << 20
	unauthLimitFlag = "--memory-limit=384Mi"
)

// unauthEnv is the authenticated deployment the attacks hit.
type unauthEnv struct {
	s        *authnSetup
	p        *process
	url      string
	tlsConf  *tls.Config
	baseline bool
	// startRSS is the resident set before the attack.
	startRSS int64
	start    time.Time
}

func newUnauthEnv(t *testing.T) *unauthEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("unauthenticated memory attacks: 750 MB of tokens and 500 connections")
	}
	e := &unauthEnv{s: newAuthnSetup(t)}
	pool := x509.NewCertPool()
	pool.AddCert(e.s.servingCA.Cert)
	e.tlsConf = &tls.Config{RootCAs: pool}
	old := lazyapiBin
	lazyapiBin = plainBin
	if b := os.Getenv("LAZYAPI_HOSTILE_BIN"); b != "" {
		lazyapiBin, e.baseline = b, true
	}
	defer func() { lazyapiBin = old }()
	e.url, e.p = e.s.startProcess(t, unauthLimitFlag, "--service-account-key-file=../authn/testdata/sa.key",
		"--service-account-issuer="+saIssuer)
	e.startRSS, e.start = procStatus(e.p.cmd.Process.Pid, "VmRSS:"), time.Now()
	return e
}

func (e *unauthEnv) failf(t *testing.T, format string, args ...any) {
	t.Helper()
	if e.baseline {
		t.Logf("baseline: "+format, args...)
		return
	}
	t.Errorf(format, args...)
}

// checkRSS reports the peak RSS and fails above unauthLimit.
func (e *unauthEnv) checkRSS(t *testing.T, what string) {
	t.Helper()
	peak := peakRSS(t, e.p)
	t.Logf("%s: RSS %d MiB before, peak %d MiB (limit %d MiB); attack took %v", what, e.startRSS>>20, peak>>20, unauthLimit>>20,
		time.Since(e.start).Round(100*time.Millisecond))
	if peak >= unauthLimit {
		e.failf(t, "%s: peak RSS %d MiB, want under --memory-limit %d MiB", what, peak>>20, unauthLimit>>20)
	}
}

// authedProbe GETs a ConfigMap with the token file's reader token until
// stop; every answer must be 200.
type authedProbe struct {
	ok, bad atomic.Int64
	slowest atomic.Int64 // ns
	first   atomic.Value // string: the first failure
	stop    chan struct{}
	done    chan struct{}
}

func (e *unauthEnv) startProbe() *authedProbe {
	pr := &authedProbe{stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: e.tlsConf}}
	go func() {
		defer close(pr.done)
		for {
			select {
			case <-pr.stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/authn/configmaps/one", nil)
			req.Header.Set("Authorization", "Bearer token-reader")
			start := time.Now()
			resp, err := hc.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				pr.bad.Add(1)
				pr.first.CompareAndSwap(nil, err.Error())
			} else {
				pr.ok.Add(1)
				if el := int64(time.Since(start)); el > pr.slowest.Load() {
					pr.slowest.Store(el)
				}
			}
			time.Sleep(20 * time.Millisecond) // pacing: ~50 requests/s, not synchronisation
		}
	}()
	return pr
}

func (pr *authedProbe) finish(t *testing.T, e *unauthEnv, what string) {
	t.Helper()
	close(pr.stop)
	<-pr.done
	t.Logf("%s: the authenticated client's GETs: %d ok (slowest %v), %d failed", what, pr.ok.Load(),
		time.Duration(pr.slowest.Load()).Round(time.Millisecond), pr.bad.Load())
	if pr.bad.Load() > 0 || pr.ok.Load() == 0 {
		e.failf(t, "%s: the authenticated client's GETs: %d ok, %d failed (first: %v); want all 200", what, pr.ok.Load(), pr.bad.Load(), pr.first.Load())
	}
}

// forgedTokens returns a maker of JWSs of the public issuer, 0.5 MB,
// each another: a real token's header (RS256, the key's kid) and signature
// around a padded payload, so the service-account authenticator parses it
// and checks its signature.
func forgedTokens(t *testing.T) func(i int64) string {
	t.Helper()
	b, err := os.ReadFile("../authn/testdata/sa-tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var toks map[string]string
	if err := json.Unmarshal(b, &toks); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(toks["pod"], ".")
	pad := strings.Repeat("x", 384<<10)
	return func(i int64) string {
		payload := fmt.Sprintf(`{"iss":%q,"sub":"forged-%d","pad":%q}`, saIssuer, i, pad)
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + parts[2]
	}
}

// TestHostileForgedServiceAccountTokens: 1,500 requests, each with its own
// 0.5 MB forged service-account token, 24 at a time; every one is 401.
func TestHostileForgedServiceAccountTokens(t *testing.T) {
	e := newUnauthEnv(t)
	const requests, workers = 1500, 24
	forged := forgedTokens(t)
	t.Logf("tokens of %d bytes", len(forged(0)))
	pr := e.startProbe()
	var next, unauthorized atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: e.tlsConf}}
			defer hc.CloseIdleConnections()
			for {
				i := next.Add(1)
				if i > requests {
					return
				}
				req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/authn/configmaps", nil)
				req.Header.Set("Authorization", "Bearer "+forged(i))
				resp, err := hc.Do(req)
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 401 {
					unauthorized.Add(1)
				} else {
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d", resp.StatusCode))
				}
			}
		})
	}
	wg.Wait()
	pr.finish(t, e, "forged tokens")
	if n := unauthorized.Load(); n != requests {
		e.failf(t, "forged tokens: %d of %d answered 401 (first other: %v)", n, requests, firstErr.Load())
	}
	e.checkRSS(t, "1,500 forged 0.5 MB service-account tokens")
}

// TestHostileUnauthenticatedBodies: 500 connections each POST a
// ConfigMap with Content-Length: 1048576, one byte of body and no
// credentials, and keep the connection open. Each must be answered 401
// at once, as kube-apiserver authenticates before it reads a body.
func TestHostileUnauthenticatedBodies(t *testing.T) {
	e := newUnauthEnv(t)
	const conns = 500
	pr := e.startProbe()
	host := strings.TrimPrefix(e.url, "https://")
	var unauthorized atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 50) // dialing and handshakes at a time
	var open []net.Conn
	var mu sync.Mutex
	for range conns {
		sem <- struct{}{}
		wg.Go(func() {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", host, e.tlsConf)
			<-sem
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			fmt.Fprintf(c, "POST /api/v1/namespaces/authn/configmaps HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{", host)
			// The answer must come without the body: well before the
			// server's 30 s read timeout.
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			resp.Body.Close()
			if resp.StatusCode == 401 {
				unauthorized.Add(1)
			} else {
				firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d", resp.StatusCode))
			}
		})
	}
	wg.Wait()
	pr.finish(t, e, "bodies")
	e.checkRSS(t, "500 unauthenticated POSTs declaring 1 MiB")
	if n := unauthorized.Load(); n != conns {
		e.failf(t, "bodies: %d of %d answered 401 within 15 s (first other: %v)", n, conns, firstErr.Load())
	}
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
}
