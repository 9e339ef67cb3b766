// Package bloomset holds the edge's membership filters: per project, a Bloom filter of
// every key (distinct id, group) the control plane stores. /decide asks it before a look-up:
// a key the filter lacks has nothing stored, so the answer needs no round trip — the first
// visit of every new user. Reads are lock-free; the stream of filters and additions from the
// control plane is the only writer.
package bloomset

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// smallFilterBytes is the size up to which a filter is copied whole to add keys (a project of
// up to about 13,000 stored keys): below it a second layer would take more memory than the
// copies cost.
const smallFilterBytes = 16 << 10

// deltaCapacity is how many added keys a project's filter takes in its small copy-on-write
// layer before they are folded into a new copy of the large one.
const deltaCapacity = 4096

// layers is a project's filter at one moment, never changed once published: the filter the
// control plane sent (base) and a small one of the keys added since (delta).
type layers struct {
	base  *bloom.BloomFilter
	delta *bloom.BloomFilter
	// added are the keys in delta, to fold into a copy of base once delta is full, and
	// addedSet the same as a set. Only the writer uses them (readers test base and delta), and
	// only on the newest layers: they are handed on, not copied.
	added    [][]byte
	addedSet map[string]struct{}
}

func (l *layers) test(key []byte) bool {
	return l.base.Test(key) || (l.delta != nil && l.delta.Test(key))
}

// bytes is the memory of the filter's bits.
func (l *layers) bytes() int64 {
	n := int64(l.base.Cap() / 8)
	if l.delta != nil {
		n += int64(l.delta.Cap() / 8)
	}
	return n
}

// slot holds a project's current layers: adding keys replaces them here, without copying
// the map of every project.
type slot struct{ cur atomic.Pointer[layers] }

// Set is the membership filters of every project. The zero value is not usable: NewSet.
type Set struct {
	// filters maps project ids to their slots; the map is replaced (never changed) when
	// projects get or lose a filter, the slots' layers as keys are added.
	filters atomic.Pointer[map[int64]*slot]
	mu      sync.Mutex // serialises writers, and guards total
	total   int64      // bytes of all layers
	max     int64      // bytes all filters may take; a filter past it is not kept
	log     *slog.Logger
	// onAdd is told every key the control plane announces, after it is in the filter (to
	// forget cached "not found" answers about it); onReplace, that filters were replaced whole
	// (keys may have come without an announcement: forget every "not found").
	onAdd     func(projectID int64, key bloomkeys.Key)
	onReplace func()

	bytes     atomic.Int64
	projects  prometheus.GaugeFunc
	sizeG     prometheus.GaugeFunc
	refused   prometheus.Counter
	additions prometheus.Counter
	checks    [3]prometheus.Counter // by Result
}

// Hooks are told what the control plane's stream changes; either may be nil.
type Hooks struct {
	// Announced is told every key the control plane announces, once it is in the filter.
	Announced func(projectID int64, key bloomkeys.Key)
	// Replaced is told that filters were replaced whole: keys may have arrived without being
	// announced one by one.
	Replaced func()
}

// NewSet returns an empty set: every project is unknown (look keys up) until its filter
// arrives. maxBytes caps the memory of all filters (0: no cap).
func NewSet(maxBytes int64, hooks Hooks, log *slog.Logger, reg prometheus.Registerer) *Set {
	s := &Set{max: maxBytes, onAdd: hooks.Announced, onReplace: hooks.Replaced, log: log}
	empty := map[int64]*slot{}
	s.filters.Store(&empty)
	s.projects = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_membership_projects",
		Help: "Projects with a membership filter (the others look up every key)."}, func() float64 { return float64(len(*s.filters.Load())) })
	s.sizeG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_membership_filter_bytes",
		Help: "Bytes of all membership filters held."}, func() float64 { return float64(s.bytes.Load()) })
	s.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_membership_filters_refused_total",
		Help: "Membership filters not kept because all filters would pass --membership-max-bytes (their projects look up every key)."})
	s.additions = prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_membership_additions_total",
		Help: "Keys added to membership filters since they were received."})
	checks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_membership_checks_total",
		Help: "Membership checks of the persons and groups that requests computed past the answer cache read, by result: absent (answered without a look-up), present (looked up unless cached or the person was created at this edge), unknown (no filter: looked up unless cached)."}, []string{"result"})
	// Resolved once: counting on the /decide path is an atomic add, not a label look-up.
	s.checks = [3]prometheus.Counter{Unknown: checks.WithLabelValues("unknown"), Absent: checks.WithLabelValues("absent"),
		Present: checks.WithLabelValues("present")}
	if reg != nil {
		reg.MustRegister(s.projects, s.sizeG, s.refused, s.additions, checks)
	}
	return s
}

