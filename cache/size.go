package cache

import "sort"

// sizeClasses are the Go runtime's small-object size classes
// (internal/runtime/gc/sizeclasses.go): a make([]byte, n) with n <= 32 KiB
// takes the smallest class >= n.
var sizeClasses = [...]int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// mallocSize is the heap a byte slice of n bytes occupies, so that the
// budget charges what the heap pays.
func mallocSize(n int) int {
	if n <= 0 {
		return 0
	}
	if n > 32768 {
		return (n + 8191) &^ 8191
	}
	return sizeClasses[sort.SearchInts(sizeClasses[:], n)]
}
