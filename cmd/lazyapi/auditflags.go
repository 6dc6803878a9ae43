package main

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/audit/policy"

	"github.com/lazyapi/lazyapi/audit"
)

// auditFlags are kube-apiserver's audit log flags.
type auditFlags struct {
	path                       string // --audit-log-path; "": no audit log
	policyFile                 string // --audit-policy-file; "": audit.DefaultPolicy
	maxAge, maxBackup, maxSize int
	compress                   bool
	format, version            string // --audit-log-format, --audit-log-version: json and audit.k8s.io/v1 only
}

func (a *auditFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.path, "audit-log-path", "",
		"If set, every request (allowed, or refused 401/403) is logged to this file as an audit.k8s.io/v1 Event at level Metadata, one JSON object a line (kube-apiserver's --audit-log-format=json); '-' means standard out. Written in the background: a slow disk drops events (lazyapi_audit_events_dropped_total) instead of holding requests.")
	fs.StringVar(&a.policyFile, "audit-policy-file", "",
		"Path to kube-apiserver's audit Policy (audit.k8s.io/v1) deciding which requests are logged and which stages omitted; levels above Metadata are logged at Metadata (lazyapi logs no bodies). Default: Metadata for every request but the health endpoints.")
	fs.IntVar(&a.maxAge, "audit-log-maxage", 366,
		"The maximum number of days to retain old audit log files based on the timestamp encoded in their filename. 0: not removed by age.")
	fs.IntVar(&a.maxBackup, "audit-log-maxbackup", 100,
		"The maximum number of old audit log files to retain. 0: no limit.")
	fs.IntVar(&a.maxSize, "audit-log-maxsize", 100,
		"The maximum size in megabytes of the audit log file before it gets rotated. 0 disables rotation.")
	fs.BoolVar(&a.compress, "audit-log-compress", false, "If set, the rotated log files will be compressed using gzip.")
	fs.StringVar(&a.format, "audit-log-format", "json",
		"Format of saved audits: json (kube-apiserver's default; its legacy format is not supported). Accepted so that kube-apiserver's flags can be copied.")
	fs.StringVar(&a.version, "audit-log-version", "audit.k8s.io/v1",
		"API group and version of the events written: audit.k8s.io/v1 only.")
}

// validate checks the values; the policy file is loaded (and loaded again
// at start) so that a bad one is a command-line error.
func (a *auditFlags) validate() error {
	for _, v := range []struct {
		flag  string
		value int
	}{{"--audit-log-maxage", a.maxAge}, {"--audit-log-maxbackup", a.maxBackup}, {"--audit-log-maxsize", a.maxSize}} {
		if v.value < 0 {
			return usageErrorf("invalid %s %d: must not be negative", v.flag, v.value)
		}
	}
	if a.format != "json" {
		return usageErrorf("invalid --audit-log-format %q: lazyapi writes json only", a.format)
	}
	if a.version != "audit.k8s.io/v1" {
		return usageErrorf("invalid --audit-log-version %q: lazyapi writes audit.k8s.io/v1 only", a.version)
	}
	if a.policyFile != "" {
		if a.path == "" {
			return usageErrorf("--audit-policy-file needs --audit-log-path")
		}
		if _, err := policy.LoadPolicyFromFile(a.policyFile); err != nil {
			return usageErrorf("invalid --audit-policy-file: %v", err)
		}
	}
	return nil
}

// open opens the audit log; nil without --audit-log-path.
func (a *auditFlags) open(lg *zap.Logger, ms *metrics.Set) (*audit.Log, error) {
	if a.path == "" {
		return nil, nil
	}
	l, err := audit.New(audit.Config{Path: a.path, PolicyFile: a.policyFile, MaxSize: a.maxSize, MaxAge: a.maxAge,
		MaxBackups: a.maxBackup, Compress: a.compress, Logger: lg, Metrics: ms})
	if err != nil {
		return nil, usageErrorf("cannot use --audit-log-path %q: %v", a.path, err)
	}
	return l, nil
}
