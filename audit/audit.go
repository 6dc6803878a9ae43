// Package audit writes Kubernetes audit events (audit.k8s.io/v1 Event) as
// JSON lines to a file, as kube-apiserver's log backend does with
// --audit-log-format=json, choosing each request's level with
// kube-apiserver's policy evaluator (--audit-policy-file).
package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
	"gopkg.in/natefinch/lumberjack.v2"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	kaudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// DefaultBufferSize is Config.BufferSize's default: kube-apiserver's
// --audit-log-batch-buffer-size (and --audit-webhook-batch-buffer-size).
const DefaultBufferSize = 10000

// DefaultBufferBytes is Config.BufferBytes's default.
const DefaultBufferBytes = 16 << 20

// Config configures a Log.
type Config struct {
	// Path is the file events are appended to (created 0600); "-" is
	// standard output. Required.
	Path string
	// PolicyFile is a kube-apiserver audit Policy (audit.k8s.io/v1);
	// empty: DefaultPolicy.
	PolicyFile string
	// MaxSize, MaxAge and MaxBackups rotate the file as kube-apiserver's
	// --audit-log-maxsize (megabytes; 0: never rotate), --audit-log-maxage
	// (days) and --audit-log-maxbackup (files; 0 for both: keep all);
	// Compress gzips rotated files (--audit-log-compress).
	MaxSize, MaxAge, MaxBackups int
	Compress                    bool
	// BufferSize bounds the events waiting to be written; an event that
	// does not fit is dropped and counted (lazyapi_audit_events_dropped_total)
	// so that a slow disk never holds a request. 0: DefaultBufferSize.
	BufferSize int
	// BufferBytes bounds the estimated bytes of the events waiting to be
	// written (a request URI may be 1 MiB long: 10,000 of them must not be
	// queued); 0: DefaultBufferBytes.
	BufferBytes int64
	// Logger logs write failures; nil discards.
	Logger *zap.Logger
	// Metrics receives lazyapi_audit_events_total,
	// lazyapi_audit_events_dropped_total and lazyapi_audit_write_errors_total;
	// nil: a private set.
	Metrics *metrics.Set
}

