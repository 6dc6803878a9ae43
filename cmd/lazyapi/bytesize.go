package main

import (
	"fmt"
	"math"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// byteSize is the one byte-count flag type (--memory-limit,
// --list-page-bytes, --max-inflight-bytes, ...): an integer or a
// Kubernetes quantity, parsed by parseBytes.
type byteSize int64

var _ pflag.Value = (*byteSize)(nil)

func (b *byteSize) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *byteSize) Type() string { return "bytes" }

func (b *byteSize) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

// parseBytes parses a byte quantity in Kubernetes quantity syntax: plain
// bytes ("1048576"), binary suffixes ("512Mi", "1Gi"), decimal suffixes
// ("1G" = 10^9, "500M"), exponents ("1e9"), fractions that are whole
// bytes ("1.5Ki" = 1536). Fractions of a byte ("1.5"), negative values and
// values above MaxInt64 are errors (ParseQuantity itself saturates "8Ei" to
// MaxInt64).
func parseBytes(s string) (int64, error) {
	if s == "" || !(s[0] >= '0' && s[0] <= '9' || s[0] == '.' || s[0] == '+') {
		// ParseQuantity takes a bare suffix ("Mi") as 0.
		return 0, fmt.Errorf("cannot parse %q as bytes: want a number with an optional suffix such as 512Mi or 1G", s)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("cannot parse %q as bytes: %w", s, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("cannot parse %q as bytes: negative", s)
	}
	// Value rounds a fraction up but saturates silently on overflow; compare
	// against MaxInt64 as a quantity to catch that.
	if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) > 0 {
		return 0, fmt.Errorf("cannot parse %q as bytes: larger than %d", s, int64(math.MaxInt64))
	}
	v := q.Value() // rounds a fraction up
	if q.Cmp(*resource.NewQuantity(v, resource.BinarySI)) != 0 {
		return 0, fmt.Errorf("cannot parse %q as bytes: want a whole number of bytes", s)
	}
	return v, nil
}
