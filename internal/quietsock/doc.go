// Package quietsock makes the system calls of lazyapi's busiest sockets
// quietly, so that an event does not also wake the Go runtime's monitor
// thread.
//
// A Go program that goes idle between events pays for each wake-up in
// thread switches, and a system call made through the syscall package
// adds some: entering it wakes the runtime's monitor thread (sysmon) from
// its deep sleep, which then naps in 20 µs steps until every P is idle
// again. At 15,000 kubelet-shaped watches, where each event is a short busy
// period between idle ones, the monitor's naps and wake-ups were about half
// of lazyapi's thread switches (and some 40% of kube-apiserver's), and
// each event's two system calls woke it: the etcd client's read of the
// event and the frame's write to its watch's socket. Made quietly, at
// 5,000 kubelet-shaped nodes, they took 95% of the monitor's thread
// switches away, half of all, and 15% of lazyapi's CPU per event; its
// p99 delivery latency rose from 6.5 to 8.1 ms (median of 3 interleaved
// pairs; kube-apiserver's is about 18 ms), most likely because the P a
// small write holds is no longer handed to another thread while it
// writes (not measured apart) (bench/RESULTS.md ## fanout: thread
// wake-ups per event).
//
// A read or write of a non-blocking socket never sleeps: it takes what
// fits, or fails with EAGAIN and the caller waits in the poller
// (syscall.RawConn). So it can be made as a raw system call, which the
// scheduler is not told of, for as long as it takes the kernel to copy the
// bytes: MaxQuiet bounds that. Larger writes (a LIST's coalesced chunks)
// go through the syscall package as before, which also keeps the monitor
// awake while such work runs (it preempts long-running goroutines).
// Quiet calls are made on Linux without the race detector (sys_loud.go
// says why not with it); elsewhere Read and Write are the syscall
// package's, and off Linux Wrap returns its connection.
package quietsock

// MaxQuiet is the most bytes a quiet read or write moves: one TLS record.
const MaxQuiet = 16 << 10
