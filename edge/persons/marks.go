package persons

import (
	"sync"
	"time"
)

// marks remembers, for a while and up to a number, which persons this edge created (by
// cache key, with the filters' epoch when marked). A mark costs about 40 bytes — a bounded
// cache entry costs ten times that, and a capture of new users can mark tens of thousands a
// second. Marks live between ttl/2 and ttl: two generations of maps, the older dropped
// whole; a full generation is rotated early. A lost mark only costs a look-up.
//
// Keys are 64-bit hashes of project and distinct id: two persons sharing one (about 1 in
// 10^14 for 100,000 marks) would let one be answered from its overlay without a look-up.
type marks struct {
	ttl time.Duration
	max int // marks per generation

	mu        sync.Mutex
	cur, prev map[uint64]uint64
	rotated   time.Time
}

func newMarks(ttl time.Duration, max int) *marks {
	return &marks{ttl: ttl, max: max, cur: map[uint64]uint64{}, prev: map[uint64]uint64{}, rotated: time.Now()}
}

// rotate drops the older generation when the current one is half a lifetime old or full.
// m.mu is held.
func (m *marks) rotate(now time.Time) {
	switch age := now.Sub(m.rotated); {
	case age >= m.ttl: // both generations are past their lifetime
		m.prev, m.cur, m.rotated = map[uint64]uint64{}, map[uint64]uint64{}, now
	case age >= m.ttl/2 || len(m.cur) >= m.max:
		m.prev, m.cur, m.rotated = m.cur, make(map[uint64]uint64, len(m.cur)), now
	}
}

func (m *marks) set(key, epoch uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rotate(time.Now())
	m.cur[key] = epoch
}

// has reports whether key is marked with epoch.
func (m *marks) has(key, epoch uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rotate(time.Now())
	v, ok := m.cur[key]
	if !ok {
		v, ok = m.prev[key]
	}
	return ok && v == epoch
}

func (m *marks) remove(key uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cur, key)
	delete(m.prev, key)
}
