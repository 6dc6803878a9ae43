package main

import (
	"errors"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lazyapi/lazyapi/ratelimit"
)

// addLimitFlags registers the limiter's flags in fs, bound to c's fields,
// with c's current values as defaults. --max-inflight-bytes and
// --max-single-request-bytes default to 0, "derive from --memory-limit".
func addLimitFlags(fs *pflag.FlagSet, c *ratelimit.Config) {
	fs.IntVar(&c.MaxRequestsInflight, "max-requests-inflight", c.MaxRequestsInflight,
		"Maximum number of non-watch requests served at once.")
	fs.IntVar(&c.MaxWatchesInflight, "max-watches-inflight", c.MaxWatchesInflight,
		"Maximum number of open watches; 0 = no count limit (watches are bounded by --max-watch-bytes and their clients' fair shares of it).")
	fs.Var((*byteSize)(&c.MaxInflightBytes), "max-inflight-bytes",
		"Byte budget for the working sets of in-flight requests (quantity, e.g. 256Mi). 0 = half of --memory-limit minus the cache budget.")
	fs.Var((*byteSize)(&c.MaxWatchBytes), "max-watch-bytes",
		"Byte budget of open watches: what each holds idle (25Ki, 49Ki over TLS), its initial events from the watch cache while it sends them, and its queued frames (quantity). A client holding watches gets more while it holds at most 7/8 of it divided among the clients holding watches. 0 = --max-inflight-bytes.")
	fs.Var((*byteSize)(&c.MaxSingleRequestBytes), "max-single-request-bytes",
		"Largest working-set estimate admitted, alone, when above --max-inflight-bytes (quantity). 0 = twice --max-inflight-bytes.")
	fs.IntVar(&c.MaxQueued, "max-queued-requests", c.MaxQueued,
		"Maximum number of requests waiting for admission over all clients; 0 rejects at once.")
	fs.DurationVar(&c.MaxQueueWait, "max-queue-wait", c.MaxQueueWait,
		"Maximum time a request waits for admission before a 429 with Retry-After. Default: 15s, at most a quarter of --request-timeout (as kube-apiserver's API Priority and Fairness).")
	fs.IntVar(&c.MaxBulkInflight, "max-bulk-lists-inflight", c.MaxBulkInflight,
		"Maximum number of bulk LISTs (estimated response above --bulk-list-threshold) served at once; others queue per client, then get a 429. 0 = half of GOMAXPROCS, at least 1.")
	fs.Var((*byteSize)(&c.BulkListBytes), "bulk-list-threshold",
		"Estimated LIST response size (items x average stored size) above which a LIST is bulk (quantity, e.g. 16Mi).")
	fs.Var((*byteSize)(&c.ShortReservedBytes), "short-reserved-inflight-bytes",
		"Part of --max-inflight-bytes that bulk LISTs cannot reserve, kept for GETs and small LISTs (quantity). 0 = a quarter of --max-inflight-bytes.")
	fs.DurationVar(&c.BulkYield, "bulk-list-yield", c.BulkYield,
		"Longest pause of a bulk LIST stream per flush while GETs or small LISTs are in flight; 0 = never pause.")
	fs.Float64Var(&c.ClientShare, "per-client-share", c.ClientShare,
		"Fraction (0-1] of the short and bulk seats, and of the byte budget, one client (user, or remote IP when anonymous) may hold at once; its further requests queue behind its own. 1 = no cap.")
	fs.Float64Var(&c.PerClientQPS, "per-client-qps", c.PerClientQPS,
		"Sustained requests per second admitted per client (user or remote IP); 0 = unlimited.")
	fs.IntVar(&c.PerClientBurst, "per-client-burst", c.PerClientBurst,
		"Burst of --per-client-qps.")
}

// limitFlagNames maps ratelimit.Config's fields to their flags: the
// library's errors name fields, the command line's name flags.
var limitFlagNames = strings.NewReplacer(
	"ratelimit: ", "",
	"MaxRequestsInflight", "--max-requests-inflight",
	"MaxWatchesInflight", "--max-watches-inflight",
	"MaxInflightBytes", "--max-inflight-bytes",
	"MaxWatchBytes", "--max-watch-bytes",
	"MaxSingleRequestBytes", "--max-single-request-bytes",
	"MaxQueued", "--max-queued-requests",
	"MaxQueueWait", "--max-queue-wait",
	"MaxBulkInflight", "--max-bulk-lists-inflight",
	"BulkListBytes", "--bulk-list-threshold",
	"ShortReservedBytes", "--short-reserved-inflight-bytes",
	"BulkYield", "--bulk-list-yield",
	"ClientShare", "--per-client-share",
	"PerClientQPS", "--per-client-qps",
	"PerClientBurst", "--per-client-burst",
)

// limitError is a ratelimit configuration error as a command-line error
// naming the flags.
func limitError(err error) error {
	return usageError{errors.New(limitFlagNames.Replace(err.Error()))}
}
