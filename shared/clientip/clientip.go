// Package clientip tells which address a request comes from: for the edge's GeoIP and $ip
// property, and for the control plane's login limits.
//
// X-Forwarded-For is written by whoever sends the request, so believing it lets any client
// choose its address (and so its $geoip_* properties and $ip). Without trusted proxies the
// edge believes its first entry, as PostHog does — right when every request comes through a
// proxy that overwrites the header, spoofable otherwise. With trusted proxies it believes
// the header only from them, and takes the right-most address that is not a trusted proxy:
// the last hop a trusted proxy saw, which a client cannot forge.
package clientip

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Resolver finds a request's client address. The zero Resolver trusts X-Forwarded-For.
type Resolver struct {
	trusted []netip.Prefix
}

// NewResolver returns a resolver that believes X-Forwarded-For only from the proxies in
// cidrs, a comma-separated list of CIDRs or addresses; empty trusts the header as sent.
func NewResolver(cidrs string) (*Resolver, error) {
	r := &Resolver{}
	for _, c := range strings.Split(cidrs, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, aerr := netip.ParseAddr(c)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxies: %q is not a CIDR or an address", c)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		r.trusted = append(r.trusted, p.Masked())
	}
	return r, nil
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the address a request comes from, given the lines of its
// X-Forwarded-For header (a proxy may add a line of its own rather than extend the first) and
// its socket's peer.
func (r *Resolver) ClientIP(forwardedFor [][]byte, remote net.IP) netip.Addr {
	peer, _ := netip.AddrFromSlice(remote)
	peer = peer.Unmap()
	if r == nil || len(r.trusted) == 0 {
		if len(forwardedFor) > 0 {
			return firstForwarded(forwardedFor[0], peer)
		}
		return peer
	}
	if !r.isTrusted(peer) {
		return peer
	}
	// From the right, across the lines: skip trusted proxies; the first other address is
	// the client.
	client := peer
	for line := len(forwardedFor) - 1; line >= 0; line-- {
		for rest := forwardedFor[line]; len(rest) > 0; {
			entry := rest
			if i := bytes.LastIndexByte(rest, ','); i >= 0 {
				entry, rest = rest[i+1:], rest[:i]
			} else {
				rest = nil
			}
			a, err := netip.ParseAddr(string(bytes.TrimSpace(entry)))
			if err != nil {
				return client // garbage: stop at the last address a trusted proxy vouched for
			}
			client = a.Unmap()
			if !r.isTrusted(client) {
				return client
			}
		}
	}
	return client
}

// firstForwarded is the first entry of an X-Forwarded-For line when it holds an address, else
// peer.
func firstForwarded(forwardedFor []byte, peer netip.Addr) netip.Addr {
	first := forwardedFor
	if i := bytes.IndexByte(first, ','); i >= 0 {
		first = first[:i]
	}
	if addr, err := netip.ParseAddr(string(bytes.TrimSpace(first))); err == nil {
		return addr
	}
	return peer
}

// RequestIP is ClientIP for a net/http request: its X-Forwarded-For lines and its peer.
func (r *Resolver) RequestIP(req *http.Request) netip.Addr {
	var lines [][]byte
	for _, v := range req.Header.Values("X-Forwarded-For") {
		lines = append(lines, []byte(v))
	}
	return r.ClientIP(lines, Peer(req).AsSlice())
}

// Peer is the address of a net/http request's peer, believing no header: the zero Addr when
// RemoteAddr holds no address.
func Peer(req *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(req.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(req.RemoteAddr)
	return a.Unmap()
}
