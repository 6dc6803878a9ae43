package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
	cliflag "k8s.io/component-base/cli/flag"
)

// usageError is a bad command line; main exits with status 2 for it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// defaultDataDir is where the embedded etcd keeps its data when --data-dir is
// not given: <user cache dir>/lazyapi/etcd (e.g. ~/.cache/lazyapi/etcd), or
// ./lazyapi-data when the user has no cache directory.
func defaultDataDir() string {
	if dir, err := os.UserCacheDir(); err == nil && dir != "" {
		return filepath.Join(dir, "lazyapi", "etcd")
	}
	return "lazyapi-data"
}

// parseFlags parses args into Options, completes and validates them. Every
// error names the flag at fault and fits on one line. With --help or
// --version the values are not validated.
func parseFlags(args []string) (*Options, error) {
	o := &Options{}
	for _, s := range o.sections() {
		s.addFlags(&o.fss)
	}
	fs := pflag.NewFlagSet("lazyapi", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	for _, name := range o.fss.Order {
		fs.AddFlagSet(o.fss.FlagSets[name])
	}
	o.changed = fs.Changed
	if err := fs.Parse(args); err != nil {
		return nil, usageError{parseError(err)}
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q: lazyapi takes only flags (see --help)", fs.Arg(0))
	}
	if o.Misc.help || o.Misc.version {
		return o, nil
	}
	o.complete()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// parseError is pflag's error as "--flag: problem (see --help)".
func parseError(err error) error {
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		return fmt.Errorf("--%s: invalid value %q: %v (see --help)", iv.GetFlag().Name, iv.GetValue(), errors.Unwrap(iv))
	}
	return fmt.Errorf("%v (see --help)", err)
}

// usage is --help's text: the flags by section, as kube-apiserver prints
// them, wrapped to cols columns (0: not wrapped).
func (o *Options) usage(cols int) string {
	var b strings.Builder
	b.WriteString("Usage: lazyapi [flags]\n\nlazyapi serves the Kubernetes read API (GET, LIST, WATCH) from the bytes\nkube-apiserver stored in etcd.\n")
	cliflag.PrintSections(&b, o.fss, cols)
	// PrintSections pads each flag's line to the width: trim it.
	return trailingSpace.ReplaceAllString(b.String(), "")
}

var trailingSpace = regexp.MustCompile(`(?m)[ \t]+$`)

// helpWidth is the width --help wraps to: $COLUMNS when set, else the
// terminal's width when w is one, else 80.
func helpWidth(w io.Writer) int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if n, _, err := term.GetSize(int(f.Fd())); err == nil && n > 0 {
			return n
		}
	}
	return 80
}

func trimEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseWatchCacheSizes parses kube-apiserver's --watch-cache-sizes values,
// each "resource[.group]#size" (e.g. "configmaps#1000",
// "deployments.apps#0"; 0 disables caching of that resource). The result
// goes to cache.Config.Sizes.
func parseWatchCacheSizes(values []string) (map[string]int, error) {
	out := make(map[string]int, len(values))
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		name, size, ok := strings.Cut(v, "#")
		if !ok || name == "" {
			return nil, flagError("watch-cache-sizes", "cannot parse %q: want resource[.group]#size", v)
		}
		n, err := strconv.Atoi(size)
		if err != nil {
			return nil, flagError("watch-cache-sizes", "cannot parse %q: size: %v", v, err)
		}
		if n < 0 {
			return nil, flagError("watch-cache-sizes", "cannot parse %q: size must be >= 0", v)
		}
		out[strings.ToLower(name)] = n
	}
	return out, nil
}
