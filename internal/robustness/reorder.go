package robustness

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// ReorderProxy is a gRPC proxy in front of one etcd member that delivers
// progress notifications ahead of a replaying watch's catch-up events:
// for a watch created at least ReplayRevisions behind etcd's revision (a
// fill's replay of its history), the events etcd sends during the first
// Hold after its Created response are held until then, and a progress
// notification that comes meanwhile is passed on at once, overtaking them. That is the order etcd
// itself produced for a watch on a stream shared with others (its
// sendLoop's random choice between a notification generated for the
// stream and the new watch's Created response, see cache.openWatch) and,
// before 3.5.8, for any watch (etcd-io/etcd#15220). A client that takes a
// notification as "every event up to its revision was sent" without
// checking must then miss writes; everything else goes through in order.
type ReorderProxy struct {
	Hold time.Duration

	l         net.Listener
	srv       *grpc.Server
	cc        *grpc.ClientConn
	overtakes atomic.Int64 // notifications passed on ahead of held events
}

// StartReorderProxy proxies to the etcd member at target ("host:port").
func StartReorderProxy(target string, hold time.Duration) (*ReorderProxy, error) {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cc.Close()
		return nil, err
	}
	p := &ReorderProxy{Hold: hold, l: l, cc: cc}
	p.srv = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(p.handle),
		grpc.MaxRecvMsgSize(1<<30), grpc.MaxSendMsgSize(1<<30))
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// Endpoint is the proxy's client URL.
func (p *ReorderProxy) Endpoint() string { return "http://" + p.l.Addr().String() }

// Overtakes counts the notifications passed on ahead of held events.
func (p *ReorderProxy) Overtakes() int64 { return p.overtakes.Load() }

// Close stops the proxy and its streams.
func (p *ReorderProxy) Close() {
	p.srv.Stop()
	p.cc.Close()
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

const watchMethod = "/etcdserverpb.Watch/Watch"

// ReplayRevisions is how far behind etcd's revision a watch starts for
// the ReorderProxy to take it for a replay. A watch opened at the
// revision just read (a fill with no history to replay, a re-open) has a
// few revisions to catch up: its order is left as etcd sends it.
const ReplayRevisions = 50

// handle forwards one call (unary or stream) to the member.
func (p *ReorderProxy) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), md.Copy()))
	defer cancel()
	cs, err := p.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	var startsMu sync.Mutex
	var starts []int64 // the start revisions of the creates not yet answered, in order
	go func() {
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				_ = cs.CloseSend()
				return
			}
			var req pb.WatchRequest
			if method == watchMethod && proto.Unmarshal(m, &req) == nil && req.GetCreateRequest() != nil {
				startsMu.Lock()
				starts = append(starts, req.GetCreateRequest().StartRevision)
				startsMu.Unlock()
			}
			if err := cs.SendMsg(&m); err != nil {
				cancel()
				return
			}
		}
	}()
	out := &orderedSender{ss: ss, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if method == watchMethod {
		go out.drain()
	}
	created := map[int64]time.Time{}
	for {
		var m []byte
		err := cs.RecvMsg(&m)
		if err != nil {
			out.close(method == watchMethod)
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if method != watchMethod {
			if err := ss.SendMsg(&m); err != nil {
				return err
			}
			continue
		}
		p.route(out, created, m, func() int64 {
			startsMu.Lock()
			defer startsMu.Unlock()
			if len(starts) == 0 {
				return 0
			}
			start := starts[0]
			starts = starts[1:]
			return start
		})
	}
}

// route queues a watch response, or passes a progress notification on at
// once when events are held.
func (p *ReorderProxy) route(out *orderedSender, created map[int64]time.Time, m []byte, nextStart func() int64) {
	var wr pb.WatchResponse
	if proto.Unmarshal(m, &wr) != nil {
		out.push(m, time.Time{})
		return
	}
	now := time.Now()
	switch {
	case wr.Created:
		// A create answered: the oldest pending one (clientv3 sends the
		// next create after this answer).
		if start := nextStart(); start > 0 && wr.Header.GetRevision()-start >= ReplayRevisions {
			created[wr.WatchId] = now
		} else {
			delete(created, wr.WatchId)
		}
		out.push(m, time.Time{})
	case len(wr.Events) > 0 && now.Sub(created[wr.WatchId]) < p.Hold:
		out.push(m, created[wr.WatchId].Add(p.Hold))
	case len(wr.Events) == 0 && !wr.Canceled && wr.CompactRevision == 0 && out.holding():
		p.overtakes.Add(1)
		out.send(m)
	default:
		out.push(m, time.Time{})
	}
}

// orderedSender sends a watch stream's responses in order, each not
// before its time, except those sent at once (send).
type orderedSender struct {
	ss     grpc.ServerStream
	sendMu sync.Mutex
	mu     sync.Mutex
	q      []queued
	wake   chan struct{}
	done   chan struct{}
	closed bool
}

type queued struct {
	m  []byte
	at time.Time
}

func (o *orderedSender) push(m []byte, at time.Time) {
	o.mu.Lock()
	o.q = append(o.q, queued{m, at})
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *orderedSender) holding() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q) > 0
}

func (o *orderedSender) send(m []byte) {
	o.sendMu.Lock()
	defer o.sendMu.Unlock()
	_ = o.ss.SendMsg(&m)
}

// drain sends the queue until close.
func (o *orderedSender) drain() {
	defer close(o.done)
	for {
		o.mu.Lock()
		if len(o.q) == 0 {
			closed := o.closed
			o.mu.Unlock()
			if closed {
				return
			}
			<-o.wake
			continue
		}
		next := o.q[0]
		if d := time.Until(next.at); d > 0 {
			o.mu.Unlock()
			select {
			case <-time.After(d): // a held response's time
			case <-o.wake:
			}
			continue
		}
		o.q = o.q[1:]
		o.mu.Unlock()
		o.send(next.m)
	}
}

// close sends what is queued and stops drain.
func (o *orderedSender) close(draining bool) {
	if !draining {
		return
	}
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	<-o.done
}
