// Package kubecapture records what kube-apiserver v1.37 itself serves, as
// the oracle and the data of lazyapi's compatibility features: its
// OpenAPI v2 and v3 documents (embedded by package openapi), its discovery
// documents, and its OpenAPI documents for a set of CustomResourceDefinitions
// together with the values it stored for them in etcd (test oracles).
//
// Its only code is a test that runs when LAZYAPI_CAPTURE=1 and the
// kube-apiserver built by bench/kube-apiserver.sh is present:
//
//	bash bench/kube-apiserver.sh build
//	LAZYAPI_CAPTURE=1 go test ./internal/testing/kubecapture -run TestCapture -v
//
// It starts an embedded etcd and kube-apiserver (through
// bench/kube-apiserver.sh) on loopback, reads the documents, creates the
// CRDs of crds.go and reads again, then writes the files (gzip where large)
// into the repository. TestCaptureNotFound (same switch) records its
// answers to paths nothing is served at
// (proxy/testdata/kube-apiserver-notfound.json).
package kubecapture
