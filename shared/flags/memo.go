package flags

// Flags of a project often repeat a filter (the same email domain or country list in many
// conditions, a cohort's condition also written in a flag), and an evaluation tests each
// such filter once: a matcher the snapshot references more than once has a memo slot, where
// the evaluation keeps its result.

// memoSlots is how many matchers of a snapshot have a slot: 4 words of bits per evaluation.
const memoSlots = 256

// noSlot marks a matcher whose result is not kept: referenced once, or past memoSlots.
const noSlot = 0xFFFF

// matcherRef is a reference to a matcher from a condition or a cohort's group, with the
// matcher's memo slot in the snapshot.
type matcherRef struct {
	*matcher
	slot uint16
}

// memo is an evaluation's record of matcher results, by slot: known, and then whether the
// matcher matched and whether it read a property that could not be fetched.
type memo struct {
	known, matched, failed [memoSlots / 64]uint64
}

// assignMemoSlots gives a slot to every person or group property matcher referenced more
// than once: their result depends only on the request (and the evaluation's clock).
func (s *Snapshot) assignMemoSlots() {
	refs := map[*matcher][]*matcherRef{}
	seen := map[*propertyGroup]bool{}
	var addGroup func(g *propertyGroup)
	add := func(r *matcherRef) {
		switch r.source {
		case sourcePerson, sourceGroup:
			refs[r.matcher] = append(refs[r.matcher], r)
		case sourceCohort:
			if r.cohort != nil {
				addGroup(r.cohort.group)
			}
		}
	}
	addGroup = func(g *propertyGroup) {
		if g == nil || seen[g] { // a cohort's group counts once however many flags use it
			return
		}
		seen[g] = true
		for i := range g.items {
			if g.items[i].group != nil {
				addGroup(g.items[i].group)
			} else {
				add(&g.items[i].matcher)
			}
		}
	}
	for i := range s.flags {
		s.flags[i].forEachCondition(func(c *condition) {
			for j := range c.matchers {
				add(&c.matchers[j])
			}
		})
	}
	next := uint16(0)
	for _, rs := range refs {
		if len(rs) < 2 || next == memoSlots {
			continue
		}
		for _, r := range rs {
			r.slot = next
		}
		next++
	}
}

// forEachCondition calls fn on every condition of the flag, of every kind.
func (f *compiledFlag) forEachCondition(fn func(c *condition)) {
	for i := range f.conditions {
		fn(&f.conditions[i])
	}
	if f.rare != nil {
		for i := range f.rare.super {
			fn(&f.rare.super[i])
		}
		for i := range f.rare.holdout {
			fn(&f.rare.holdout[i].condition)
		}
	}
}

// match evaluates one filter, negation included, through the memo when it has a slot.
func (e *evaluation) match(r matcherRef) bool {
	if r.slot == noSlot {
		return e.matchFilter(r.matcher)
	}
	w, bit := r.slot/64, uint64(1)<<(r.slot%64)
	if e.memo.known[w]&bit != 0 {
		if e.memo.failed[w]&bit != 0 {
			e.failed = true
		}
		return e.memo.matched[w]&bit != 0
	}
	failed := e.failed
	e.failed = false
	ok := e.matchFilter(r.matcher)
	e.memo.known[w] |= bit
	if ok {
		e.memo.matched[w] |= bit
	}
	if e.failed {
		e.memo.failed[w] |= bit
	}
	e.failed = e.failed || failed
	return ok
}
