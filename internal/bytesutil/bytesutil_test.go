package bytesutil

import "testing"

func TestRoundTrip(t *testing.T) {
	for _, s := range []string{"", "a", "hello, world"} {
		if got := ToUnsafeString(ToUnsafeBytes(s)); got != s {
			t.Errorf("ToUnsafeString(ToUnsafeBytes(%q)) = %q", s, got)
		}
	}
	if got := ToUnsafeString(nil); got != "" {
		t.Errorf("ToUnsafeString(nil) = %q, want \"\"", got)
	}
	b := []byte("xyz")
	if n := testing.AllocsPerRun(100, func() { _ = ToUnsafeBytes(ToUnsafeString(b)) }); n != 0 {
		t.Errorf("conversions allocate %v times, want 0", n)
	}
}
