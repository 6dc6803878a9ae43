package main

import (
	"context"
	"errors"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// serveAPI will start the resource table and the HTTP server once the
// resource and proxy packages exist.
func serveAPI(ctx context.Context, c *config, cli *clientv3.Client, lg *zap.Logger, stdout io.Writer) error {
	return errors.New("cannot serve: the proxy and resource packages are not in this build yet")
}
