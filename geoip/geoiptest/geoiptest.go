// Package geoiptest writes small, deterministic MaxMind City databases for tests, with
// mmdbwriter.
package geoiptest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Location is what the database says about one network.
type Location struct {
	Network       string // CIDR, e.g. "203.0.113.0/24"
	City          string
	Country       string
	CountryCode   string
	Continent     string
	ContinentCode string
	PostalCode    string
	TimeZone      string
	Latitude      float64
	Longitude     float64
}

// Locations is a fixed set of networks on documentation and test ranges, used across tests.
var Locations = []Location{
	{"203.0.113.0/24", "Paris", "France", "FR", "Europe", "EU", "75001", "Europe/Paris", 48.8566, 2.3522},
	{"198.51.100.0/24", "Sydney", "Australia", "AU", "Oceania", "OC", "2000", "Australia/Sydney", -33.8688, 151.2093},
	{"192.0.2.0/24", "New York", "United States", "US", "North America", "NA", "10001", "America/New_York", 40.7128, -74.006},
	{"2001:db8::/32", "Berlin", "Germany", "DE", "Europe", "EU", "10115", "Europe/Berlin", 52.52, 13.405},
}

// Write writes a City database holding locs to path.
func Write(path string, locs []Location) error {
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-City", RecordSize: 28, IncludeReservedNetworks: true})
	if err != nil {
		return err
	}
	for _, l := range locs {
		_, network, err := net.ParseCIDR(l.Network)
		if err != nil {
			return err
		}
		names := func(en string) mmdbtype.Map { return mmdbtype.Map{"en": mmdbtype.String(en)} }
		record := mmdbtype.Map{
			"city":      mmdbtype.Map{"names": names(l.City)},
			"country":   mmdbtype.Map{"names": names(l.Country), "iso_code": mmdbtype.String(l.CountryCode)},
			"continent": mmdbtype.Map{"names": names(l.Continent), "code": mmdbtype.String(l.ContinentCode)},
			"postal":    mmdbtype.Map{"code": mmdbtype.String(l.PostalCode)},
			"location": mmdbtype.Map{"time_zone": mmdbtype.String(l.TimeZone),
				"latitude": mmdbtype.Float64(l.Latitude), "longitude": mmdbtype.Float64(l.Longitude)},
		}
		if err := w.Insert(network, record); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MustWrite writes Locations to a file in a temporary directory and returns its path.
func MustWrite(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "city.mmdb")
	if err := Write(path, Locations); err != nil {
		tb.Fatal(err)
	}
	return path
}
