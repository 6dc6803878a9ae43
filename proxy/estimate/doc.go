// Package estimate owns the numbers admission and LIST sizing estimate
// from: per collection, what the proxy saw of it (Stats: the average
// stored value size of its last first page, its size sampled from etcd
// once for a burst of callers, the largest response of the last minute),
// the working-set estimate of a LIST or GET from them (List), and the
// sizes of decrypted values remembered by key and revision so that a
// protobuf LIST's size pass need not decrypt them again (SizeMemo).
//
// It reads nothing itself: package proxy records what it reads and
// writes here and asks for the estimates when it admits a request
// (admit.go) or sizes a LIST's first page.
package estimate
