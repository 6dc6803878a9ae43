package forward

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// checkHeader asserts what kube-apiserver's request-header authenticator
// would read from h: exactly id, never a caller's header.
func checkHeader(t *testing.T, pairs [][2]string, h http.Header, id *Identity) {
	t.Helper()
	if got := h.Values(HeaderUser); len(got) != 1 || got[0] != clean(id.Name) {
		t.Fatalf("%v: X-Remote-User = %q, want [%q]", pairs, got, id.Name)
	}
	var wantGroups []string
	for _, g := range id.Groups {
		wantGroups = append(wantGroups, clean(g))
	}
	if got := h.Values(HeaderGroup); !slices.Equal(got, wantGroups) {
		t.Fatalf("%v: X-Remote-Group = %q, want %q", pairs, got, wantGroups)
	}
	for k, vs := range h {
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, "x-remote-extra-"):
			key, err := url.PathUnescape(k[len(HeaderExtraPrefix):])
			if err != nil {
				t.Fatalf("%v: extra header %q does not unescape: %v", pairs, k, err)
			}
			want, ok := id.Extra[key]
			if !ok {
				// kube-apiserver lower-cases extra keys
				for ek, ev := range id.Extra {
					if strings.EqualFold(ek, key) {
						want, ok = ev, true
					}
				}
			}
			if !ok || len(vs) != len(want) {
				t.Fatalf("%v: extra %q = %q, want %q", pairs, key, vs, want)
			}
		case strings.HasPrefix(lk, "x-remote-"):
			if k != HeaderUser && k != HeaderGroup && !(k == HeaderUID && id.UID != "") {
				t.Fatalf("%v: caller's %s = %q passed", pairs, k, vs)
			}
		case lk == "authorization", strings.HasPrefix(lk, "x-withheld-"),
			lk == "transfer-encoding", lk == "content-length", lk == "proxy-authorization", lk == "x-expt":
			t.Fatalf("%v: %s = %q passed", pairs, k, vs)
		}
	}
}

func FuzzRequestHeader(f *testing.F) {
	f.Add("X-Remote-User", "admin", "x-remote-group", "system:masters", "alice", "dev", "scopes", "a")
	f.Add("Impersonate-User", "root", "Authorization", "Bearer t", "bob", "system:authenticated", "acme.com/p", "x\r\ny")
	f.Add("Connection", "X-Remote-User, Keep-Alive", "X-REMOTE-EXTRA-Scopes", "all", "system:anonymous", "system:unauthenticated", "", "")
	f.Add("x-remote-extra-acme.com%2fproject", "x", "X-Withheld-Len", "12", "c", "g\x00", "K%2F", "v")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, name, group, extraKey, extraValue string) {
		if name == "" {
			return // proxy always names a user (system:anonymous at least)
		}
		id := &Identity{Name: name, Groups: []string{group, "system:authenticated"}}
		if extraKey != "" {
			id.Extra = map[string][]string{extraKey: {extraValue}}
		}
		pairs := [][2]string{{k1, v1}, {k2, v2}, {"Accept", "application/json"}}
		h := upstreamHeader(pairs, id, "127.0.0.1", false)
		checkHeader(t, pairs, h, id)
		if len(h.Values("Accept")) == 0 && !strings.EqualFold(k1, "Connection") && !strings.EqualFold(k2, "Connection") {
			t.Fatalf("%v: Accept dropped", pairs)
		}
	})
}
