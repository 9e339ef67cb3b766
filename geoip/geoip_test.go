package geoip_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/shared/flags"
)

func TestLookup(t *testing.T) {
	r, err := geoip.Open(geoiptest.MustWrite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, ok := r.Lookup(netip.MustParseAddr("203.0.113.7"))
	want := flags.Properties{
		"$geoip_city_name": "Paris", "$geoip_country_name": "France", "$geoip_country_code": "FR",
		"$geoip_continent_name": "Europe", "$geoip_continent_code": "EU", "$geoip_postal_code": "75001",
		"$geoip_time_zone": "Europe/Paris", "$geoip_latitude": 48.8566, "$geoip_longitude": 2.3522,
	}
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Errorf("lookup (-want +got):\n%s", diff)
	}
	if got, ok := r.Lookup(netip.MustParseAddr("::ffff:198.51.100.1")); !ok || got["$geoip_country_code"] != "AU" {
		t.Errorf("IPv4-mapped address: %v %v", got, ok)
	}
	if got, ok := r.Lookup(netip.MustParseAddr("2001:db8::1")); !ok || got["$geoip_city_name"] != "Berlin" {
		t.Errorf("IPv6: %v %v", got, ok)
	}
	if got, ok := r.Lookup(netip.MustParseAddr("8.8.8.8")); ok {
		t.Errorf("unknown address: %v", got)
	}
}

func TestOpenRejectsNonDatabases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not.mmdb")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := geoip.Open(path); err == nil {
		t.Error("opened a file that is not a database")
	}
	if _, err := geoip.Open(filepath.Join(t.TempDir(), "missing.mmdb")); err == nil {
		t.Error("opened a missing file")
	}
}
