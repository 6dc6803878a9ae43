package bench

import (
	"slices"
	"sync"
	"time"
)

// kubeletAcks splits the kubelet scenario's delivery latency at etcd's
// acknowledgement. The latency from the stamp (the write's wall-clock
// time, taken before the object is encoded and Put) includes etcd's own
// write latency (Raft and fsync on this machine's disk), which neither
// server can influence and which differs between the servers' phases, since
// they run one after the other. So the writer records, for every write of
// the measured window, when etcd acknowledged it (its Put, Delete or Txn
// returned), keyed by the revision of etcd's response, which is the
// written object's mod revision and so the resourceVersion its watch event
// carries; and a watch that receives the event records its arrival minus
// that acknowledgement as well.
//
// The map holds only the window's writes: it is sized to the schedule
// (tens of thousands of writes at most) and refuses entries past that
// (counted as overflow).
type kubeletAcks struct {
	start time.Time // the window's start, for the slowest events' offsets
	limit int

	mu    sync.Mutex
	byRev map[int64]kubeletAck
	// pending are arrivals whose revision had no acknowledgement yet (the
	// event reached the watch before the writer's goroutine saw etcd's
	// response); resolved by finish.
	pending  []kubeletArrival
	negative int64 // arrivals before their acknowledgement (recorded as 0)
	overflow int64
	slowest  []KubeletSlowEvent // ascending by FromAck, at most kubeletSlowest

	etcd    *Histogram // per write: stamp → acknowledgement
	fromAck *Histogram // per timed event: acknowledgement → arrival
}

// kubeletAck is one write: its start (the stamp) and etcd's
// acknowledgement, in Unix nanoseconds, and what it wrote.
type kubeletAck struct {
	written, acked int64
	kind           byte
}

type kubeletArrival struct {
	rev int64
	at  int64 // Unix nanoseconds
}

// KubeletSlowEvent is one of the events slowest from etcd's
// acknowledgement: when it arrived (from the window's start, and the wall
// clock, to line it up with periodic work such as bookmarks due on whole
// seconds), its latency from the acknowledgement and from the stamp, etcd's
// write latency for it, the write that made it and its revision.
type KubeletSlowEvent struct {
	AtMillis        float64   `json:"at_ms"`
	Arrived         time.Time `json:"arrived"`
	FromAckMillis   float64   `json:"from_ack_ms"`
	FromStampMillis float64   `json:"from_stamp_ms"`
	EtcdMillis      float64   `json:"etcd_write_ms"`
	Write           string    `json:"write"`
	Revision        int64     `json:"revision"`
}

// kubeletSlowest is how many of the slowest events a result lists.
const kubeletSlowest = 20

func newKubeletAcks(writes int) *kubeletAcks {
	return &kubeletAcks{limit: writes, byRev: make(map[int64]kubeletAck, writes), etcd: NewHistogram(), fromAck: NewHistogram()}
}

// begin marks the window's start.
func (a *kubeletAcks) begin(t time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.start = t
	a.mu.Unlock()
}

// acked records a write of the window: the revision of etcd's response,
// when the write started (its stamp) and when etcd acknowledged it.
func (a *kubeletAcks) acked(rev int64, written, acked time.Time, kind byte) {
	if a == nil {
		return
	}
	a.etcd.Record(acked.Sub(written))
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.byRev) >= a.limit {
		a.overflow++
		return
	}
	a.byRev[rev] = kubeletAck{written: written.UnixNano(), acked: acked.UnixNano(), kind: kind}
}

// arrived records a timed event's arrival at a watch, by its object's
// resourceVersion.
func (a *kubeletAcks) arrived(rev int64, at time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ack, ok := a.byRev[rev]
	if !ok {
		a.pending = append(a.pending, kubeletArrival{rev: rev, at: at.UnixNano()})
		return
	}
	a.record(rev, ack, at.UnixNano())
}

// record adds one event's latency from its acknowledgement; a.mu is held.
func (a *kubeletAcks) record(rev int64, ack kubeletAck, at int64) {
	d := time.Duration(at - ack.acked)
	if d < 0 {
		a.negative++
		d = 0
	}
	a.fromAck.Record(d)
	if len(a.slowest) == kubeletSlowest && d <= msDuration(a.slowest[0].FromAckMillis) {
		return
	}
	ev := KubeletSlowEvent{AtMillis: float64(at-a.start.UnixNano()) / 1e6, Arrived: time.Unix(0, at).UTC(), FromAckMillis: float64(d) / 1e6,
		FromStampMillis: float64(at-ack.written) / 1e6, EtcdMillis: float64(ack.acked-ack.written) / 1e6,
		Write: kubeletWriteKind(ack.kind), Revision: rev}
	i, _ := slices.BinarySearchFunc(a.slowest, ev.FromAckMillis, func(e KubeletSlowEvent, v float64) int {
		switch {
		case e.FromAckMillis < v:
			return -1
		case e.FromAckMillis > v:
			return 1
		}
		return 0
	})
	a.slowest = slices.Insert(a.slowest, i, ev)
	if len(a.slowest) > kubeletSlowest {
		a.slowest = a.slowest[1:]
	}
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * 1e6) }

func kubeletWriteKind(k byte) string {
	switch k {
	case 'l':
		return "lease"
	case 'p':
		return "pod status"
	case 'm':
		return "rollout: pod marked for deletion"
	case 'd':
		return "rollout: pod deleted"
	case 'c':
		return "rollout: pod created"
	case 's':
		return "secret rotation"
	}
	return string(k)
}

// kubeletAckResult is what kubeletAcks measured.
type kubeletAckResult struct {
	fromAck, etcd                 Percentiles
	negative, unmatched, overflow int64
	slowest                       []KubeletSlowEvent
}

// finish resolves the pending arrivals (those whose revision is still
// unknown are unmatched) and returns the figures.
func (a *kubeletAcks) finish() kubeletAckResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	var r kubeletAckResult
	for _, p := range a.pending {
		if ack, ok := a.byRev[p.rev]; ok {
			a.record(p.rev, ack, p.at)
		} else {
			r.unmatched++
		}
	}
	a.pending = nil
	r.fromAck, r.etcd = a.fromAck.Summary(), a.etcd.Summary()
	r.negative, r.overflow = a.negative, a.overflow
	r.slowest = slices.Clone(a.slowest)
	slices.Reverse(r.slowest) // slowest first
	return r
}
