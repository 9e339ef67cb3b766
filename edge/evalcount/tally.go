package evalcount

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/flagedge/flagedge/shared/flags"
)

// An answer counts every flag it gives, about fifty a /decide, and fifty atomic adds cost
// more than the rest of the counting (each a locked instruction). So an answer counts into a
// tally instead: plain integers, one per value slot of the project's flags, that one answer
// at a time holds. A registry has a few tallies; taking one is one compare-and-swap, giving it
// back one store. Registry.Take sums them (waiting for one in use, which is held only while an
// answer is counted), so that no count waits for a later report; and a tally moves its counts
// to the flags' counters when an answer of another project takes it.

// tally is counts of one project's evaluations, held by one answer at a time.
type tally struct {
	busy    atomic.Bool
	project *Project
	counts  []int64 // by the project's slot (Project.base)
}

// newTallies returns the tallies of a registry: two per processor, so that answers counted at
// once rarely meet.
func newTallies() []tally {
	return make([]tally, 2*runtime.GOMAXPROCS(0))
}

// CountAnswer counts an answer of the project's snapshot (the results of
// flags.Snapshot.Evaluate, in its order): each active flag computed without failure that want
// marks (every flag when want is nil).
func (p *Project) CountAnswer(results []flags.Result, want []bool) {
	if p == nil {
		return
	}
	t := p.tally()
	if t == nil { // every tally in use
		for i := range results {
			if r := &results[i]; r.Active && !r.Failed && (want == nil || want[i]) {
				p.Flag(i).Add(r.Enabled, r.Variant)
			}
		}
		return
	}
	base, counts := p.base[:min(len(p.base), len(results))], t.counts
	for i, b := range base {
		if r := &results[i]; r.Active && !r.Failed && (want == nil || want[i]) {
			counts[int(b)+p.flags[i].slot(r.Enabled, r.Variant)]++
		}
	}
	t.busy.Store(false)
}

// tally returns a free tally of the registry, holding the project's counts, or nil when all
// are in use. Give it back by clearing busy.
func (p *Project) tally() *tally {
	ts := p.registry.tallies
	start := rand.Uint32N(uint32(len(ts)))
	for i := range ts {
		t := &ts[(start+uint32(i))%uint32(len(ts))]
		if t.busy.CompareAndSwap(false, true) {
			if t.project != p {
				t.move()
				t.project = p
				t.counts = slices.Grow(t.counts[:0], p.slots)[:p.slots]
			}
			return t
		}
	}
	return nil
}

// move adds the tally's counts to its project's counters and clears them; the tally is held.
func (t *tally) move() {
	p := t.project
	if p == nil {
		return
	}
	for i, f := range p.flags {
		base := int(p.base[i])
		for s := range f.counts {
			if n := t.counts[base+s]; n != 0 {
				f.counts[s].Add(n)
				t.counts[base+s] = 0
			}
		}
	}
}

// settle moves the counts of every tally to the counters, waiting for those in use.
func (r *Registry) settle() {
	for i := range r.tallies {
		t := &r.tallies[i]
		for !t.busy.CompareAndSwap(false, true) {
			runtime.Gosched()
		}
		t.move()
		t.busy.Store(false)
	}
}

// AnswerSlots appends to dst what CountAnswer counts of an answer, as value slots of the
// project's counters (an index into a tally's counts), so that an answer kept and given again
// (edge/answercache) is counted as when it was computed, by CountSlots, without its results.
func (p *Project) AnswerSlots(dst []int32, results []flags.Result, want []bool) []int32 {
	if p == nil {
		return dst
	}
	for i, b := range p.base[:min(len(p.base), len(results))] {
		if r := &results[i]; r.Active && !r.Failed && (want == nil || want[i]) {
			dst = append(dst, b+int32(p.flags[i].slot(r.Enabled, r.Variant)))
		}
	}
	return dst
}

// CountSlots counts an answer of the project's snapshot by its AnswerSlots: one evaluation
// for each slot.
func (p *Project) CountSlots(slots []int32) {
	if p == nil {
		return
	}
	t := p.tally()
	if t == nil { // every tally in use
		for _, s := range slots {
			i := sort.Search(len(p.base), func(i int) bool { return p.base[i] > s }) - 1
			p.flags[i].counts[s-p.base[i]].Add(1)
		}
		return
	}
	for _, s := range slots {
		t.counts[s]++
	}
	t.busy.Store(false)
}
