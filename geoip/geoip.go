// Package geoip turns IP addresses into PostHog's $geoip_* person properties, reading a
// MaxMind-format City database with geoip2-golang.
package geoip

import (
	"fmt"
	"net/netip"

	geoip2 "github.com/oschwald/geoip2-golang/v2"

	"github.com/flagedge/flagedge/shared/flags"
)

// Reader looks addresses up in a City database. It is safe for concurrent use.
type Reader struct {
	db *geoip2.Reader
}

// Open opens the City database at path.
func Open(path string) (*Reader, error) {
	db, err := geoip2.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open geoip database: %w", err)
	}
	// Fail at start, not on the first request, when the file is not a City database.
	if _, err := db.City(netip.MustParseAddr("127.0.0.1")); err != nil {
		db.Close()
		return nil, fmt.Errorf("open geoip database %s: %w", path, err)
	}
	return &Reader{db: db}, nil
}

// Close releases the database.
func (r *Reader) Close() error { return r.db.Close() }

// Lookup returns the $geoip_* properties of addr: city, country and continent names and
// codes, postal code, time zone, subdivision and coordinates, each only when known. ok is
// false when the database knows nothing of addr.
func (r *Reader) Lookup(addr netip.Addr) (props flags.Properties, ok bool) {
	rec, err := r.db.City(addr.Unmap())
	if err != nil || !rec.HasData() {
		return nil, false
	}
	props = flags.Properties{}
	set := func(key, value string) {
		if value != "" {
			props[key] = value
		}
	}
	set("$geoip_city_name", rec.City.Names.English)
	set("$geoip_country_name", rec.Country.Names.English)
	set("$geoip_country_code", rec.Country.ISOCode)
	set("$geoip_continent_name", rec.Continent.Names.English)
	set("$geoip_continent_code", rec.Continent.Code)
	set("$geoip_postal_code", rec.Postal.Code)
	set("$geoip_time_zone", rec.Location.TimeZone)
	if len(rec.Subdivisions) > 0 {
		set("$geoip_subdivision_1_code", rec.Subdivisions[0].ISOCode)
		set("$geoip_subdivision_1_name", rec.Subdivisions[0].Names.English)
	}
	if rec.Location.Latitude != nil && rec.Location.Longitude != nil {
		props["$geoip_latitude"] = *rec.Location.Latitude
		props["$geoip_longitude"] = *rec.Location.Longitude
	}
	return props, len(props) > 0
}
