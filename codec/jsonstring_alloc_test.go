//go:build !race

package codec

import (
	"strings"
	"testing"
)

func TestAppendJSONStringAllocs(t *testing.T) {
	src := []byte(strings.Repeat("a<b>&c\nd é\u2028\xff", 200))
	buf := make([]byte, 0, 8*len(src))
	if n := testing.AllocsPerRun(100, func() { buf = appendJSONString(buf[:0], src) }); n != 0 {
		t.Fatalf("appendJSONString into a large enough buffer: %v allocs, want 0", n)
	}
}
