// Package clientip tells which address an edge request comes from, for GeoIP and the $ip
// property.
package clientip

import (
	"bytes"
	"net"
	"net/netip"
)

// FromRequest returns the address a request comes from: the first entry of X-Forwarded-For when
// it holds one, else the socket's peer.
func FromRequest(forwardedFor []byte, remote net.IP) netip.Addr {
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
