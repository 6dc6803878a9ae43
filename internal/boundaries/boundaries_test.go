package boundaries

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lazyapi/lazyapi/"

// pkgInfo is what go list says of one package of the module (test files
// excluded: tests may import anything).
type pkgInfo struct {
	imports []string // its own imports
	deps    []string // everything it imports, transitively
}

func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", module+"...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := make(map[string]pkgInfo)
	for line := range strings.Lines(string(out)) {
		parts := strings.SplitN(strings.TrimSpace(line), "|", 3)
		if len(parts) != 3 {
			continue
		}
		pkgs[strings.TrimPrefix(parts[0], module)] = pkgInfo{imports: strings.Fields(parts[1]), deps: strings.Fields(parts[2])}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

func hasPrefix(list []string, prefix string) (string, bool) {
	for _, p := range list {
		if p == strings.TrimSuffix(prefix, "/") || strings.HasPrefix(p, prefix) {
			return p, true
		}
	}
	return "", false
}

// TestBoundaries fails when a package imports what it must not:
//   - codec, cache, ratelimit, resource, authz and encryption are libraries
//     of plain types: no fasthttp or etcd server anywhere below them; codec,
//     cache, ratelimit and resource do not import net/http themselves
//     (k8s.io/apimachinery brings it in transitively, so only the package's
//     own imports are checked);
//   - encryption does not reach etcd at all (it decrypts bytes; callers read
//     them);
//   - fasthttp is the proxy's and forward's (and the commands' that run
//     it); forward imports nothing of lazyapi's;
//   - the embedded etcd (internal/embedetcd, etcd's embed package) is only
//     for the commands, the benchmark harness (and the robustness suite,
//     which uses bench's kinds) and the test helper internal/testing/etcdtest;
//   - internal/testing/... holds test-only helpers: no production package
//     (anything but tests and internal/testing itself) imports them.
func TestBoundaries(t *testing.T) {
	pkgs := listPackages(t)
	libraries := []string{"codec", "cache", "ratelimit", "resource", "authz", "encryption"}
	for _, name := range libraries {
		p, ok := pkgs[name]
		if !ok {
			t.Errorf("package %s not found by go list", name)
			continue
		}
		for _, bad := range []string{"github.com/valyala/fasthttp/", "go.etcd.io/etcd/server/", module + "proxy/", module + "cmd/"} {
			if dep, found := hasPrefix(p.deps, bad); found {
				t.Errorf("%s depends on %s (forbidden: %s)", name, dep, bad)
			}
		}
	}
	for _, name := range []string{"codec", "cache", "ratelimit", "resource"} {
		if slices.Contains(pkgs[name].imports, "net/http") {
			t.Errorf("%s imports net/http", name)
		}
	}
	// forward is a leaf: the upstream client and its headers, nothing of
	// lazyapi's below it (the caller's identity comes in plain fields).
	if p, ok := pkgs["forward"]; !ok {
		t.Error("package forward not found by go list")
	} else if dep, found := hasPrefix(p.deps, module); found {
		t.Errorf("forward depends on %s: it imports nothing of lazyapi's", dep)
	}
	if dep, found := hasPrefix(pkgs["encryption"].deps, "go.etcd.io/etcd/"); found {
		t.Errorf("encryption depends on %s: it must not reach etcd", dep)
	}
	allowed := func(name string, extra ...string) bool {
		return name == "cmd" || strings.HasPrefix(name, "cmd/") || slices.Contains(extra, name)
	}
	for name, p := range pkgs {
		if _, found := hasPrefix(p.deps, "github.com/valyala/fasthttp/"); found && !allowed(name, "proxy", "forward") && !strings.HasPrefix(name, "proxy/") {
			t.Errorf("%s depends on fasthttp: only proxy, its sub-packages, forward (and the commands) may", name)
		}
		if dep, found := hasPrefix(p.deps, module+"internal/testing/"); found && !strings.HasPrefix(name, "internal/testing/") {
			t.Errorf("%s depends on %s: internal/testing is for tests only", name, dep)
		}
		for _, embed := range []string{module + "internal/embedetcd", "go.etcd.io/etcd/server/v3/embed"} {
			if slices.Contains(p.deps, embed) && !allowed(name, "internal/embedetcd", "internal/testing/etcdtest", "bench", "internal/robustness") {
				t.Errorf("%s depends on %s: only the commands, bench, internal/robustness and internal/testing/etcdtest may start an embedded etcd", name, embed)
			}
		}
	}
}

// TestProxyLayers fails when an arrow between proxy and its sub-packages
// runs up: proxy (the handlers and the server) imports its sub-packages
// (proxy/conn, proxy/shared, proxy/encoding, proxy/estimate, proxy/request, ...), and a sub-package never reaches proxy itself, nor
// the commands; sub-packages import each other only in the order
// proxyLayers lists them (a package may import those before it).
func TestProxyLayers(t *testing.T) {
	pkgs := listPackages(t)
	// Lowest first.
	proxyLayers := []string{"proxy/conn", "proxy/shared", "proxy/encoding", "proxy/estimate", "proxy/request"}
	for name, p := range pkgs {
		if !strings.HasPrefix(name, "proxy/") {
			continue
		}
		if slices.Contains(p.deps, module+"proxy") {
			t.Errorf("%s depends on proxy: a sub-package must not import its parent", name)
		}
		if dep, found := hasPrefix(p.deps, module+"cmd/"); found {
			t.Errorf("%s depends on %s", name, dep)
		}
		at := slices.Index(proxyLayers, name)
		if at < 0 {
			t.Errorf("%s is not in proxyLayers: place it in the order", name)
			continue
		}
		for _, dep := range p.deps {
			sub, ok := strings.CutPrefix(dep, module)
			if !ok || !strings.HasPrefix(sub, "proxy/") {
				continue
			}
			if i := slices.Index(proxyLayers, sub); i < 0 || i >= at {
				t.Errorf("%s depends on %s, which is not below it in proxyLayers", name, sub)
			}
		}
	}
	for _, name := range proxyLayers {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("package %s not found by go list", name)
		}
	}
	// proxy/encoding writes bytes: no HTTP server, no etcd server, no cache
	// (what it encodes comes in as codec values).
	for _, bad := range []string{"github.com/valyala/fasthttp/", "go.etcd.io/etcd/server/", module + "cache", module + "store"} {
		if dep, found := hasPrefix(pkgs["proxy/encoding"].deps, bad); found {
			t.Errorf("proxy/encoding depends on %s (forbidden: %s)", dep, bad)
		}
	}
	if slices.Contains(pkgs["proxy/encoding"].imports, "net/http") {
		t.Error("proxy/encoding imports net/http")
	}
	// proxy/shared is the mechanism of shared reads, chunks of bytes and
	// their members: no etcd, nothing of lazyapi but proxy/conn (a shared
	// LIST's body compressed as conn compresses one response; and what
	// conn writes sockets with, internal/quietsock), and no
	// HTTP of its own.
	for _, dep := range pkgs["proxy/shared"].deps {
		if sub, ok := strings.CutPrefix(dep, module); (ok && sub != "proxy/conn" && sub != "internal/quietsock") || strings.HasPrefix(dep, "go.etcd.io/") {
			t.Errorf("proxy/shared depends on %s: it owns the shared-read mechanism only", dep)
		}
	}
	for _, imp := range pkgs["proxy/shared"].imports {
		if imp == "net/http" || strings.HasPrefix(imp, "github.com/valyala/fasthttp") {
			t.Errorf("proxy/shared imports %s", imp)
		}
	}
}
