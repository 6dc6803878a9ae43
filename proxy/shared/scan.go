package shared

import "context"

// ScanChunk is a chunk type of a Scan: a Chunked whose Failed reports
// that it ends its members' answers (an error the members write last).
type ScanChunk interface {
	Chunked
	Failed() bool
}

// Pages is what a Scan reads, at one revision: its first cycle's pages
// in key order (Next, More), a segment of it again (Again), and the chunk
// of a page (Chunk). P is a page.
type Pages[P any, C ScanChunk] interface {
	// Next reads the first cycle's next page.
	Next(ctx context.Context) (P, error)
	// More reports whether a page follows the last one Next returned.
	More() bool
	// Last returns the last key of a page; ok false when it is empty.
	Last(page P) (key string, ok bool)
	// Again reads the keys from start to end, both inclusive.
	Again(ctx context.Context, start, end string) (P, error)
	// Chunk encodes a page.
	Chunk(page P) C
}

// keyRange is a segment's keys: [start, end], both inclusive.
type keyRange struct{ start, end string }

// Scan is a circular read of a key range, a shared scan: its parts are
// the segments of the range that the pages of its first cycle define
// (so each is the same bytes every cycle); a part some member missed is
// read again and published again. A chunk that Failed stops the read
// after it. The read's own goroutine runs Cycles.
type Scan[C ScanChunk] struct {
	Read[C]
	segs []keyRange // under the read's lock; complete once every part is published
}

// Cycles publishes the segments of prefix's keys, the first from page
// (Next's first page, read by the caller) on, then again, circularly,
// those some member still needs, until the read is over (nil) or a page
// fails to read (its error: the caller ends the read). yield(n) follows
// each chunk: n its bytes in the first cycle, 0 after.
func Cycles[P any, C ScanChunk](s *Scan[C], pages Pages[P, C], prefix string, page P, yield func(n int)) error {
	ok, err := firstCycle(s, pages, prefix, page, yield)
	if !ok || err != nil {
		return err
	}
	return laterCycles(s, pages, yield)
}

// firstCycle publishes the segments, one per page from page on (the
// pages define the segments); false when the read is over.
func firstCycle[P any, C ScanChunk](s *Scan[C], pages Pages[P, C], start string, page P, yield func(n int)) (bool, error) {
	for {
		if !s.waitRoom() {
			return false, nil
		}
		seg := keyRange{start: start}
		end, nonEmpty := pages.Last(page)
		if nonEmpty {
			seg.end = end
			start = seg.end + "\x00"
		}
		c := pages.Chunk(page)
		n := len(c.chunk().Data) // before publish: the window owns c after it
		last := !pages.More() || !nonEmpty
		if !s.publish(c, seg, last) {
			return false, nil
		}
		yield(n)
		if last {
			return true, nil
		}
		var err error
		if page, err = pages.Next(s.ctx); err != nil {
			return false, err
		}
	}
}

// laterCycles publishes again, circularly, the segments some member still
// needs, until no member is left.
func laterCycles[P any, C ScanChunk](s *Scan[C], pages Pages[P, C], yield func(n int)) error {
	pos := 0
	for {
		idx, ok := s.nextNeeded(pos)
		if !ok {
			return nil
		}
		seg := s.segs[idx] // segs is complete: read without the lock
		page, err := pages.Again(s.ctx, seg.start, seg.end)
		if err != nil {
			return err
		}
		if !s.publishAgain(pages.Chunk(page), idx) {
			return nil
		}
		pos = (idx + 1) % len(s.segs)
		yield(0)
	}
}

// publish adds a first-cycle segment; last completes the segments. It
// returns false when the read is over.
func (s *Scan[C]) publish(c C, seg keyRange, last bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pushLocked(c, true) {
		return false
	}
	s.segs = append(s.segs, seg)
	if last {
		s.complete = true
	}
	return s.failedLocked(c)
}

// publishAgain adds segment idx, read again for members that missed it.
func (s *Scan[C]) publishAgain(c C, idx int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.chunk().part = idx
	return s.pushLocked(c, false) && s.failedLocked(c)
}

// failedLocked stops the read after a published chunk that failed (the
// members end after it); false when it did.
func (s *Scan[C]) failedLocked(c C) bool {
	if c.Failed() {
		s.FailLocked(ErrEnded)
	}
	return !c.Failed()
}
