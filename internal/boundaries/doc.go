// Package boundaries holds no code: its test checks the import rules the
// design claims (which packages may reach fasthttp, net/http, etcd's
// server and the embedded etcd), with go list, as Tailscale's deps_test.go.
package boundaries
