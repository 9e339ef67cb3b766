package flags

import "time"

// TimeLimited reports whether an answer of the snapshot may depend on how fast it is
// computed: some flag or cohort matches a pattern only a backtracking engine compiles, which
// gives up after its time limit (and then matches nothing). Such an answer is not kept for
// later requests.
func (s *Snapshot) TimeLimited() bool { return s.timeLimited }

// timeLimited reports whether the filter matches with a time limit. Every regex filter is a
// person or group filter, so the compiler's table of them (compiler.matchers) holds them all.
func (m *matcher) timeLimited() bool { return m.re != nil && m.re.back != nil }

// dateBound lowers *e.req.Until to the earliest instant after the evaluation's clock at which
// the comparison of pt (the person's value; prel when that is a relative date) with ft (the
// filter's date) could come out otherwise. Each side moves with the clock only when it is a
// relative date: a comparison of two absolute dates never changes, and one of two relative
// dates in hours, days or weeks neither (they move together). When one side moves, the two
// meet once: at the other side plus its span, exactly for hours, days and weeks, and within
// a window for months (28 to 31 days each) and years (365 or 366): an instant past the
// window's end is gone, one before its start is a bound, and inside it the bound is now.
func (e *evaluation) dateBound(filter, prel dateFilter, pt, ft time.Time) {
	now := e.clock()
	var span dateFilter
	var at time.Time
	switch {
	case filter.unit == 0 && prel.unit == 0:
		return
	case filter.unit != 0 && prel.unit != 0:
		if fixedSpan(filter.unit) && fixedSpan(prel.unit) {
			return
		}
		e.lowerUntil(now)
		return
	case filter.unit != 0:
		span, at = filter, pt
	default:
		span, at = prel, ft
	}
	lo, hi := spanWindow(span)
	switch {
	case !at.Add(hi).After(now): // met already, not again
	case at.Add(lo).After(now):
		e.lowerUntil(at.Add(lo))
	default:
		e.lowerUntil(now)
	}
}

// fixedSpan reports whether a relative date's unit is a fixed duration.
func fixedSpan(unit byte) bool { return unit == 'h' || unit == 'd' || unit == 'w' }

// spanWindow returns the shortest and longest a relative date's span can be.
func spanWindow(d dateFilter) (lo, hi time.Duration) {
	n, day := time.Duration(d.n), 24*time.Hour
	switch d.unit {
	case 'h':
		return n * time.Hour, n * time.Hour
	case 'd':
		return n * day, n * day
	case 'w':
		return n * 7 * day, n * 7 * day
	case 'm':
		return n * 28 * day, n * 31 * day
	}
	return n * 365 * day, n * 366 * day
}

func (e *evaluation) lowerUntil(t time.Time) {
	if u := e.req.Until; u.IsZero() || t.Before(*u) {
		*u = t
	}
}
