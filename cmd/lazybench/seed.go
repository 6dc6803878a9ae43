package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/lazyapi/lazyapi/bench"
)

func runSeed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("seed", "seed [flags]", stdout)
	var (
		ef        etcdFlags
		kind      = fs.String("kind", "configmap", "kind to seed: configmap, secret, pod, widget (a custom resource; its CRD is seeded too)")
		count     = fs.Int("count", 1000, "number of objects")
		nss       = fs.Int("namespaces", 1, "spread the objects over this many namespaces")
		nsPrefix  = fs.String("namespace-prefix", bench.DefaultNamespacePrefix, "prefix of the seeded namespaces (clean removes by it)")
		size      = fs.String("size", "4KiB", "stored object size: SIZE, fixed:SIZE, uniform:MIN-MAX, lognormal:MEDIAN[:SIGMA]")
		asJSON    = fs.Bool("json", false, "store built-in kinds as JSON (kube-apiserver --storage-media-type=application/json); custom resources are always JSON")
		seed      = fs.Uint64("seed", 1, "random seed (same seed, same objects)")
		inFlight  = fs.Int("in-flight", 8, "concurrent etcd transactions")
		quiet     = fs.Bool("quiet", false, "no progress bar")
		cleanMode = fs.Bool("clean-first", false, "remove previously seeded objects first")
	)
	ef.add(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	k, ok := bench.LookupKind(*kind)
	if !ok {
		return fmt.Errorf("unknown --kind %q (want configmap, secret, pod or widget)", *kind)
	}
	sd, err := bench.ParseSizeDist(*size)
	if err != nil {
		return fmt.Errorf("invalid --size: %w", err)
	}
	cli, err := ef.connect(true)
	if err != nil {
		return err
	}
	defer cli.Close()
	if *cleanMode {
		if _, err := bench.Clean(ctx, cli, bench.CleanConfig{Prefix: ef.prefix, NamespacePrefix: *nsPrefix}); err != nil {
			return err
		}
	}
	cfg := bench.SeedConfig{Prefix: ef.prefix, Kind: k, Count: *count, Namespaces: *nss, NamespacePrefix: *nsPrefix, Size: sd, JSON: *asJSON, Seed: *seed, InFlight: *inFlight}
	if !*quiet && isTTY(stderr) {
		cfg.Progress = stderr
	}
	res, err := bench.Seed(ctx, cli, cfg)
	if err != nil {
		return err
	}
	format := "protobuf"
	if k.Custom || *asJSON {
		format = "JSON"
	}
	fmt.Fprintf(stdout, "seeded %d %s (%s, %s) in %d namespaces: %s in %d transactions, %s (%.0f objects/s), etcd revision %d\n",
		res.Objects, k.Resource, sd, format, res.Namespaces, bench.HumanBytes(res.Bytes), res.Txns, res.Duration.Round(time.Millisecond),
		float64(res.Objects)/res.Duration.Seconds(), res.Revision)
	return nil
}

func runClean(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("clean", "clean [flags]", stdout)
	var ef etcdFlags
	nsPrefix := fs.String("namespace-prefix", bench.DefaultNamespacePrefix, "prefix of the seeded namespaces")
	ef.add(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	cli, err := ef.connect(true)
	if err != nil {
		return err
	}
	defer cli.Close()
	n, err := bench.Clean(ctx, cli, bench.CleanConfig{Prefix: ef.prefix, NamespacePrefix: *nsPrefix})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d keys (namespaces %s* and their seeded objects)\n", n, *nsPrefix)
	return nil
}
