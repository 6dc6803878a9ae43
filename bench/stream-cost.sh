#!/bin/bash
# What the watch cache's etcd watches cost in the real binary: one lazyapi
# ($1) against a fresh standalone etcd (lazybench etcd, $2) on loopback,
# every resource preloaded (the default --watch-cache-preload=*), no
# objects; /metrics of both 20 s after readiness, then etcd's Watch
# messages over 30 s with one write a second to another key (a cluster is
# never idle; etcd sends no progress for a watch starting after its
# revision). Figures: bench/RESULTS.md, ## stream: one etcd watch stream
# per cached resource.
#
#   go build -o /tmp/lazyapi ./cmd/lazyapi && go build -o /tmp/lazybench ./cmd/lazybench
#   bash bench/stream-cost.sh /tmp/lazyapi /tmp/lazybench after
set -eu
bin=$1 lazybench=$2 tag=${3:-lazyapi}
ep=127.0.0.1:23791 port=18089
d=$(mktemp -d)
"$lazybench" etcd --listen $ep --data-dir "$d" >"$d/etcd.log" 2>&1 &
epid=$!
for _ in $(seq 100); do curl -sf http://$ep/health >/dev/null && break; sleep 0.1; done
"$bin" --etcd-servers=http://$ep --port=$port >"$d/lazyapi.log" 2>&1 &
lpid=$!
trap 'kill $lpid $epid 2>/dev/null; wait 2>/dev/null; rm -rf "$d"' EXIT
for _ in $(seq 300); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
sleep 20 # the preloaded fills settle (measurement, not synchronisation)
m() { curl -s http://127.0.0.1:$port/metrics; }
e() { curl -s http://$ep/metrics; }
sum() { awk '{s += $2} END {print s + 0}'; }
ready=$(m | grep -c '^lazyapi_cache_state{.*} 2$' || true)
goroutines=$(m | grep '^go_goroutines ' | sum)
rss=$(m | grep '^process_resident_memory_bytes ' | sum)
heap=$(m | grep '^go_memstats_heap_inuse_bytes ' | sum)
stacks=$(m | grep '^go_memstats_stack_inuse_bytes ' | sum)
streams=$(e | grep '^etcd_debugging_mvcc_watch_stream_total' | sum)
recv0=$(e | grep '^grpc_server_msg_received_total{.*grpc_method="Watch"' | sum)
sent0=$(e | grep '^grpc_server_msg_sent_total{.*grpc_method="Watch"' | sum)
for _ in $(seq 30); do
	curl -s -X POST http://$ep/v3/kv/put -d '{"key":"L290aGVyL3g=","value":"eA=="}' >/dev/null # /other/x
	sleep 1
done
recv1=$(e | grep '^grpc_server_msg_received_total{.*grpc_method="Watch"' | sum)
sent1=$(e | grep '^grpc_server_msg_sent_total{.*grpc_method="Watch"' | sum)
echo "$tag: ready resources $ready; etcd watch streams $streams; goroutines $goroutines; RSS $((${rss%.*} >> 20)) MiB; heap in use $((${heap%.*} >> 20)) MiB; stacks $((${stacks%.*} >> 10)) KiB; etcd Watch messages in 30 s: received $((recv1 - recv0)), sent $((sent1 - sent0)); $(uptime | sed 's/.*load/load/')"
