// Package e2e holds lazyapi's end-to-end tests: they build the real lazyapi
// binary, run it against a real etcd seeded in kube-apiserver's storage
// format, and check it with kubectl and client-go.
package e2e
