package ratelimit

// Correction of estimates: each Release with used > 0 moves the class's ratio
// toward used/estimate by ewmaAlpha; samples and so the ratio stay within
// [minRatio, maxRatio].
const (
	ewmaAlpha = 0.2
	minRatio  = 0.25
	maxRatio  = 4
)

// class holds the correction ratio of a class of requests; guarded by
// Limiter.mu.
type class struct {
	ratio float64 // EWMA of used/estimate, within [minRatio, maxRatio]
}

// Ratio returns the correction ratio of class and whether it is tracked.
func (l *Limiter) Ratio(class string) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.classes[class]; c != nil {
		return c.ratio, true
	}
	return 0, false
}

// observeLocked moves the correction ratio of the class named name toward the
// sample used/estimate; cls is its state if the caller has it.
func (l *Limiter) observeLocked(cls *class, name string, sample float64) {
	sample = min(max(sample, minRatio), maxRatio)
	if cls == nil {
		if cls = l.classes[name]; cls == nil {
			if len(l.classes) >= l.cfg.MaxClasses {
				return
			}
			cls = &class{ratio: 1}
			l.classes[name] = cls
		}
	}
	cls.ratio += ewmaAlpha * (sample - cls.ratio)
}
