package shared

// The reader side of a read: wait for room, publish chunks, end.

// overLocked reports whether the read is over for its reader: stopped,
// no member left, or its context ended.
func (r *Read[C]) overLocked() bool {
	return r.err != nil || len(r.members) == 0 || r.ctx.Err() != nil
}

// waitRoom waits until the window has room for a chunk; false when the
// read is over. An ordered read also waits until it is fewer than two
// chunks ahead of its fastest member, as an unshared LIST reads ahead of
// its writer (two pages): a read whose clients left or stall does not read
// on into its window.
func (r *Read[C]) waitRoom() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.overLocked() {
			return false
		}
		if r.ordered {
			r.trimLocked(false)
		}
		if (!r.ordered || r.aheadLocked() < 2) && r.win.roomLocked(r.trimLocked) {
			return true
		}
		if !r.win.waitWakeLocked(&r.mu, r.ctx, LagWait/4) {
			return false
		}
	}
}

// pushLocked publishes c, a new part when newPart (its part is then the
// next); false when the read is over (c is dropped).
func (r *Read[C]) pushLocked(c C, newPart bool) bool {
	if r.err != nil || len(r.members) == 0 {
		return false
	}
	if newPart {
		c.chunk().part = r.parts
		r.parts++
	}
	r.win.pushLocked(c)
	r.win.broadcastLocked()
	return true
}

// FailLocked ends the read early with err: no member joins, members
// without every part end with err once they took what the window holds,
// and the reader, woken, finds the read over.
func (r *Read[C]) FailLocked(err error) {
	r.err, r.closed = err, true
	r.win.wakeLocked()
}

// End ends the read's chunks: err nil, every part is published; else the
// members without every part end with err. No member joins after.
func (r *Read[C]) End(err error) {
	r.mu.Lock()
	r.closed = true
	if err != nil {
		r.err = err
	} else {
		r.complete = true
	}
	r.win.broadcastLocked()
	r.win.wakeLocked()
	r.mu.Unlock()
	r.forget()
}

// ClearWindow drops every chunk from the window as the reader stops,
// unless members are left and keep(the newest chunk) says they must
// still take it (a chunk that ends their answers); the last member out
// clears it then.
func (r *Read[C]) ClearWindow(keep func(newest C) bool) {
	r.mu.Lock()
	if n := len(r.win.chunks); len(r.members) == 0 || n == 0 || !keep(r.win.chunks[n-1]) {
		r.win.clearLocked()
	}
	r.mu.Unlock()
}

// nextNeeded waits for room and a part of a complete circular read that
// some member needs and will not find in the window, from pos on
// (circularly); false when the read is over.
func (r *Read[C]) nextNeeded(pos int) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.parts
	for {
		if r.overLocked() || n == 0 {
			return 0, false
		}
		if r.win.roomLocked(r.trimLocked) {
			// The newest seq of each part in the window.
			inWindow := make(map[int]int64, len(r.win.chunks))
			for _, x := range r.win.chunks {
				inWindow[x.chunk().part] = x.chunk().seq
			}
			for i := 0; i < n; i++ {
				idx := (pos + i) % n
				if r.neededLocked(idx, inWindow) {
					return idx, true
				}
			}
		}
		if !r.win.waitWakeLocked(&r.mu, r.ctx, LagWait/4) {
			return 0, false
		}
	}
}

// neededLocked reports whether a member needs part idx and will not find
// it in the window.
func (r *Read[C]) neededLocked(idx int, inWindow map[int]int64) bool {
	seq, ok := inWindow[idx]
	for m := range r.members {
		if m.needs(idx) && (!ok || seq < m.cursor) {
			return true
		}
	}
	return false
}
