package proxy

import (
	"bytes"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// metricHelp is the # HELP text of every metric family /metrics serves,
// lazyapi's and the process and Go runtime families of
// metrics.WriteProcessMetrics. A family missing here is served with an
// empty help (TestMetricsMetadata fails on it): add its line when adding
// a metric, and its row to docs/operating.md's metrics table (## Metrics,
// TestMetricsDocumented). Label values: see that section.
var metricHelp = map[string]string{
	// Requests.
	"lazyapi_apiserver_request_total":            "Requests answered, by verb (as kube-apiserver: GET, LIST, WATCH, CONNECT, an unserved method, or other), resource, response code and output format.",
	"lazyapi_apiserver_request_duration_seconds": "Request latency in seconds, by verb and resource (for watches: the stream's length).",
	"lazyapi_apiserver_response_bytes_total":     "Response bytes written, by verb and resource.",
	"lazyapi_objects_served_total":               "Objects served as stored (passthrough) or transcoded (protobuf to JSON).",
	"lazyapi_decode_errors_total":                "Stored values that could not be decoded.",
	"lazyapi_handler_panics_total":               "Handler panics recovered (answered 500).",
	"lazyapi_list_restarts_total":                "LISTs read from etcd again at its current revision because etcd compacted the revision they had chosen between two of their pages, before any byte of theirs left.",
	"lazyapi_streams_aborted_total":              "Responses aborted because the client took none of their bytes for the write timeout, or the request overran the request timeout.",
	"lazyapi_write_coalesce_buffer_bytes":        "Bytes of the buffers collecting a TLS stream's sealed records into one socket write.",
	"lazyapi_render_cache_bytes":                 "Bytes of JSON renderings of hot objects kept (charged to the watch cache's byte budget).",
	"lazyapi_render_cache_total":                 "JSON renderings copied from the rendering cache (hit), transcoded (miss), and added to it (kept).",
	"lazyapi_memory_limit_bytes":                 "The process memory limit in bytes (GOMEMLIMIT is derived from it); 0 when none is set.",
	"lazyapi_gc_percent":                         "The collector's GOGC in force (-1: off).",

	// Forwarding to kube-apiserver (package forward).
	"lazyapi_forwarded_requests_total":      "Requests forwarded to kube-apiserver, by verb and kube-apiserver's response code (503: it did not answer).",
	"lazyapi_forward_duration_seconds":      "Latency of forwarded requests to kube-apiserver's response header, in seconds, by verb.",
	"lazyapi_forwarded_bytes_total":         "Bytes forwarded, by direction: upstream (request bodies, upgraded streams from the client) and downstream (response bodies, upgraded streams to the client).",
	"lazyapi_forward_upstream_errors_total": "Forwarded requests kube-apiserver did not answer (connection refused, connect or TLS timeout, reset before the response).",
	"lazyapi_forward_seats_in_use":          "Forwarded requests held, by class (short, stream).",
	"lazyapi_forward_rejected_total":        "Forwarded requests answered 429, by class and reason (full: every seat of the class held; client-share: the client holds its share).",
	"lazyapi_forward_reserved_bytes":        "Bytes the forwarded requests in flight reserve (96 KiB each), out of the in-flight memory budget.",

	// Authentication and authorization.
	"lazyapi_audit_events_total":                              "Audit events written to the audit log.",
	"lazyapi_audit_events_dropped_total":                      "Audit events dropped because the writer's queue (10,000 events or 16 MiB) was full.",
	"lazyapi_audit_write_errors_total":                        "Audit events the log file could not take (write errors).",
	"lazyapi_header_buffer_bytes":                             "Bytes of request header buffers grown past their first 4 KiB, held before the headers are complete (before authentication).",
	"lazyapi_header_buffer_refused_total":                     "Request headers answered 429 because the header buffer budget was full.",
	"lazyapi_authenticated_requests_total":                    "Requests authenticated, by method (x509, token, serviceaccount, webhook, anonymous).",
	"lazyapi_authentication_failures_total":                   "Requests answered 401.",
	"lazyapi_authentication_webhook_requests_total":           "TokenReviews sent to the authentication webhook, by HTTP status code (retries included; cache hits are not requests).",
	"lazyapi_authentication_webhook_request_duration_seconds": "Latency of the TokenReviews sent to the authentication webhook, in seconds.",
	"lazyapi_authorization_decisions_total":                   "Decisions of each authorization mode, by mode and decision (allowed, denied, no_opinion).",
	"lazyapi_authorization_errors_total":                      "Authorization decisions that came with an error, by mode.",
	"lazyapi_authorization_forbidden_total":                   "Requests answered 403.",
	"lazyapi_authorization_webhook_requests_total":            "SubjectAccessReviews sent to the authorization webhook, by HTTP status code (retries included; cache hits are not requests).",
	"lazyapi_authorization_webhook_request_duration_seconds":  "Latency of the SubjectAccessReviews sent to the authorization webhook, in seconds.",
	"lazyapi_rbac_objects":                                    "RBAC objects in the authorization index, by kind.",
	"lazyapi_rbac_rebuilds_total":                             "Rebuilds of the RBAC index (one per batch of RBAC changes).",
	"lazyapi_rbac_decode_errors_total":                        "RBAC objects that do not decode (they grant nothing).",

	// etcd.
	"lazyapi_etcd_request_duration_seconds": "etcd request latency in seconds, by operation (revision, get, range).",
	"lazyapi_etcd_request_errors_total":     "Failed etcd requests, by operation.",
	"lazyapi_etcd_page_retries_total":       "Pages of a LIST or shared read (after its first) read again after etcd did not answer in time.",
	"lazyapi_etcd_compaction_revision":      "The revision kube-apiserver last compacted etcd to (compact_rev_key).",
	"lazyapi_etcd_members_excluded":         "etcd members left out because they do not answer linearizable reads.",
	"lazyapi_etcd_members_slow":             "etcd members left out because they answer much slower than the fastest.",
	"lazyapi_etcd_endpoint_changes_total":   "Changes of the etcd endpoints read from.",
	"lazyapi_etcd_member_active":            "1 for each etcd member (endpoint) read from, else 0.",
	"lazyapi_etcd_member_probe_seconds":     "Median latency of an etcd member's linearizable read probes, in seconds, by endpoint.",
	"lazyapi_etcd_preferred_member_active":  "1 while reads go to the preferred etcd member alone, 0 while they go to the other members.",
	"lazyapi_etcd_read_retries_total":       "etcd reads re-sent after the endpoints read from changed.",

	// Watches and shared reads.
	"lazyapi_watchers_open":                            "WATCH streams open.",
	"lazyapi_watch_events_sent_total":                  "Watch events written to clients.",
	"lazyapi_watchers_closed_lagging_total":            "Watches ended because their client fell too far behind.",
	"lazyapi_watch_etcd_fallback_total":                "Watches served from an etcd watch because the cache could not serve them.",
	"lazyapi_watch_frames_total":                       "Watch frames taken from the shared encoding of an event (shared), encoded for it (encoded), or encoded by one watcher alone (private).",
	"lazyapi_watch_frame_cache_bytes":                  "Bytes held by the shared watch frames.",
	"lazyapi_watch_shared_scans_total":                 "Shared etcd scans started for the initial events of concurrent watches of an uncached collection.",
	"lazyapi_watch_shared_scan_members_total":          "Watches that took their initial events from a shared scan.",
	"lazyapi_watch_shared_scan_segments_total":         "Pages the shared scans read from etcd and encoded.",
	"lazyapi_watch_shared_scan_segments_dropped_total": "Shared scan pages dropped from a full window before a lagging member took them.",
	"lazyapi_watch_shared_scan_bytes":                  "Bytes of encoded pages the shared scans hold.",
	"lazyapi_list_shared_reads_total":                  "Shared etcd reads started for concurrent identical LISTs of an uncached collection.",
	"lazyapi_list_shared_read_members_total":           "LISTs that wrote their body from a shared read.",
	"lazyapi_list_shared_read_chunks_total":            "Body chunks the shared LIST reads produced.",
	"lazyapi_list_shared_read_members_lagged_total":    "Shared LIST members ended for falling behind a full window.",
	"lazyapi_list_shared_read_bytes":                   "Bytes of body chunks the shared LIST reads hold.",
	"lazyapi_cache_fill_waits_total":                   "Requests that waited for a watch cache fill, by result (served, timeout).",

	// Admission.
	"lazyapi_ratelimit_inflight":                  "Admitted requests in flight, by kind (short, watch, bulk).",
	"lazyapi_ratelimit_seats":                     "The limits in-flight requests are admitted against, by kind.",
	"lazyapi_ratelimit_bulk_reserved_bytes":       "Working-set bytes reserved by bulk LISTs.",
	"lazyapi_ratelimit_bulk_yields_total":         "Pauses of bulk LIST streams for in-flight short requests.",
	"lazyapi_ratelimit_bulk_yield_timeouts_total": "Pauses of bulk LIST streams ended because they reached the longest pause allowed.",
	"lazyapi_ratelimit_bulk_yield_seconds":        "Length of the pauses of bulk LIST streams, in seconds.",
	"lazyapi_ratelimit_queued":                    "Requests waiting for admission.",
	"lazyapi_ratelimit_draining":                  "Responses whose handler is done and whose body is being written.",
	"lazyapi_ratelimit_watch_reserved_bytes":      "Bytes reserved by open watches in their steady state (idle cost plus queued frames), within the watches' byte budget.",
	"lazyapi_ratelimit_watch_budget_bytes":        "The watches' byte budget.",
	"lazyapi_ratelimit_watch_clients":             "Clients holding at least one watch (the fair share of the watch budget is divided among them).",
	"lazyapi_ratelimit_reserved_bytes":            "Working-set bytes reserved by admitted requests.",
	"lazyapi_ratelimit_budget_bytes":              "The in-flight working-set budget in bytes.",
	"lazyapi_ratelimit_admitted_total":            "Admissions, by how (immediate, queued).",
	"lazyapi_ratelimit_rejected_total":            "Requests answered 429 by admission, by reason.",
	"lazyapi_ratelimit_cancelled_total":           "Requests that gave up while queued for admission.",
	"lazyapi_ratelimit_queue_wait_seconds":        "Time requests spent queued for admission, in seconds.",
	"lazyapi_ratelimit_estimated_bytes_total":     "Working-set bytes admission estimated for requests.",
	"lazyapi_ratelimit_used_bytes_total":          "Working-set bytes requests reported using.",

	// Watch cache.
	"lazyapi_cache_budget_bytes":                 "The watch cache's byte budget.",
	"lazyapi_cache_used_bytes":                   "Bytes the watch cache holds.",
	"lazyapi_cache_bytes":                        "Bytes cached, by resource.",
	"lazyapi_cache_objects":                      "Objects cached, by resource.",
	"lazyapi_cache_history_oldest_revision":      "The oldest revision a watch can start from in the cache, by resource.",
	"lazyapi_cache_history_newest_revision":      "The newest revision in the cache, by resource.",
	"lazyapi_cache_watchers":                     "Open cache watchers, by resource.",
	"lazyapi_cache_watchers_indexed":             "Open cache watchers woken only by the changes their field selector or namespace can match, by resource.",
	"lazyapi_cache_watchers_lagging_total":       "Cache watchers closed for falling behind, by resource.",
	"lazyapi_cache_state":                        "Fill state by resource: 0 disabled, 1 filling, 2 ready, 3 relisting, 4 refused, 5 evicted, 6 closed.",
	"lazyapi_cache_lag_revisions":                "Revisions the cache is behind etcd, by resource.",
	"lazyapi_cache_requests_total":               "Watches served by the cache (hit) or by etcd (miss, fallback), by resource.",
	"lazyapi_cache_not_cached_total":             "Resources kept out of the cache budget, by resource and reason.",
	"lazyapi_cache_relists_total":                "Cache re-reads after etcd compaction, by resource.",
	"lazyapi_cache_fill_read_bytes_total":        "Key and value bytes cache fills read by ranges and samples, by resource.",
	"lazyapi_cache_replay_bytes_total":           "Bytes the replays of the history before a fill received from etcd's watch, by resource.",
	"lazyapi_cache_refused_unread_total":         "Cache refusals decided without reading values beyond a sample, by resource.",
	"lazyapi_cache_refused_estimated_total":      "Cache refusals of a fill decided from its estimate, by resource.",
	"lazyapi_cache_etcd_watches_opened_total":    "etcd watches the cache opened.",
	"lazyapi_cache_etcd_progress_requests_total": "Progress requests the cache sent on its etcd watches.",
	"lazyapi_cache_replay_incomplete_total":      "Fills whose replay of the history before them lacked events at a progress notification, by resource.",

	// Encryption at rest.
	"lazyapi_decrypt_failures_total":          "Stored values that did not decrypt, by resource and provider.",
	"lazyapi_decrypt_size_memo_entries":       "Encrypted values whose plaintext sizes are recorded for the next protobuf LIST's size pass.",
	"lazyapi_encryption_config_reloads_total": "Reloads of the encryption configuration file, by status (success, failure).",

	// Go runtime (metrics.WriteProcessMetrics).
	"go_sched_latencies_seconds":          "Time goroutines spent runnable before running, in seconds.",
	"go_mutex_wait_seconds_total":         "Time goroutines spent blocked on a mutex, in seconds.",
	"go_gc_mark_assist_cpu_seconds_total": "CPU time goroutines spent assisting the collector's marking, in seconds.",
	"go_gc_cpu_seconds_total":             "CPU time spent by the garbage collector, in seconds.",
	"go_gc_pauses_seconds":                "Stop-the-world pauses of the garbage collector, in seconds.",
	"go_scavenge_cpu_seconds_total":       "CPU time spent returning memory to the operating system, in seconds.",
	"go_memlimit_bytes":                   "The Go runtime's soft memory limit (GOMEMLIMIT) in bytes.",
	"go_memstats_alloc_bytes":             "Bytes of allocated heap objects.",
	"go_memstats_alloc_bytes_total":       "Bytes allocated for heap objects since start.",
	"go_memstats_buck_hash_sys_bytes":     "Bytes used by the profiling bucket hash table.",
	"go_memstats_frees_total":             "Heap objects freed since start.",
	"go_memstats_gc_cpu_fraction":         "Fraction of the CPU time used by the garbage collector since start.",
	"go_memstats_gc_sys_bytes":            "Bytes used for garbage collection metadata.",
	"go_memstats_heap_alloc_bytes":        "Bytes of allocated heap objects.",
	"go_memstats_heap_idle_bytes":         "Bytes in idle (unused) heap spans.",
	"go_memstats_heap_inuse_bytes":        "Bytes in in-use heap spans.",
	"go_memstats_heap_objects":            "Allocated heap objects.",
	"go_memstats_heap_released_bytes":     "Bytes of physical memory returned to the operating system.",
	"go_memstats_heap_sys_bytes":          "Bytes of heap memory obtained from the operating system.",
	"go_memstats_last_gc_time_seconds":    "Time of the last garbage collection, in seconds since the epoch.",
	"go_memstats_lookups_total":           "Pointer lookups performed by the runtime.",
	"go_memstats_mallocs_total":           "Heap objects allocated since start.",
	"go_memstats_mcache_inuse_bytes":      "Bytes of allocated mcache structures.",
	"go_memstats_mcache_sys_bytes":        "Bytes of memory obtained from the operating system for mcache structures.",
	"go_memstats_mspan_inuse_bytes":       "Bytes of allocated mspan structures.",
	"go_memstats_mspan_sys_bytes":         "Bytes of memory obtained from the operating system for mspan structures.",
	"go_memstats_next_gc_bytes":           "Heap size at which the next garbage collection starts, in bytes.",
	"go_memstats_other_sys_bytes":         "Bytes of memory used for other runtime allocations.",
	"go_memstats_stack_inuse_bytes":       "Bytes in stack spans.",
	"go_memstats_stack_sys_bytes":         "Bytes of stack memory obtained from the operating system.",
	"go_memstats_sys_bytes":               "Bytes of memory obtained from the operating system.",
	"go_cgo_calls_count":                  "Calls from Go to C since start.",
	"go_cpu_count":                        "Logical CPUs usable by the process.",
	"go_gc_duration_seconds":              "Garbage collection pause durations, in seconds.",
	"go_gc_forced_count":                  "Garbage collections forced by the application.",
	"go_gomaxprocs":                       "The GOMAXPROCS setting.",
	"go_goroutines":                       "Goroutines that currently exist.",
	"go_threads":                          "Operating system threads created by the runtime.",
	"go_info":                             "The Go version the binary was built with.",
	"go_info_ext":                         "The Go version the binary was built with, in parts.",

	// Process (Linux /proc and cgroup).
	"process_cpu_seconds_system_total":              "CPU time spent in the kernel, in seconds.",
	"process_cpu_seconds_total":                     "CPU time spent in user and kernel mode, in seconds.",
	"process_cpu_seconds_user_total":                "CPU time spent in user mode, in seconds.",
	"process_major_pagefaults_total":                "Page faults that loaded a page from disk.",
	"process_minor_pagefaults_total":                "Page faults served without loading a page from disk.",
	"process_num_threads":                           "Operating system threads of the process.",
	"process_resident_memory_bytes":                 "Resident set size of the process, in bytes.",
	"process_start_time_seconds":                    "Start time of the process, in seconds since the epoch.",
	"process_virtual_memory_bytes":                  "Virtual memory size of the process, in bytes.",
	"process_virtual_memory_peak_bytes":             "Peak virtual memory size of the process, in bytes.",
	"process_resident_memory_peak_bytes":            "Peak resident set size of the process, in bytes.",
	"process_resident_memory_anon_bytes":            "Anonymous resident memory of the process, in bytes.",
	"process_resident_memory_file_bytes":            "File-backed resident memory of the process, in bytes.",
	"process_resident_memory_shared_bytes":          "Shared resident memory of the process, in bytes.",
	"process_io_read_bytes_total":                   "Bytes the process read (all I/O).",
	"process_io_written_bytes_total":                "Bytes the process wrote (all I/O).",
	"process_io_read_syscalls_total":                "Read system calls of the process.",
	"process_io_write_syscalls_total":               "Write system calls of the process.",
	"process_io_storage_read_bytes_total":           "Bytes the process read from storage.",
	"process_io_storage_written_bytes_total":        "Bytes the process wrote to storage.",
	"process_pressure_cpu_waiting_seconds_total":    "Time some of the cgroup's tasks waited for a CPU, in seconds.",
	"process_pressure_cpu_stalled_seconds_total":    "Time all of the cgroup's tasks waited for a CPU, in seconds.",
	"process_pressure_io_waiting_seconds_total":     "Time some of the cgroup's tasks waited for I/O, in seconds.",
	"process_pressure_io_stalled_seconds_total":     "Time all of the cgroup's tasks waited for I/O, in seconds.",
	"process_pressure_memory_waiting_seconds_total": "Time some of the cgroup's tasks waited for memory, in seconds.",
	"process_pressure_memory_stalled_seconds_total": "Time all of the cgroup's tasks waited for memory, in seconds.",
	"process_cgroup_cpu_throttled_seconds_total":    "Time the cgroup's CPU quota throttled the process, in seconds.",
	"process_open_fds":                              "Open file descriptors of the process.",
	"process_max_fds":                               "The limit of open file descriptors of the process.",
}

// exposeMetadata turns on the # HELP and # TYPE lines of the metrics
// library, which is process-wide (metrics.ExposeMetadata): once, on the
// first Server.
var exposeMetadata = sync.OnceFunc(func() { metrics.ExposeMetadata(true) })

// appendHelp appends exposition to dst with each "# HELP family" line the
// metrics library writes completed by metricHelp's text.
func appendHelp(dst, exposition []byte) []byte {
	const prefix = "# HELP "
	for len(exposition) > 0 {
		line := exposition
		if i := bytes.IndexByte(exposition, '\n'); i >= 0 {
			line, exposition = exposition[:i+1], exposition[i+1:]
		} else {
			exposition = nil
		}
		if !bytes.HasPrefix(line, []byte(prefix)) {
			dst = append(dst, line...)
			continue
		}
		family := bytes.TrimSpace(line[len(prefix):])
		if bytes.IndexByte(family, ' ') >= 0 { // help already written
			dst = append(dst, line...)
			continue
		}
		dst = append(dst, prefix...)
		dst = append(dst, family...)
		if h := metricHelp[string(family)]; h != "" {
			dst = append(dst, ' ')
			dst = append(dst, h...)
		}
		dst = append(dst, '\n')
	}
	return dst
}