// DefaultPolicy is the policy without --audit-policy-file: level Metadata
// for every request except the health endpoints (kubelet probes, served
// without authentication), which are not logged.
func DefaultPolicy() *auditinternal.Policy {
	return &auditinternal.Policy{Rules: []auditinternal.PolicyRule{
		{Level: auditinternal.LevelNone, NonResourceURLs: []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*"}},
		{Level: auditinternal.LevelMetadata},
	}}
}

// Log writes audit events in the background. Create it with New; it is
// safe for concurrent use; Close flushes and closes the file.
type Log struct {
	eval    kaudit.PolicyRuleEvaluator
	ch      chan *auditv1.Event
	out     io.Writer
	file    io.Closer // nil for standard output
	log     *zap.Logger
	done    chan struct{}
	closeMu sync.RWMutex // held for reading while sending; Close takes it to close ch
	closed  bool
	// queued is the estimated bytes of the events in ch (eventBytes);
	// maxQueued bounds it.
	queued    atomic.Int64
	maxQueued int64

	events, dropped, writeErrs *metrics.Counter
}

// New opens cfg.Path, loads the policy and starts the writer.
func New(cfg Config) (*Log, error) {
	if cfg.Path == "" {
		return nil, errors.New("cannot create audit log: Config.Path is empty")
	}
	p := DefaultPolicy()
	if cfg.PolicyFile != "" {
		var err error
		if p, err = policy.LoadPolicyFromFile(cfg.PolicyFile); err != nil {
			return nil, fmt.Errorf("cannot load audit policy: %w", err)
		}
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = DefaultBufferBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	l := &Log{
		eval:      policy.NewPolicyRuleEvaluator(p),
		ch:        make(chan *auditv1.Event, cfg.BufferSize),
		log:       cfg.Logger,
		done:      make(chan struct{}),
		maxQueued: cfg.BufferBytes,
		events:    cfg.Metrics.GetOrCreateCounter("lazyapi_audit_events_total"),
		dropped:   cfg.Metrics.GetOrCreateCounter("lazyapi_audit_events_dropped_total"),
		writeErrs: cfg.Metrics.GetOrCreateCounter("lazyapi_audit_write_errors_total"),
	}
	if cfg.Path == "-" {
		l.out = os.Stdout
	} else {
		// As kube-apiserver: the directory and the file are created,
		// readable by the owner only.
		if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
			return nil, fmt.Errorf("cannot create the audit log's directory: %w", err)
		}
		f, err := os.OpenFile(cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("cannot open audit log: %w", err)
		}
		l.file, l.out = f, f
		if cfg.MaxSize > 0 {
			f.Close()
			lj := &lumberjack.Logger{Filename: cfg.Path, MaxSize: cfg.MaxSize, MaxAge: cfg.MaxAge,
				MaxBackups: cfg.MaxBackups, Compress: cfg.Compress}
			l.file, l.out = lj, lj
		}
	}
	go l.run()
	return l, nil
}

// Evaluate returns the audit configuration of a request with attrs (its
// user the authenticated requestor, nil when authentication failed), as
// kube-apiserver's policy evaluator decides it.
func (l *Log) Evaluate(attrs authorizer.Attributes) kaudit.RequestAuditConfig {
	return l.eval.EvaluatePolicyRule(attrs)
}

// Omitted reports whether stage is one cfg omits (or cfg's level is None).
func Omitted(cfg kaudit.RequestAuditConfig, stage auditv1.Stage) bool {
	if cfg.Level == auditinternal.LevelNone {
		return true
	}
	for _, s := range cfg.OmitStages {
		if string(s) == string(stage) {
			return true
		}
	}
	return false
}

// Emit queues ev for writing and returns at once; ev must not be changed
// afterwards. When the buffer is full the event is dropped and counted.
func (l *Log) Emit(ev *auditv1.Event) {
	ev.APIVersion, ev.Kind = auditv1.SchemeGroupVersion.String(), "Event"
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed {
		l.dropped.Inc()
		return
	}
	n := eventBytes(ev)
	if l.queued.Add(n) > l.maxQueued {
		l.queued.Add(-n)
		l.dropped.Inc()
		return
	}
	select {
	case l.ch <- ev:
	default:
		l.queued.Add(-n)
		l.dropped.Inc()
	}
}

// Queued returns the estimated bytes of the events waiting to be written.
func (l *Log) Queued() int64 { return l.queued.Load() }

// eventBytes estimates the memory of a queued event: its variable-length
// strings and a fixed part.
func eventBytes(ev *auditv1.Event) int64 {
	n := 512 + len(ev.RequestURI) + len(ev.UserAgent) + len(ev.User.Username)
	for _, g := range ev.User.Groups {
		n += len(g) + 16
	}
	for k, v := range ev.User.Extra {
		n += len(k) + 16
		for _, x := range v {
			n += len(x) + 16
		}
	}
	for k, v := range ev.Annotations {
		n += len(k) + len(v) + 32
	}
	if st := ev.ResponseStatus; st != nil {
		n += len(st.Message)
	}
	for _, ip := range ev.SourceIPs {
		n += len(ip) + 16
	}
	return int64(n)
}

// run writes events, one JSON object a line, flushing whenever the queue
// is empty.
func (l *Log) run() {
	defer close(l.done)
	w := bufio.NewWriterSize(l.out, 64<<10)
	enc := json.NewEncoder(w) // Encode ends each event with '\n'
	failed := false
	for ev := range l.ch {
		err := enc.Encode(ev)
		l.queued.Add(-eventBytes(ev))
		if err != nil {
			l.fail(&failed, err)
			continue
		}
		l.events.Inc()
		if len(l.ch) == 0 {
			if err := w.Flush(); err != nil {
				l.fail(&failed, err)
				w.Reset(l.out)
			} else {
				failed = false
			}
		}
	}
	if err := w.Flush(); err != nil {
		l.fail(&failed, err)
	}
}

// fail counts a write error and logs the first of a run of them.
func (l *Log) fail(failed *bool, err error) {
	l.writeErrs.Inc()
	if !*failed {
		*failed = true
		l.log.Error("cannot write audit events", zap.Error(err))
	}
}

// Close writes the queued events and closes the file.
func (l *Log) Close() error {
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		return nil
	}
	l.closed = true
	close(l.ch)
	l.closeMu.Unlock()
	<-l.done
	if l.file != nil {
		if err := l.file.Close(); err != nil {
			return fmt.Errorf("cannot close audit log: %w", err)
		}
	}
	return nil
}
