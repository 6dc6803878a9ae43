// Package shared owns the mechanism of shared reads: one read whose
// chunks many requests (its members) write to their connections. Package
// proxy uses it for shared LISTs (an ordered read of a LIST's body) and
// shared scans (a circular read of a WatchList's initial events); what a
// chunk holds, how a read reads etcd and how a member writes a chunk are
// proxy's.
//
// It owns: the registry of the reads members may still join (Reads); a
// read (Read) with its window, the chunks it published, in order, that
// its members may still take; the members (Member) and their cursors; the
// window's byte count (the bytes a read holds, counted in its admission
// by proxy) and the lag and trim rules below; and for a shared LIST
// (List) how its body is published: one answer for every member, a whole
// body, or a stream, compressed once for all members as proxy/conn
// compresses one response; and for a shared scan (Scan, Cycles) the
// cycles over a key range: the segments its first cycle's pages define,
// each read again (Pages) for the members that missed it. It knows
// nothing of etcd, requests or encodings; the chunks' bytes come from
// proxy's lister, pagers and encoders.
//
// A chunk is held (counted in the read's held bytes) while it is in the
// window or a member writes it (a member pins the one chunk it writes). A
// chunk is one part of the answer; a read is ordered or circular:
//
//   - ordered (a shared LIST): every member writes every part, in order,
//     from the first; each chunk is a new part. A member that did not take
//     a chunk that left the window cannot be served: it is ended
//     (ErrLagged).
//   - circular (a shared scan): a member writes every part once, in any
//     order; a chunk is a part published again for members that missed
//     it (Scan, Cycles). A member that did not take a chunk that left the
//     window gets it on a later cycle.
//
// The trim rule: the oldest chunk leaves the window once no member waits
// for it; when the window is full, also when the members that wait for it
// took nothing for LagWait (lagged): those members are marked lagged and
// not waited for again until they catch up (an ordered read's never do).
// An ordered read drops no chunk for lagged members while none is active:
// a lone slow client is served at its pace, as an unshared LIST, until
// its write timeout.
package shared
