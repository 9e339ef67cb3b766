// Package geo answers the edge's GeoIP questions: which address a request comes from, and
// that address's $geoip_* properties, cached per address (a full database decode costs
// microseconds; a cache hit, nanoseconds).
package geo

import (
	"bytes"
	"net"
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

// ClientIP returns the address a request comes from: the first entry of X-Forwarded-For when
// it holds one, else the socket's peer.
func ClientIP(forwardedFor []byte, remote net.IP) netip.Addr {
	if len(forwardedFor) > 0 {
		first := forwardedFor
		if i := bytes.IndexByte(first, ','); i >= 0 {
			first = first[:i]
		}
		if addr, err := netip.ParseAddr(string(bytes.TrimSpace(first))); err == nil {
			return addr
		}
	}
	if addr, ok := netip.AddrFromSlice(remote); ok {
		return addr.Unmap()
	}
	return netip.Addr{}
}
