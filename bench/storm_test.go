package bench

import (
	"testing"
	"time"
)

// TestReflectorBackoff: the storm's re-list waits are client-go's
// reflector back-off, 800 ms doubling up to 30 s, jittered by up to as
// much again.
func TestReflectorBackoff(t *testing.T) {
	for n, base := range map[int]time.Duration{0: 800 * time.Millisecond, 1: 1600 * time.Millisecond,
		5: 25600 * time.Millisecond, 6: 30 * time.Second, 100: 30 * time.Second} {
		for range 20 {
			if d := reflectorBackoff(n); d < base || d >= 2*base {
				t.Fatalf("reflectorBackoff(%d) = %s, want in [%s, %s)", n, d, base, 2*base)
			}
		}
	}
}
