package flags

import (
	"encoding/json"
	"math"
	"strings"
	"time"
)

// Dates are read as PostHog's server reads them (docs/flags.md, Dates): both the filter's
// value and the person's go through the same parser (a relative date, RFC 3339, a bare date,
// a naive date-time, then the looser forms its fallback parser knows), naive values are UTC;
// a person value that is a number, or a string that is all a number, is epoch seconds. A
// value that does not parse matches nothing.

// dateFilter is a parsed date operand: a point in time, or a span before now.
type dateFilter struct {
	abs   time.Time
	n     int  // relative amount
	unit  byte // 'h', 'd', 'w', 'm', 'y' for relative dates; 0 for absolute
	valid bool // false: the value did not parse, and the filter matches nothing
}

// resolve returns the point in time the filter names, relative ones counted back from now.
func (d dateFilter) resolve(now time.Time) time.Time {
	if d.unit == 0 {
		return d.abs
	}
	return relativeDate(d.n, d.unit, now)
}

// relativeDate counts n units back from now: hours, days and weeks as fixed durations;
// months and years one at a time on the calendar, each step keeping the day of the month
// where the target month has it and taking the month's last day where not (so 31 March less
// two months is 29 January: 29 February first).
func relativeDate(n int, unit byte, now time.Time) time.Time {
	switch unit {
	case 'h':
		return now.Add(-time.Duration(n) * time.Hour)
	case 'd':
		return now.Add(-time.Duration(n) * 24 * time.Hour)
	case 'w':
		return now.Add(-time.Duration(n) * 7 * 24 * time.Hour)
	}
	t := now
	for range n {
		y, m, d := t.Date()
		if unit == 'm' {
			m--
			if m == 0 {
				y, m = y-1, 12
			}
			d = min(d, daysIn(y, m))
		} else {
			y--
			if m == time.February {
				d = min(d, daysIn(y, m))
			}
		}
		t = time.Date(y, m, d, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
	}
	return t
}

func daysIn(y int, m time.Month) int { return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day() }

// parseRelativeDate reads "-30d", "6h", "2w", "1m", "1y": an optional minus, digits for a
// number below 10000 and a unit, nothing else (not even space). The sign does not matter:
// relative dates are always in the past.
func parseRelativeDate(s string) (dateFilter, bool) {
	s = strings.TrimPrefix(s, "-")
	if len(s) < 2 {
		return dateFilter{}, false
	}
	unit := s[len(s)-1]
	if strings.IndexByte("hdwmy", unit) < 0 {
		return dateFilter{}, false
	}
	digits := s[:len(s)-1]
	if !allDigits(digits) {
		return dateFilter{}, false
	}
	digits = strings.TrimLeft(digits, "0")
	n := 0
	for i := 0; i < len(digits); i++ {
		n = n*10 + int(digits[i]-'0')
		if n >= 10000 {
			return dateFilter{}, false
		}
	}
	return dateFilter{n: n, unit: unit, valid: true}, true
}

// parseDateFilter parses a filter's date value; an unparseable one gives an invalid filter.
func parseDateFilter(s string) dateFilter {
	if rel, ok := parseRelativeDate(s); ok {
		return rel
	}
	t, ok := parseDateTime(s)
	return dateFilter{abs: t, valid: ok}
}

// strictLayouts are the forms the server tries first: RFC 3339 (with T, t or a space), a bare
// date, and naive date-times.
var strictLayouts = []string{
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
}

// looseLayouts are the forms of the server's fallback parser this engine knows: dates with a
// space or none before the offset, Postgres-style hour-only offsets, RFC 2822, 12-hour
// clocks, slashes, dots and month names.
var looseLayouts = []string{
	"2006-01-02 15:04:05.999999999 -07:00",
	"2006-01-02 15:04:05.999999999 -0700",
	"2006-01-02 15:04:05.999999999 MST",
	"2006-01-02 15:04:05.999999999-07",
	"2006-01-02 15:04:05.999999999-0700",
	"2006-01-02 15:04 -07:00",
	"2006-01-02 15:04 -0700",
	"2006-01-02 15:04 MST",
	"2006-01-02 15:04-07:00",
	"2006-01-02 15:04-07",
	"2006-01-02 3:04:05 PM",
	"2006-01-02 3:04 PM",
	"2006-01-02 MST",
	"2006-01-02-07:00",
	"2006-01-02Z07:00",
	"Mon, 2 Jan 2006 15:04:05 -0700",
	"Mon, 2 Jan 2006 15:04:05 MST",
	"2 Jan 2006 15:04:05 -0700",
	"2 Jan 2006 15:04:05 MST",
	"2006/1/2 15:04:05.999999999",
	"2006/1/2 15:04",
	"2006/1/2",
	"1/2/2006 15:04:05.999999999",
	"1/2/2006 15:04",
	"1/2/2006 3:04:05 PM",
	"1/2/2006 3:04 PM",
	"1/2/2006",
	"1/2/06 15:04",
	"1/2/06",
	"2006.01.02",
	"1.2.2006",
	"01.02.06",
	"2006-Jan-02",
	"Jan 2, 2006",
	"January 2, 2006",
	"Jan. 2, 2006",
	"Jan 2, 2006 3:04:05 PM",
	"Jan 2, 2006 3:04 PM",
	"January 2, 2006 3:04pm",
	"Jan 2, 2006, 15:04:05",
	"Jan 2, 2006 15:04:05 MST",
	"Jan 2, 2006 15:04 MST",
	"2 Jan 2006",
	"2 January 2006",
	"2 Jan 2006 15:04",
	"2 Jan 2006, 15:04",
	"2 Jan 2006 15:04:05.999999999",
}

// parseDateTime parses an absolute date or date-time (or a relative date, resolved against
// now: a person property may hold one too); naive values are UTC.
func parseDateTime(s string) (time.Time, bool) {
	for _, layout := range strictLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	if len(s) > 10 && (s[10] == 't' || strings.HasSuffix(s, "z")) {
		fixed := []byte(s)
		if fixed[10] == 't' {
			fixed[10] = 'T'
		}
		if fixed[len(fixed)-1] == 'z' {
			fixed[len(fixed)-1] = 'Z'
		}
		if t, err := time.Parse(strictLayouts[0], string(fixed)); err == nil {
			return t, true
		}
	}
	if t, ok := epochString(s); ok {
		return t, true
	}
	for _, layout := range looseLayouts {
		t, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		if strings.Contains(layout, "MST") {
			if name, _ := t.Zone(); name != "UTC" && name != "GMT" {
				continue // other abbreviations are ambiguous: not read
			}
		}
		return t, true
	}
	return time.Time{}, false
}

// epochString reads the fallback parser's timestamps: 10 digits (and a fraction) as seconds,
// 13 as milliseconds, 19 as nanoseconds.
func epochString(s string) (time.Time, bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if !allDigits(whole) || (hasFrac && (len(whole) != 10 || !allDigits(frac))) {
		return time.Time{}, false
	}
	switch len(whole) {
	case 10:
		f, ok := parseRustFloat(s)
		if !ok {
			return time.Time{}, false
		}
		return epoch(f)
	case 13, 19:
		var n int64
		for i := 0; i < len(whole); i++ {
			n = n*10 + int64(whole[i]-'0')
		}
		if len(whole) == 13 {
			return time.UnixMilli(n).UTC(), true
		}
		return time.Unix(0, n).UTC(), true
	}
	return time.Time{}, false
}

// personDate reads a person property as a point in time: a number, or a string that is all
// a number, as epoch seconds; another string as a date; nothing else.
func personDate(v any) (time.Time, bool) {
	switch x := v.(type) {
	case string:
		if f, ok := parseRustFloat(x); ok {
			return epoch(f)
		}
		return parseDateTime(x)
	case json.Number, float64, int, int64:
		f, _ := number(x)
		return epoch(f)
	}
	return time.Time{}, false
}

// epoch is the instant f seconds after the epoch, the fraction rounded to nanoseconds; NaN is
// the epoch itself and what lies beyond the representable years is no date, as on the server.
func epoch(f float64) (time.Time, bool) {
	if math.IsNaN(f) {
		return time.Unix(0, 0).UTC(), true
	}
	if math.IsInf(f, 0) || math.Abs(f) > 8e12 {
		return time.Time{}, false
	}
	sec := math.Floor(f)
	nanos := math.Round(math.Mod(f, 1) * 1e9)
	if nanos < 0 {
		nanos = 0
	}
	return time.Unix(int64(sec), int64(min(nanos, 999_999_999))).UTC(), true
}