// Result is what a filter says about a key.
type Result int

// The results of Check.
const (
	// Unknown: the project has no filter; look the key up.
	Unknown Result = iota
	// Absent: the control plane stores nothing about the key.
	Absent
	// Present: the control plane may store something; look the key up.
	Present
)

// CheckPerson says whether the control plane may store a person behind distinctID.
func (s *Set) CheckPerson(projectID int64, distinctID string) Result {
	return s.check(projectID, false, 0, distinctID)
}

// CheckGroup says whether the control plane may store the group.
func (s *Set) CheckGroup(projectID int64, typeIndex int, groupKey string) Result {
	return s.check(projectID, true, typeIndex, groupKey)
}

// check tests the key of a person (id a distinct id) or a group, built on the stack.
func (s *Set) check(projectID int64, group bool, typeIndex int, id string) Result {
	sl := (*s.filters.Load())[projectID]
	if sl == nil {
		return Unknown
	}
	var buf [256]byte
	key := buf[:0]
	if len(id)+2 > len(buf) {
		key = make([]byte, 0, len(id)+2)
	}
	if group {
		key = bloomkeys.GroupKey(key, typeIndex, id)
	} else {
		key = bloomkeys.PersonKey(key, id)
	}
	return result(sl.cur.Load().test(key))
}

func result(present bool) Result {
	if present {
		return Present
	}
	return Absent
}

// Count records a check's outcome for the metrics.
func (s *Set) Count(r Result) { s.checks[r].Inc() }

