package flags

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// dateFilter is a parsed date operand: either a point in time or a duration before now.
type dateFilter struct {
	abs      time.Time
	dateOnly bool // the filter named a day, not an instant
	n        int  // relative amount; 0 with unit 0 means absolute
	unit     byte // 'h', 'd', 'w', 'm', 'y' for relative dates
}

// resolve returns the point in time the filter names, relative ones counted back from now.
func (d dateFilter) resolve(now time.Time) time.Time {
	switch d.unit {
	case 'h':
		return now.Add(-time.Duration(d.n) * time.Hour)
	case 'd':
		return now.AddDate(0, 0, -d.n)
	case 'w':
		return now.AddDate(0, 0, -7*d.n)
	case 'm':
		return addMonthsClamped(now, -d.n)
	case 'y':
		return addMonthsClamped(now, -12*d.n)
	}
	return d.abs
}

// addMonthsClamped moves t by n calendar months, clamping the day to the target month's
// length (Mar 31 minus one month is Feb 28 or 29, not Mar 3).
func addMonthsClamped(t time.Time, n int) time.Time {
	y, m, d := t.Date()
	total := int(m) - 1 + n
	ty := y + floorDiv(total, 12)
	tm := time.Month(total - floorDiv(total, 12)*12 + 1)
	last := time.Date(ty, tm+1, 0, 0, 0, 0, 0, t.Location()).Day()
	if d > last {
		d = last
	}
	return time.Date(ty, tm, d, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// parseDateFilter parses a filter's date value: relative (-30d, 6h, 2w, 1m, 1y) or absolute.
func parseDateFilter(s string) (dateFilter, error) {
	s = strings.TrimSpace(s)
	if rel, ok := parseRelativeDate(s); ok {
		return rel, nil
	}
	t, ok := parseDateTime(s)
	if !ok {
		return dateFilter{}, invalidf("invalid date %q: use an ISO 8601 date or a relative date such as -30d.", s)
	}
	return dateFilter{abs: t, dateOnly: len(s) == len("2006-01-02")}, nil
}

func parseRelativeDate(s string) (dateFilter, bool) {
	s = strings.TrimPrefix(s, "-")
	if len(s) < 2 {
		return dateFilter{}, false
	}
	unit := s[len(s)-1]
	switch unit {
	case 'h', 'd', 'w', 'm', 'y':
	default:
		return dateFilter{}, false
	}
	digits := s[:len(s)-1]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return dateFilter{}, false
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n >= 10000 {
		return dateFilter{}, false
	}
	return dateFilter{n: n, unit: unit}, true
}

var dateLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

// parseDateTime parses an absolute date or datetime; without an offset it is UTC.
func parseDateTime(s string) (time.Time, bool) {
	for _, layout := range dateLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// personDate reads a person property as a point in time: a datetime or date string, or
// epoch seconds as a number or numeric string.
func personDate(v any) (time.Time, bool) {
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if t, ok := parseDateTime(s); ok {
			return t, true
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return epoch(f)
		}
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return epoch(f)
		}
	case float64:
		return epoch(x)
	case int:
		return epoch(float64(x))
	case int64:
		return epoch(float64(x))
	}
	return time.Time{}, false
}

func epoch(f float64) (time.Time, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e13 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true
}
