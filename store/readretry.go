package store

import (
	"context"
	"errors"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/grpc"
)

// rangeMethod is the gRPC method of every etcd read (clientv3 Get).
const rangeMethod = "/etcdserverpb.KV/Range"

// MaxMoveRetries bounds how often one read is re-sent because the
// client's endpoints moved while it was in flight.
const MaxMoveRetries = 3

// errMoved is the cause with which ReadRetry cancels a read in flight.
var errMoved = errors.New("store: etcd endpoints moved")

// ReadRetry re-sends the reads an etcd client has in flight when a
// Failover moves the client's endpoints away from where they were sent.
//
// gRPC drains the connection to an endpoint the client leaves without
// ending the calls open on it: a read waiting on a member that was cut off
// from the quorum (its read index never comes) or that stopped answering
// would wait out its call bound (Config.CallTimeout) and become a 503,
// although the members read from now would answer it at once. ReadRetry
// cancels every read in flight when the endpoints move (Failover calls
// moved after Client.SetEndpoints returned, so the balancer already picks
// from the new endpoints) and sends it again, within the caller's own
// deadline, at most MaxMoveRetries times per attempt of clientv3's own
// retry interceptor (which runs outside this one and takes a cancelled
// attempt for a retryable one); moves are at least a probe round apart. Reads are idempotent: a read at
// a pinned revision (a LIST's later pages) answers the same bytes on any
// member; one at the current revision is linearizable wherever it is
// answered and begins after the request did. kube-apiserver's etcd client
// retries its unary reads on another endpoint the same way (clientv3's
// retry interceptor, on Unavailable).
//
// Only KV Range calls are retried; writes and streams (watches) pass
// through. A read that already answered is never re-sent, and nothing has
// been written to an HTTP client from a read that has not answered.
//
// The zero value is not usable: use NewReadRetry. Safe for concurrent use.
type ReadRetry struct {
	mu    sync.Mutex
	calls map[*inflight]struct{} // reads in flight; guarded by mu

	retries *metrics.Counter // nil without metrics
}

type inflight struct {
	cancel context.CancelCauseFunc
}

// NewReadRetry returns a ReadRetry; m, when not nil, receives
// lazyapi_etcd_read_retries_total (reads re-sent after a move).
func NewReadRetry(m *metrics.Set) *ReadRetry {
	r := &ReadRetry{calls: make(map[*inflight]struct{})}
	if m != nil {
		r.retries = m.GetOrCreateCounter("lazyapi_etcd_read_retries_total")
	}
	return r
}

// DialOption returns the option that installs r in an etcd client
// (clientv3.Config.DialOptions). It runs inside clientv3's own retry
// interceptor, once per attempt.
func (r *ReadRetry) DialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(r.intercept)
}

func (r *ReadRetry) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != rangeMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithCancelCause(ctx)
		c := &inflight{cancel: cancel}
		r.mu.Lock()
		r.calls[c] = struct{}{}
		r.mu.Unlock()
		err := invoker(actx, method, req, reply, cc, opts...)
		r.mu.Lock()
		delete(r.calls, c)
		r.mu.Unlock()
		moved := err != nil && errors.Is(context.Cause(actx), errMoved)
		cancel(nil)
		if !moved || ctx.Err() != nil || attempt >= MaxMoveRetries {
			return err
		}
		if r.retries != nil {
			r.retries.Inc()
		}
	}
}

// moved cancels every read in flight; each is sent again on the client's
// new endpoints.
func (r *ReadRetry) moved() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.calls {
		c.cancel(errMoved)
	}
}
