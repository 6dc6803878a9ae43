package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// SizeDist is a distribution of object sizes in bytes. The zero value is
// invalid; use ParseSizeDist or fill the fields.
type SizeDist struct {
	// Kind is "fixed", "uniform" or "lognormal".
	Kind string
	// Size is the fixed size, or the median of the lognormal distribution.
	Size int
	// Min and Max bound uniform sizes; for lognormal they clamp the draw
	// (0 means 256 bytes and MaxObjectSize).
	Min, Max int
	// Sigma is the lognormal shape (the standard deviation of ln size); 0
	// means 1.
	Sigma float64
}

// MaxObjectSize is the largest object the seeder writes: etcd rejects
// requests over 1.5 MiB by default.
const MaxObjectSize = 1 << 20

// ParseSizeDist parses "8KiB" or "fixed:8KiB", "uniform:1KiB-64KiB" and
// "lognormal:16KiB" or "lognormal:16KiB:1.5" (median and sigma).
func ParseSizeDist(s string) (SizeDist, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		kind, rest = "fixed", s
	}
	var d SizeDist
	d.Kind = kind
	switch kind {
	case "fixed":
		n, err := ParseBytes(rest)
		if err != nil {
			return d, err
		}
		d.Size = n
	case "uniform":
		lo, hi, ok := strings.Cut(rest, "-")
		if !ok {
			return d, fmt.Errorf("cannot parse uniform size %q: want MIN-MAX", rest)
		}
		var err error
		if d.Min, err = ParseBytes(lo); err != nil {
			return d, err
		}
		if d.Max, err = ParseBytes(hi); err != nil {
			return d, err
		}
	case "lognormal":
		med, sigma, hasSigma := strings.Cut(rest, ":")
		n, err := ParseBytes(med)
		if err != nil {
			return d, err
		}
		d.Size = n
		if hasSigma {
			if d.Sigma, err = strconv.ParseFloat(sigma, 64); err != nil || d.Sigma <= 0 {
				return d, fmt.Errorf("cannot parse lognormal sigma %q", sigma)
			}
		}
	default:
		return d, fmt.Errorf("unknown size distribution %q (want fixed, uniform or lognormal)", kind)
	}
	return d, d.Validate()
}

// Validate reports whether d describes sizes the seeder can write.
func (d SizeDist) Validate() error {
	switch d.Kind {
	case "fixed", "lognormal":
		if d.Size <= 0 || d.Size > MaxObjectSize {
			return fmt.Errorf("size %d out of range 1..%d", d.Size, MaxObjectSize)
		}
	case "uniform":
		if d.Min <= 0 || d.Max < d.Min || d.Max > MaxObjectSize {
			return fmt.Errorf("uniform size %d-%d out of range 1..%d", d.Min, d.Max, MaxObjectSize)
		}
	default:
		return fmt.Errorf("unknown size distribution %q", d.Kind)
	}
	return nil
}

// String returns d in the form ParseSizeDist reads.
func (d SizeDist) String() string {
	switch d.Kind {
	case "uniform":
		return "uniform:" + FormatBytes(int64(d.Min)) + "-" + FormatBytes(int64(d.Max))
	case "lognormal":
		s := "lognormal:" + FormatBytes(int64(d.Size))
		if d.Sigma != 0 {
			s += ":" + strconv.FormatFloat(d.Sigma, 'g', -1, 64)
		}
		return s
	}
	return "fixed:" + FormatBytes(int64(d.Size))
}

// Draw returns one size from d.
func (d SizeDist) Draw(r *rand.Rand) int {
	switch d.Kind {
	case "uniform":
		return d.Min + r.IntN(d.Max-d.Min+1)
	case "lognormal":
		sigma := d.Sigma
		if sigma == 0 {
			sigma = 1
		}
		lo, hi := d.Min, d.Max
		if lo == 0 {
			lo = 256
		}
		if hi == 0 {
			hi = MaxObjectSize
		}
		n := int(math.Round(float64(d.Size) * math.Exp(sigma*r.NormFloat64())))
		return min(max(n, lo), hi)
	}
	return d.Size
}

// ParseBytes parses "123", "4k", "4KiB", "4KB" (KB is 1000), "2MiB", "1.5MiB".
func ParseBytes(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
		{"B", 1},
	}
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("cannot parse size %q", s)
	}
	return int(math.Round(f * mult)), nil
}

// FormatBytes formats n exactly with the largest binary unit that divides
// it: 512B, 1500B, 16KiB, 2MiB.
func FormatBytes(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

// HumanBytes formats n rounded for people: 1.5KiB, 93.2MiB.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return trimFloat(float64(n)/(1<<30)) + "GiB"
	case n >= 1<<20:
		return trimFloat(float64(n)/(1<<20)) + "MiB"
	case n >= 1<<10:
		return trimFloat(float64(n)/(1<<10)) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

func trimFloat(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}
