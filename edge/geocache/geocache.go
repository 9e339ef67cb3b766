// Package geocache answers an address's $geoip_* properties at the edge through a
// per-address cache in front of the GeoIP database (a full database decode costs
// microseconds; a cache hit, nanoseconds).
package geocache

import (
	"net/netip"
	"time"

	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/shared/flags"
)

// Locator looks addresses up through a per-address cache. A nil *Locator knows nothing.
type Locator struct {
	reader *geoip.Reader
	cache  *cache.Cache[*entry]
}

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
	return &Locator{reader: reader, cache: c}, nil
}

// Lookup returns the $geoip_* properties of addr, or nil. The map is shared: never modify it.
func (l *Locator) Lookup(addr netip.Addr) flags.Properties {
	if l == nil || !addr.IsValid() {
		return nil
	}
	addr = addr.Unmap()
	raw := addr.As16()
	key := cache.BytesKey(raw[:])
	if e, ok := l.cache.Get(key); ok && e.addr == addr {
		return e.props
	}
	props, _ := l.reader.Lookup(addr)
	l.cache.Set(key, &entry{addr: addr, props: props})
	return props
}

// Close releases the cache.
func (l *Locator) Close() {
	if l != nil {
		l.cache.Close()
	}
}