// Apply installs the membership part of a Watch message, in the order the control plane
// means it: drop every filter (reset), install whole filters, add keys.
func (s *Set) Apply(msg *syncpb.WatchResponse) error {
	if !msg.MembershipReset && len(msg.MembershipFilters) == 0 && len(msg.MembershipAdditions) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.filters.Load()
	next, cloned := cur, false
	clone := func() {
		if !cloned {
			next, cloned = cloneMap(cur), true
		}
	}
	if msg.MembershipReset {
		next, cloned, s.total = map[int64]*slot{}, true, 0
	}
	var errs []error
	for _, f := range msg.MembershipFilters {
		b := &bloom.BloomFilter{}
		if err := b.UnmarshalBinary(f.Bloom); err != nil {
			if sl := next[f.ProjectId]; sl != nil { // a filter that does not decode must not stay behind
				clone()
				s.total -= sl.cur.Load().bytes()
				delete(next, f.ProjectId)
			}
			errs = append(errs, fmt.Errorf("membership filter of project %d: %w", f.ProjectId, err))
			continue
		}
		s.put(next[f.ProjectId], &layers{base: b}, func(sl *slot) { clone(); next[f.ProjectId] = sl })
	}
	for _, a := range msg.MembershipAdditions {
		if sl := next[a.ProjectId]; sl != nil { // else not held (refused, or did not decode): looked up
			l := sl.cur.Load()
			if fresh := l.missing(a.Keys); len(fresh) > 0 {
				s.put(sl, l.with(fresh), nil)
			}
		}
	}
	if s.overCap() {
		clone()
		s.evict(next)
	}
	if cloned {
		s.filters.Store(&next)
	}
	s.bytes.Store(s.total)
	// Keys may have arrived whole without being announced one by one.
	if (msg.MembershipReset || len(msg.MembershipFilters) > 0) && s.onReplace != nil {
		s.onReplace()
	}
	for _, a := range msg.MembershipAdditions { // a project without a filter forgets too
		s.additions.Add(float64(len(a.Keys)))
		if s.onAdd == nil {
			continue
		}
		for _, k := range a.Keys {
			if key, err := bloomkeys.ParseKey(k); err == nil {
				s.onAdd(a.ProjectId, key)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d membership filters refused: %w", len(errs), errs[0])
	}
	return nil
}

// put makes l the layers of sl, or of a new slot handed to add when sl is nil, and keeps
// the total. s.mu is held.
func (s *Set) put(sl *slot, l *layers, add func(*slot)) {
	if sl == nil {
		sl = &slot{}
		add(sl)
	} else {
		s.total -= sl.cur.Load().bytes()
	}
	sl.cur.Store(l)
	s.total += l.bytes()
}

// Add adds keys this edge will make the control plane store: the persons and groups of the
// events it captures (before it acknowledges them), a person it creates by recording hash-key
// overrides. The control plane announces them once stored, but the edge must not answer
// "nothing stored" for them meanwhile — nor, if the link breaks before the announcement
// comes, for as long as it is down. Keys the filter already holds cost nothing; projects
// without a filter are left so.
//
// It returns the keys the filter did not hold before.
func (s *Set) Add(projectID int64, keys ...[]byte) (fresh [][]byte) {
	sl := (*s.filters.Load())[projectID]
	if sl == nil {
		return nil
	}
	inBase := true // the common case, checked without the lock: a base never changes
	for _, k := range keys {
		if !sl.cur.Load().base.Test(k) {
			inBase = false
			break
		}
	}
	if inBase {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl = (*s.filters.Load())[projectID]; sl == nil {
		return nil
	}
	l := sl.cur.Load()
	if fresh = l.missing(keys); len(fresh) == 0 {
		return nil
	}
	s.put(sl, l.with(fresh), nil)
	if s.overCap() {
		next := cloneMap(*s.filters.Load())
		s.evict(next)
		s.filters.Store(&next)
	}
	s.bytes.Store(s.total)
	return fresh
}

// missing returns the keys l does not surely hold: those neither in base nor added since.
// A key that delta merely seems to hold (a false positive) is missing: delta is thrown away
// when it is folded into base, and only the added keys go there.
func (l *layers) missing(keys [][]byte) [][]byte {
	var out [][]byte
	for _, k := range keys {
		if l.base.Test(k) {
			continue
		}
		if _, ok := l.addedSet[string(k)]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// with returns l with keys added: into a new copy of a small filter; for a large one into a
// new copy of the small layer, and once that holds deltaCapacity keys, all of them into a new
// copy of the large one.
func (l *layers) with(keys [][]byte) *layers {
	next := &layers{base: l.base}
	if l.base.Cap()/8 <= smallFilterBytes || len(l.added)+len(keys) >= deltaCapacity {
		next.base = l.base.Copy()
		for _, k := range l.added {
			next.base.Add(k)
		}
		for _, k := range keys {
			next.base.Add(k)
		}
		return next
	}
	if l.delta == nil {
		next.delta = bloomkeys.NewFilter(deltaCapacity / 2)
	} else {
		next.delta = l.delta.Copy()
	}
	next.added, next.addedSet = append(l.added, keys...), l.addedSet
	if next.addedSet == nil {
		next.addedSet = map[string]struct{}{}
	}
	for _, k := range keys {
		next.delta.Add(k)
		next.addedSet[string(k)] = struct{}{}
	}
	return next
}

// Drop forgets the filters of projects the edge no longer holds.
func (s *Set) Drop(projectIDs []int64) {
	if len(projectIDs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := cloneMap(*s.filters.Load())
	for _, id := range projectIDs {
		if sl := next[id]; sl != nil {
			s.total -= sl.cur.Load().bytes()
			delete(next, id)
		}
	}
	s.filters.Store(&next)
	s.bytes.Store(s.total)
}

// overCap reports whether the filters take more than s.max. s.mu is held.
func (s *Set) overCap() bool { return s.max > 0 && s.total > s.max }

// evict drops the largest filters of next until the rest fit in s.max. s.mu is held.
func (s *Set) evict(next map[int64]*slot) {
	for s.overCap() && len(next) > 0 {
		var largest int64
		var most int64 = -1
		for id, sl := range next {
			if b := sl.cur.Load().bytes(); b > most {
				largest, most = id, b
			}
		}
		s.log.Warn("membership filter not kept: over --membership-max-bytes; the project looks up every key",
			"project", largest, "bytes", most, "max_bytes", s.max)
		delete(next, largest)
		s.total -= most
		s.refused.Inc()
	}
}

func cloneMap(m map[int64]*slot) map[int64]*slot {
	out := make(map[int64]*slot, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Bytes is the memory all filters take.
func (s *Set) Bytes() int64 { return s.bytes.Load() }
