// Package tool pins Helm v4 for rendering and linting the chart in
// deploy/helm/lazyapi (cmd/lazyapi TestHelmChart), in a module of its own so
// that lazyapi's module does not depend on Helm:
//
//	cd deploy/helm/tool && go build -o /work/bin/helm helm.sh/helm/v4/cmd/helm
//
// (2 m 42 s on 2 busy cores, 1.3 GiB peak RSS, with the dependencies in the
// module cache; .ci/run does not build it, and TestHelmChart skips without
// a helm: LAZYAPI_HELM, /work/bin/helm or PATH.)
package tool
