package flags

import (
	"strconv"
	"strings"
)

// semver is a version reduced to (major, minor, patch).
type semver [3]int64

func (a semver) compare(b semver) int {
	for i := range a {
		switch {
		case a[i] < b[i]:
			return -1
		case a[i] > b[i]:
			return 1
		}
	}
	return 0
}

// parseSemver reads "v1.2.3-beta+build" as (1, 2, 3): a leading v is stripped, pre-release and
// build parts are dropped, missing parts are 0. Each present part must be a number.
func parseSemver(s string) (semver, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "v"), "V")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return semver{}, false
	}
	var v semver
	parts := strings.Split(s, ".")
	if len(parts) > 3 {
		return semver{}, false
	}
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return semver{}, false
		}
		v[i] = n
	}
	return v, true
}

// parseSemverWildcard reads a pattern such as "1.2.*" or "1.*" into the version it starts
// with and the number of fixed parts.
func parseSemverWildcard(s string) (semver, int, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "v"), "V")
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 || parts[len(parts)-1] != "*" {
		return semver{}, 0, false
	}
	var v semver
	for i, p := range parts[:len(parts)-1] {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return semver{}, 0, false
		}
		v[i] = n
	}
	return v, len(parts) - 1, true
}
