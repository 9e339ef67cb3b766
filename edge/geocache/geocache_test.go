package geocache_test

import (
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/geoip/geoiptest"
)

// TestLookupThroughRecentAnswers asks for more addresses than the table of recent answers
// has slots, several times over, so that addresses share slots and replace each other: every
// answer must still be the address's own, and every lookup counted.
func TestLookupThroughRecentAnswers(t *testing.T) {
	reader, err := geoip.Open(geoiptest.MustWrite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	reg := prometheus.NewRegistry()
	locator, err := geocache.NewLocator(reader, 1000, cache.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locator.Close)

	// Three /24 networks the test database knows, and 10.0.0.0/8, which it does not: 66,304
	// addresses, four times the table's slots.
	want := map[byte]string{113: "FR", 100: "AU", 2: "US"}
	var addrs []netip.Addr
	for _, prefix := range [][3]byte{{203, 0, 113}, {198, 51, 100}, {192, 0, 2}} {
		for i := range 256 {
			addrs = append(addrs, netip.AddrFrom4([4]byte{prefix[0], prefix[1], prefix[2], byte(i)}))
		}
	}
	for i := range 1 << 16 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}))
	}
	lookups := 0
	for round := range 3 {
		for _, a := range addrs {
			props := locator.Lookup(a)
			lookups++
			b := a.As4()
			if b[0] == 10 {
				if props != nil {
					t.Fatalf("round %d: %v has properties %v", round, a, props)
				}
				continue
			}
			if got := props["$geoip_country_code"]; got != want[b[2]] {
				t.Fatalf("round %d: %v is in %v, want %s", round, a, got, want[b[2]])
			}
		}
		// The IPv4-mapped form is the same address.
		if got := locator.Lookup(netip.MustParseAddr("::ffff:203.0.113.7"))["$geoip_country_code"]; got != "FR" {
			t.Fatalf("IPv4-mapped address: %v", got)
		}
		lookups++
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	if int(total) != lookups {
		t.Errorf("%v lookups counted, %d made", total, lookups)
	}
}
