// Package cache is the edge's bounded in-memory cache (ristretto behind a small type) for
// data that can always be fetched again: look-up results, GeoIP answers. A Set may be
// refused by the admission policy; callers never rely on a value being kept.
package cache

import (
	"fmt"
	"hash/maphash"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Cache maps 64-bit keys to values with a time to live. Each entry costs 1 (New), or its size
// in bytes (NewBytes).
type Cache[V any] struct {
	c      *ristretto.Cache[uint64, V]
	ttl    time.Duration
	cost   func(V) int64 // nil: every entry costs 1
	hits   prometheus.Counter
	misses prometheus.Counter
}

// Metrics counts hits and misses of every cache by name.
type Metrics struct {
	lookups *prometheus.CounterVec
}

// NewMetrics registers the cache metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagedge_edge_cache_lookups_total", Help: "Cache look-ups by cache and result (hit or miss).",
	}, []string{"cache", "result"})}
	if reg != nil {
		reg.MustRegister(m.lookups)
	}
	return m
}

// New returns a cache of at most maxEntries entries that expire after ttl.
func New[V any](name string, maxEntries int64, ttl time.Duration, m *Metrics) (*Cache[V], error) {
	return newCache[V](name, &ristretto.Config[uint64, V]{
		NumCounters: 10 * maxEntries, // ristretto's advice: ten counters per entry
		MaxCost:     maxEntries,
		BufferItems: 64,
		// Every entry costs 1: without this ristretto adds its own per-item overhead (tens of
		// bytes) to each cost, and a cache of 100,000 entries would hold under 2,000.
		IgnoreInternalCost: true,
	}, ttl, nil, m)
}

// NewBytes returns a cache of at most maxBytes: each entry costs what cost says of its value
// plus ristretto's own bookkeeping for it, so that the bound holds whatever the values hold.
// entryBytes is a typical entry's size, by which the admission policy's counters are sized.
func NewBytes[V any](name string, maxBytes, entryBytes int64, ttl time.Duration, cost func(V) int64, m *Metrics) (*Cache[V], error) {
	return newCache(name, &ristretto.Config[uint64, V]{
		NumCounters: 10 * max(maxBytes/max(entryBytes, 1), 1),
		MaxCost:     maxBytes,
		BufferItems: 64,
	}, ttl, cost, m)
}

func newCache[V any](name string, cfg *ristretto.Config[uint64, V], ttl time.Duration, cost func(V) int64, m *Metrics) (*Cache[V], error) {
	c, err := ristretto.NewCache(cfg)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", name, err)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Cache[V]{c: c, ttl: ttl, cost: cost, hits: m.lookups.WithLabelValues(name, "hit"), misses: m.lookups.WithLabelValues(name, "miss")}, nil
}

// Get returns the value for key.
func (c *Cache[V]) Get(key uint64) (V, bool) {
	v, ok := c.c.Get(key)
	if ok {
		c.hits.Inc()
	} else {
		c.misses.Inc()
	}
	return v, ok
}

// Hit counts a hit found in front of the cache (a caller's own faster table of recent
// values), so that the lookups metric counts every lookup.
func (c *Cache[V]) Hit() { c.hits.Inc() }

// Set stores value for the cache's time to live.
func (c *Cache[V]) Set(key uint64, value V) { c.SetWithTTL(key, value, c.ttl) }

// SetWithTTL stores value for ttl.
func (c *Cache[V]) SetWithTTL(key uint64, value V, ttl time.Duration) {
	cost := int64(1)
	if c.cost != nil {
		cost = c.cost(value)
	}
	c.c.SetWithTTL(key, value, cost, ttl)
}

// Delete removes key.
func (c *Cache[V]) Delete(key uint64) { c.c.Del(key) }

// Wait blocks until pending sets are applied, for a Set that must be seen by the next Get
// (and for tests).
func (c *Cache[V]) Wait() { c.c.Wait() }

// Close stops the cache's goroutines.
func (c *Cache[V]) Close() { c.c.Close() }

var seed = maphash.MakeSeed()

// Key hashes a project id and a string into a cache key. Keys may collide: values carry
// what they are for, and readers check it.
func Key(projectID int64, s string) uint64 {
	return maphash.String(seed, s) ^ (uint64(projectID) * 0x9E3779B97F4A7C15)
}

// BytesKey hashes bytes into a cache key.
func BytesKey(b []byte) uint64 { return maphash.Bytes(seed, b) }
