package flags

import (
	"math"
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

// parseSemver reads "v1.2.3-beta+build" as (1, 2, 3), as PostHog's SDKs do: surrounding
// space and a leading v are stripped, pre-release and build parts dropped, missing parts are
// 0, parts beyond the third ignored; numeric parts may not have leading zeros.
func parseSemver(s string) (semver, bool) {
	s = strings.TrimSpace(s)
	if s != "" && (s[0] == 'v' || s[0] == 'V') {
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '-' || s[i] == '+' {
			s = s[:i]
			break
		}
	}
	if s == "" {
		return semver{}, false
	}
	var v semver
	for i := 0; i < 3 && s != ""; i++ {
		part, rest, found := strings.Cut(s, ".")
		n, ok := semverNumber(part)
		if !ok {
			return semver{}, false
		}
		v[i] = n
		if found && rest == "" {
			return semver{}, false // "1." has an empty part
		}
		s = rest
	}
	return v, true
}

// semverNumber reads a part: decimal digits without a leading zero, at most math.MaxInt64.
func semverNumber(p string) (int64, bool) {
	if p == "" || (len(p) > 1 && p[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(p); i++ {
		d := int64(p[i]) - '0'
		if d < 0 || d > 9 || n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// semverRange is the half-open interval [lower, upper) of versions an operator accepts.
type semverRange struct{ lower, upper semver }

func (r semverRange) contains(v semver) bool {
	return v.compare(r.lower) >= 0 && v.compare(r.upper) < 0
}

// tildeRange: ~X.Y.Z accepts [X.Y.Z, X.(Y+1).0).
func tildeRange(s string) (semverRange, bool) {
	v, ok := parseSemver(s)
	return semverRange{v, semver{v[0], v[1] + 1, 0}}, ok
}

// caretRange: ^X.Y.Z accepts up to the next change of the left-most non-zero part.
func caretRange(s string) (semverRange, bool) {
	v, ok := parseSemver(s)
	switch {
	case v[0] > 0:
		return semverRange{v, semver{v[0] + 1, 0, 0}}, ok
	case v[1] > 0:
		return semverRange{v, semver{0, v[1] + 1, 0}}, ok
	}
	return semverRange{v, semver{0, 0, v[2] + 1}}, ok
}

// wildcardRange: X.* accepts [X.0.0, (X+1).0.0), X.Y.* accepts [X.Y.0, X.(Y+1).0) and X.Y.Z.*
// accepts [X.Y.Z, X.Y.(Z+1)).
func wildcardRange(s string) (semverRange, bool) {
	s = strings.TrimSpace(s)
	if s != "" && (s[0] == 'v' || s[0] == 'V') {
		s = s[1:]
	}
	s = strings.TrimRight(strings.ReplaceAll(s, "*", ""), ".")
	var parts []int64
	for _, p := range strings.Split(s, ".") {
		if p == "" {
			continue
		}
		n, ok := semverNumber(p)
		if !ok {
			return semverRange{}, false
		}
		parts = append(parts, n)
	}
	switch len(parts) {
	case 1:
		return semverRange{semver{parts[0], 0, 0}, semver{parts[0] + 1, 0, 0}}, true
	case 2:
		return semverRange{semver{parts[0], parts[1], 0}, semver{parts[0], parts[1] + 1, 0}}, true
	case 3:
		return semverRange{semver{parts[0], parts[1], parts[2]}, semver{parts[0], parts[1], parts[2] + 1}}, true
	}
	return semverRange{}, false
}
