package clientip

import (
	"net"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusting, _ := NewResolver("")
	proxies, err := NewResolver("10.0.0.0/8, 192.168.1.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, xff, peer string
		r               *Resolver
		want            string
	}{
		{"no header", "", "203.0.113.9", trusting, "203.0.113.9"},
		{"no trusted proxies: the first entry", "198.51.100.1, 10.0.0.2", "203.0.113.9", trusting, "198.51.100.1"},
		{"nil resolver", "198.51.100.1", "203.0.113.9", nil, "198.51.100.1"},
		{"garbage header", "nonsense", "203.0.113.9", trusting, "203.0.113.9"},
		{"untrusted peer: its header is ignored", "198.51.100.1", "203.0.113.9", proxies, "203.0.113.9"},
		{"trusted peer: the header's client", "198.51.100.1", "10.1.2.3", proxies, "198.51.100.1"},
		{"spoofed first entry behind a proxy", "1.2.3.4, 198.51.100.1", "10.1.2.3", proxies, "198.51.100.1"},
		{"a chain of trusted proxies", "198.51.100.1, 192.168.1.1, 10.9.9.9", "10.1.2.3", proxies, "198.51.100.1"},
		{"only trusted addresses", "10.0.0.5", "10.1.2.3", proxies, "10.0.0.5"},
		{"garbage after the client", "198.51.100.1, junk", "10.1.2.3", proxies, "10.1.2.3"},
		{"IPv4-mapped peer", "198.51.100.1", "::ffff:10.1.2.3", proxies, "198.51.100.1"},
		// A client's forged header line first, the proxy's own line after it ("|" splits lines).
		{"a forged line before the proxy's", "1.2.3.4|198.51.100.1", "10.1.2.3", proxies, "198.51.100.1"},
		{"two lines, no trusted proxies: the first", "198.51.100.1|10.0.0.2", "203.0.113.9", trusting, "198.51.100.1"},
	} {
		var lines [][]byte
		if c.xff != "" {
			for _, l := range strings.Split(c.xff, "|") {
				lines = append(lines, []byte(l))
			}
		}
		got := c.r.ClientIP(lines, net.ParseIP(c.peer))
		if got.String() != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if _, err := NewResolver("10.0.0.0/8,nope"); err == nil {
		t.Error("a bad CIDR was accepted")
	}
}

// TestRequestIP: a net/http request's header lines and peer are read as ClientIP reads them,
// and Peer believes no header.
func TestRequestIP(t *testing.T) {
	proxies, err := NewResolver("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "10.1.2.3:4567"
	r.Header.Add("X-Forwarded-For", "1.2.3.4")
	r.Header.Add("X-Forwarded-For", "198.51.100.1")
	if got := proxies.RequestIP(r).String(); got != "198.51.100.1" {
		t.Errorf("RequestIP behind a trusted proxy = %s, want 198.51.100.1", got)
	}
	if got := Peer(r).String(); got != "10.1.2.3" {
		t.Errorf("Peer = %s, want 10.1.2.3", got)
	}
	r.RemoteAddr = "[::ffff:203.0.113.9]:80"
	if got := proxies.RequestIP(r).String(); got != "203.0.113.9" {
		t.Errorf("RequestIP from an untrusted peer = %s, want 203.0.113.9", got)
	}
}
