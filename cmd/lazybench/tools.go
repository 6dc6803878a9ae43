package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/embedetcd"
)

func runRefServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("refserver", "refserver [flags]", stderr)
	var ef etcdFlags
	ef.add(fs)
	bind := fs.String("bind-address", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8081, "port to listen on")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	cli, err := ef.connect(true)
	if err != nil {
		return err
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(*bind, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	srv := &http.Server{Handler: bench.NewRefServer(cli, ef.prefix), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "reference server on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runRecord(args []string, stdout io.Writer) error {
	fs := newFlagSet("record", "record --report DIR/results.json [--repo .]", stdout)
	report := fs.String("report", "", "results.json written by lazybench suite (required)")
	repo := fs.String("repo", ".", "lazyapi source tree holding bench/RESULTS.md")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *report == "" {
		return errors.New("--report is required")
	}
	f, err := os.Open(*report)
	if err != nil {
		return fmt.Errorf("cannot open --report: %w", err)
	}
	defer f.Close()
	rep, err := bench.ReadReport(f)
	if err != nil {
		return err
	}
	p := filepath.Join(*repo, "bench", "RESULTS.md")
	if err := bench.UpdateResultsSection(p, "suite", rep.SuiteMarkdown()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "updated ## suite in %s\n", p)
	return nil
}

func runEtcd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("etcd", "etcd [--listen 127.0.0.1:2379] [--data-dir DIR]", stderr)
	listen := fs.String("listen", "127.0.0.1:2379", "client address")
	dir := fs.String("data-dir", "", "data directory (default: a temporary one, removed at exit)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "lazybench-etcd-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	e, err := embedetcd.Start(embedetcd.Config{Dir: *dir, ClientAddr: *listen, UnsafeNoFsync: true})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(stderr, "etcd on %s (data in %s); Ctrl-C stops it\n", e.Endpoint(), *dir)
	<-ctx.Done()
	return nil
}
