// Package evalcount counts flag evaluations at the edge, per project, flag and value, so that
// the control plane can tell which flags nobody evaluates any more. Counting costs one atomic
// add (Flag.Add), or for an answer of many flags (Project.CountAnswer) one plain add each: every
// compiled flag has its counters allocated with the snapshot, and a new snapshot of the
// project keeps the counters of its unchanged flags, so nothing is lost on a change. A
// Reporter takes the counts every few seconds and sends them upstream.
package evalcount

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Value slots of a flag's counters: false, true, then its variants in order, then any other
// value (a variant the edge does not know, such as a holdout's).
const (
	slotFalse    = 0
	slotTrue     = 1
	firstVariant = 2
)

// Flag counts one flag's evaluations by value.
type Flag struct {
	key      string
	variants []string
	counts   []atomic.Int64 // false, true, variants..., other
}

func newFlag(key string, variants []string) *Flag {
	return &Flag{key: key, variants: variants, counts: make([]atomic.Int64, firstVariant+len(variants)+1)}
}

// Add counts one evaluation: disabled, enabled, or enabled with variant.
func (f *Flag) Add(enabled bool, variant string) {
	if f != nil {
		f.counts[f.slot(enabled, variant)].Add(1)
	}
}

// slot is the value slot of an evaluation: disabled, enabled, or enabled with variant.
func (f *Flag) slot(enabled bool, variant string) int {
	switch {
	case !enabled:
		return slotFalse
	case variant == "":
		return slotTrue
	}
	i := slices.Index(f.variants, variant)
	if i < 0 {
		i = len(f.variants) // other
	}
	return firstVariant + i
}

// value names slot i as the control plane stores it.
func (f *Flag) value(i int) string {
	switch {
	case i == slotFalse:
		return "false"
	case i == slotTrue:
		return "true"
	case i-firstVariant < len(f.variants):
		return f.variants[i-firstVariant]
	}
	return "other"
}

// Definition is what a compiled flag's counters are made for: its key and its variants.
type Definition struct {
	Key      string
	Variants []string
}

// Project holds the counters of one project's flags, in the order of its compiled snapshot
// (the order of flags.Snapshot.Evaluate's results).
type Project struct {
	id       int64
	flags    []*Flag
	byKey    map[string]*Flag
	registry *Registry
	// base[i] is the first of flag i's value slots in a tally's counts, which has slots.
	base  []int32
	slots int
}

// Flag returns the counters of the snapshot's flag i (nil when out of range).
func (p *Project) Flag(i int) *Flag {
	if p == nil || i < 0 || i >= len(p.flags) {
		return nil
	}
	return p.flags[i]
}

// ByKey returns the counters of the flag with the given key, or nil.
func (p *Project) ByKey(key string) *Flag {
	if p == nil {
		return nil
	}
	return p.byKey[key]
}

// Registry knows every project's counters, so that a Reporter can take their counts, and the
// counters of flags that a change removed until their last counts are taken.
type Registry struct {
	mu       sync.Mutex
	projects map[int64]*Project
	retired  map[int64][]*Flag // counters no snapshot uses any more, by project
	tallies  []tally
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{projects: map[int64]*Project{}, retired: map[int64][]*Flag{}, tallies: newTallies()}
}

// Install makes the counters of a project's new snapshot: flags kept with the same variants
// keep their counters (requests still holding the previous snapshot count into the same
// ones), the others get new ones, and the counters of flags gone are retired until reported.
func (r *Registry) Install(projectID int64, defs []Definition) *Project {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.projects[projectID]
	p := &Project{id: projectID, flags: make([]*Flag, len(defs)), byKey: make(map[string]*Flag, len(defs)), registry: r,
		base: make([]int32, len(defs))}
	for i, d := range defs {
		if old := prev.ByKey(d.Key); old != nil && slices.Equal(old.variants, d.Variants) {
			p.flags[i] = old
		} else {
			p.flags[i] = newFlag(d.Key, slices.Clone(d.Variants))
		}
		p.byKey[d.Key] = p.flags[i]
		p.base[i] = int32(p.slots)
		p.slots += len(p.flags[i].counts)
	}
	if prev != nil {
		for _, f := range prev.flags {
			if p.byKey[f.key] != f {
				r.retired[projectID] = append(r.retired[projectID], f)
			}
		}
	}
	r.projects[projectID] = p
	return p
}

// Remove retires every counter of a project the edge no longer serves.
func (r *Registry) Remove(projectID int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.projects[projectID]; p != nil {
		r.retired[projectID] = append(r.retired[projectID], p.flags...)
		delete(r.projects, projectID)
	}
}

// Count is a number of evaluations of one flag to one value.
type Count struct {
	ProjectID int64
	FlagKey   string
	Value     string
	N         int64
}

// Take returns the counts since the last Take, the tallies' included, and resets them
// (retired counters are then dropped).
func (r *Registry) Take() []Count {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle()
	var out []Count
	take := func(projectID int64, f *Flag) {
		for i := range f.counts {
			if n := f.counts[i].Swap(0); n > 0 {
				out = append(out, Count{ProjectID: projectID, FlagKey: f.key, Value: f.value(i), N: n})
			}
		}
	}
	for id, p := range r.projects {
		for _, f := range p.flags {
			take(id, f)
		}
	}
	for id, flags := range r.retired {
		for _, f := range flags {
			take(id, f)
		}
	}
	clear(r.retired)
	return out
}
