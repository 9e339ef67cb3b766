// Package geocache answers an address's $geoip_* properties at the edge through a
// per-address cache in front of the GeoIP database (a full database decode costs
// microseconds; a cache hit, nanoseconds), and a table of recent answers in front of the
// cache (a hit there costs one atomic load: ristretto's Get, with its admission counting,
// expiry check and locked map, cost half a microsecond of every /decide).
package geocache

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/shared/flags"
)

// Locator looks addresses up through a per-address cache. A nil *Locator knows nothing.
type Locator struct {
	reader *geoip.Reader
	cache  *cache.Cache[*entry]
	// recent holds the last answer of every slot, addresses hashed to slots: a direct-mapped
	// table, replaced on collision, read and written without locks.
	recent *[recentSlots]atomic.Pointer[entry]
}

// recentSlots is the size of the table of recent answers (8 bytes a slot, 128 KiB).
const recentSlots = 1 << 14

type entry struct {
	addr  netip.Addr
	props flags.Properties // nil: the database knows nothing of addr
}

// NewLocator returns a locator over reader caching up to maxEntries addresses. The database
// changes only when the edge restarts, so entries live for a day.
func NewLocator(reader *geoip.Reader, maxEntries int64, m *cache.Metrics) (*Locator, error) {
	c, err := cache.New[*entry]("geoip", maxEntries, 24*time.Hour, m)
	if err != nil {
		return nil, err
	}
	return &Locator{reader: reader, cache: c, recent: new([recentSlots]atomic.Pointer[entry])}, nil
}

// Lookup returns the $geoip_* properties of addr, or nil. The map is shared: never modify it.
func (l *Locator) Lookup(addr netip.Addr) flags.Properties {
	if l == nil || !addr.IsValid() {
		return nil
	}
	addr = addr.Unmap()
	raw := addr.As16()
	key := cache.BytesKey(raw[:])
	slot := &l.recent[key%recentSlots]
	if e := slot.Load(); e != nil && e.addr == addr {
		l.cache.Hit()
		return e.props
	}
	if e, ok := l.cache.Get(key); ok && e.addr == addr {
		slot.Store(e)
		return e.props
	}
	props, _ := l.reader.Lookup(addr)
	e := &entry{addr: addr, props: props}
	l.cache.Set(key, e)
	slot.Store(e)
	return props
}

// Close releases the cache.
func (l *Locator) Close() {
	if l != nil {
		l.cache.Close()
	}
}
