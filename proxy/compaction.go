package proxy

import (
	"context"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Compaction, as kube-apiserver knows it.
//
// kube-apiserver's compactor writes the revision it is about to compact
// etcd to under compact_rev_key (outside --etcd-prefix), then compacts; every
// kube-apiserver watches that key and drops its watch cache's snapshots
// older than the revision (k8s.io/apiserver pkg/storage/etcd3/compact.go,
// pkg/storage/cacher/compactor.go). A LIST at an exact revision older than
// the compaction (resourceVersionMatch=Exact, or a continue token) then
// goes to etcd, which answers 410 Expired. lazyapi watches the same key, so
// its watch cache stops answering those reads from the snapshots it can
// still build, and etcd answers them 410 as it does kube-apiserver.

// compactRevKey is kube-apiserver's compaction key.
const compactRevKey = "compact_rev_key"

// trackCompaction follows compactRevKey into s.compactRev until ctx ends.
func (s *Server) trackCompaction(ctx context.Context) {
	for {
		if err := s.followCompaction(ctx); err != nil && ctx.Err() == nil {
			s.log.Debug("cannot follow etcd's compaction revision", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// followCompaction reads compactRevKey and watches it until the watch
// breaks.
func (s *Server) followCompaction(ctx context.Context) error {
	resp, err := s.cfg.Client.Get(ctx, compactRevKey)
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		s.noteCompaction(kv)
	}
	// WithRequireLeader: etcd ends the watch when its member loses its
	// leader (cut off from the quorum), so that it is opened again on a
	// member that follows the cluster (store.Failover leaves the other
	// one out) instead of waiting there for events that do not come.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cfg.Client.Watch(wctx, compactRevKey, clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.PUT {
				s.noteCompaction(ev.Kv)
			}
		}
	}
	return ctx.Err()
}

func (s *Server) noteCompaction(kv *mvccpb.KeyValue) {
	rev, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return
	}
	for {
		cur := s.compactRev.Load()
		if rev <= cur || s.compactRev.CompareAndSwap(cur, rev) {
			return
		}
	}
}
