//go:build tools

// Package deps pins the project's chosen dependencies in go.mod before every
// one of them is imported by real code, so that go mod tidy keeps them.
package deps

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/VictoriaMetrics/metrics"
	_ "github.com/goccy/go-json"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/pflag"
	_ "github.com/valyala/fasthttp"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/zap"
	_ "golang.org/x/time/rate"
	_ "gonum.org/v1/plot"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/runtime/serializer"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/metadata"
	_ "sigs.k8s.io/randfill"
)
