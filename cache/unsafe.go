package cache

import "unsafe"

// entryHeader is the size of the entry header at the start of its block.
const entryHeader = int(unsafe.Sizeof(entry{}))

// newEntryBlock allocates one pointer-free block holding an entry header and
// its keyLen+valLen+attrLen data bytes, and returns the header (lengths set)
// and the data to fill. The block is 8-byte aligned (it is at least 32
// bytes, so it never comes from the tiny allocator), and the header holds no
// pointers, so the block stays noscan and the *entry keeps it alive.
func newEntryBlock(keyLen, valLen, attrLen int) (*entry, []byte) {
	b := make([]byte, entryHeader+keyLen+valLen+attrLen)
	e := (*entry)(unsafe.Pointer(&b[0]))
	e.keyLen, e.valLen, e.attrLen = uint32(keyLen), uint32(valLen), uint32(attrLen)
	return e, b[entryHeader:]
}

// data returns the bytes after the entry's header.
func (e *entry) data() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entryHeader)), e.keyLen+e.valLen+e.attrLen)
}
