package cache

// page calls fn for up to limit objects (limit <= 0: all) with
// from <= key < to that pass filter (nil: all), in key order. It returns the
// key to continue from (the last key seen + "\x00"; "" when the range is
// exhausted) and the number of objects at or after it in the range
// (kube-apiserver's remainingItemCount; meaningful without a filter). An
// error from fn stops the page and is returned.
func (s *Snapshot) page(from, to string, limit int, filter func(Attrs) bool, fn func(Item) error) (next string, remaining int, err error) {
	n := 0
	last := ""
	for e := range ascend(s.root, from, to) {
		if limit > 0 && n == limit {
			break
		}
		last = e.key()
		it := s.item(e)
		if filter != nil && !filter(it.Attrs) {
			continue
		}
		if err := fn(it); err != nil {
			return "", 0, err
		}
		n++
	}
	if last == "" {
		return "", 0, nil
	}
	next = last + "\x00"
	if remaining = count(s.root, next, to); remaining == 0 {
		return "", 0, nil
	}
	return next, remaining, nil
}
