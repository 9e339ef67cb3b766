package flags

import (
	"strings"
)

// Versions are read as PostHog's server reads them (docs/flags.md, Semantic versions): a
// leading "v" and surrounding space are dropped, numeric parts lose leading zeros, a missing
// minor or patch part is 0, and what remains must be strict semver: exactly three numeric
// parts, then an optional pre-release and build. Versions order by semver precedence, a
// pre-release below its release, then by build metadata.

// semver is a parsed version. pre and build are the raw suffixes ("" for none).
type semver struct {
	core       [3]uint64
	pre, build string
}

func (a semver) compare(b semver) int {
	for i := range a.core {
		switch {
		case a.core[i] < b.core[i]:
			return -1
		case a.core[i] > b.core[i]:
			return 1
		}
	}
	if c := comparePre(a.pre, b.pre); c != 0 {
		return c
	}
	return compareBuild(a.build, b.build)
}

// comparePre orders pre-releases; no pre-release is the greatest.
func comparePre(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	}
	return compareIdentifiers(a, b)
}

// compareBuild orders build metadata; none is the least.
func compareBuild(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return -1
	case b == "":
		return 1
	}
	return compareIdentifiers(a, b)
}

// compareIdentifiers compares dot-separated identifiers: numeric ones numerically and below
// alphanumeric ones, which compare as ASCII; a shorter list that is a prefix is less.
func compareIdentifiers(a, b string) int {
	for a != "" && b != "" {
		var x, y string
		x, a, _ = strings.Cut(a, ".")
		y, b, _ = strings.Cut(b, ".")
		xn, yn := allDigits(x), allDigits(y)
		switch {
		case xn && yn:
			tx, ty := strings.TrimLeft(x, "0"), strings.TrimLeft(y, "0")
			if len(tx) != len(ty) {
				return sign(len(tx) - len(ty))
			}
			if c := strings.Compare(tx, ty); c != 0 {
				return c
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		case xn:
			return -1
		case yn:
			return 1
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		}
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// normalizeVersion drops a leading "v" and then surrounding space.
func normalizeVersion(s string) string {
	return strings.TrimSpace(strings.TrimPrefix(s, "v"))
}

// stripZeros drops the leading zeros of an all-digit part ("08" is 8, "000" is 0).
func stripZeros(p string) string {
	if !allDigits(p) {
		return p
	}
	if t := strings.TrimLeft(p, "0"); t != "" {
		return t
	}
	return "0"
}

// parseSemver reads a version as the server does.
func parseSemver(s string) (semver, bool) {
	s = normalizeVersion(s)
	core, suffix := s, ""
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		core, suffix = s[:i], s[i:]
	}
	var v semver
	n := 0
	for part := range strings.SplitSeq(core, ".") {
		if n == 3 {
			return semver{}, false // "1.2.3.4"
		}
		x, ok := parseUint(stripZeros(part))
		if !ok {
			return semver{}, false
		}
		v.core[n] = x
		n++
	}
	var ok bool
	if v.pre, v.build, ok = parseSuffix(suffix); !ok {
		return semver{}, false
	}
	return v, true
}

// parseSuffix splits "-pre+build" and checks both: non-empty identifiers of [0-9A-Za-z-],
// numeric pre-release identifiers without leading zeros.
func parseSuffix(s string) (pre, build string, ok bool) {
	if s == "" {
		return "", "", true
	}
	if s[0] == '-' {
		pre, build, _ = strings.Cut(s[1:], "+")
		if !validIdentifiers(pre, true) {
			return "", "", false
		}
		if i := strings.IndexByte(s, '+'); i < 0 {
			return pre, "", true
		}
	} else {
		build = s[1:]
	}
	if !validIdentifiers(build, false) {
		return "", "", false
	}
	return pre, build, true
}

func validIdentifiers(s string, pre bool) bool {
	if s == "" {
		return false
	}
	for id := range strings.SplitSeq(s, ".") {
		if id == "" {
			return false
		}
		for i := 0; i < len(id); i++ {
			c := id[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
				return false
			}
		}
		if pre && allDigits(id) && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// parseUint reads decimal digits without a leading zero (other than "0") into a uint64.
func parseUint(p string) (uint64, bool) {
	if !allDigits(p) || (len(p) > 1 && p[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(p); i++ {
		d := uint64(p[i] - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// canonicalVersion pads a version's numeric core to three parts and strips leading zeros,
// keeping any suffix: what the server builds a ~ or ^ requirement from.
func canonicalVersion(s string) string {
	core, suffix := s, ""
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		core, suffix = s[:i], s[i:]
	}
	parts := strings.Split(core, ".")
	for i := range parts {
		parts[i] = stripZeros(parts[i])
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	return strings.Join(parts, ".") + suffix
}

// versionReq is a version requirement: comparators that must all hold. No comparators
// (the requirement "*") accepts every version without a pre-release.
type versionReq []comparator

// comparator is one requirement on a version; minor and patch are -1 when not given (a
// wildcard or left out).
type comparator struct {
	op           byte // '=', '>', 'G' (>=), '<', 'L' (<=), '~', '^'
	major        uint64
	minor, patch int64
	pre          string
}

// requirement builds the requirement of a semver_tilde, semver_caret or semver_wildcard
// filter from its value, as the server does.
func requirement(op, value string) (versionReq, bool) {
	v := normalizeVersion(value)
	switch op {
	case OpSemverTilde:
		return parseRequirement("~" + canonicalVersion(v))
	case OpSemverCaret:
		return parseRequirement("^" + canonicalVersion(v))
	}
	parts := strings.Split(v, ".")
	for i := range parts {
		parts[i] = stripZeros(parts[i])
	}
	return parseRequirement(strings.ReplaceAll(strings.Join(parts, "."), "*", "x"))
}

// parseRequirement parses a comma-separated list of comparators such as "~1.2.3", "1.2.x",
// ">=1.0, <2" or "*". A comparator without an operator is a caret requirement, one with a
// wildcard an exact match of the parts given.
func parseRequirement(s string) (versionReq, bool) {
	s = strings.TrimSpace(s)
	if s == "*" || s == "x" || s == "X" {
		return versionReq{}, true
	}
	var req versionReq
	for part := range strings.SplitSeq(s, ",") {
		c, ok := parseComparator(strings.TrimSpace(part))
		if !ok {
			return nil, false
		}
		req = append(req, c)
	}
	return req, true
}

func parseComparator(s string) (comparator, bool) {
	c := comparator{op: '^', minor: -1, patch: -1}
	switch {
	case strings.HasPrefix(s, ">="):
		c.op, s = 'G', s[2:]
	case strings.HasPrefix(s, "<="):
		c.op, s = 'L', s[2:]
	case s != "" && strings.IndexByte("=><~^", s[0]) >= 0:
		c.op, s = s[0], s[1:]
	}
	s = strings.TrimSpace(s)
	core, suffix := s, ""
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		core, suffix = s[:i], s[i:]
	}
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return c, false
	}
	wild := false
	for i, p := range parts {
		if p == "*" || p == "x" || p == "X" {
			if i == 0 {
				return c, false
			}
			wild = true
			continue
		}
		if wild {
			return c, false // "1.*.3"
		}
		n, ok := parseUint(p)
		if !ok {
			return c, false
		}
		switch i {
		case 0:
			c.major = n
		case 1:
			c.minor = int64(n)
		default:
			c.patch = int64(n)
		}
	}
	pre, _, ok := parseSuffix(suffix)
	if !ok || (pre != "" && (c.patch < 0 || wild)) {
		return c, false
	}
	c.pre = pre
	if wild && c.op == '^' {
		c.op = '='
	}
	return c, true
}

// matches reports whether v meets the requirement. A pre-release version only meets one
// that names a pre-release of the same major.minor.patch.
func (r versionReq) matches(v semver) bool {
	for i := range r {
		if !r[i].matches(v) {
			return false
		}
	}
	if v.pre == "" {
		return true
	}
	for _, c := range r {
		if c.pre != "" && c.major == v.core[0] && c.minor == int64(v.core[1]) && c.patch == int64(v.core[2]) {
			return true
		}
	}
	return false
}

func (c *comparator) matches(v semver) bool {
	switch c.op {
	case '=':
		return c.exact(v)
	case '>':
		return c.greater(v)
	case 'G':
		return c.exact(v) || c.greater(v)
	case '<':
		return c.less(v)
	case 'L':
		return c.exact(v) || c.less(v)
	case '~':
		return c.tilde(v)
	}
	return c.caret(v)
}

func (c *comparator) exact(v semver) bool {
	if v.core[0] != c.major {
		return false
	}
	if c.minor >= 0 && int64(v.core[1]) != c.minor {
		return false
	}
	if c.patch >= 0 && int64(v.core[2]) != c.patch {
		return false
	}
	return v.pre == c.pre
}

func (c *comparator) greater(v semver) bool {
	if v.core[0] != c.major {
		return v.core[0] > c.major
	}
	if c.minor < 0 {
		return false
	}
	if int64(v.core[1]) != c.minor {
		return int64(v.core[1]) > c.minor
	}
	if c.patch < 0 {
		return false
	}
	if int64(v.core[2]) != c.patch {
		return int64(v.core[2]) > c.patch
	}
	return comparePre(v.pre, c.pre) > 0
}

func (c *comparator) less(v semver) bool {
	if v.core[0] != c.major {
		return v.core[0] < c.major
	}
	if c.minor < 0 {
		return false
	}
	if int64(v.core[1]) != c.minor {
		return int64(v.core[1]) < c.minor
	}
	if c.patch < 0 {
		return false
	}
	if int64(v.core[2]) != c.patch {
		return int64(v.core[2]) < c.patch
	}
	return comparePre(v.pre, c.pre) < 0
}

func (c *comparator) tilde(v semver) bool {
	if v.core[0] != c.major {
		return false
	}
	if c.minor < 0 {
		return true
	}
	if int64(v.core[1]) != c.minor {
		return false
	}
	if c.patch < 0 {
		return true
	}
	if int64(v.core[2]) != c.patch {
		return int64(v.core[2]) > c.patch
	}
	return comparePre(v.pre, c.pre) >= 0
}

func (c *comparator) caret(v semver) bool {
	if v.core[0] != c.major {
		return false
	}
	if c.minor < 0 {
		return true
	}
	minor, patch := int64(v.core[1]), int64(v.core[2])
	if c.patch < 0 {
		if c.major > 0 {
			return minor >= c.minor
		}
		return minor == c.minor
	}
	switch {
	case c.major > 0:
		if minor != c.minor {
			return minor > c.minor
		}
		if patch != c.patch {
			return patch > c.patch
		}
	case c.minor > 0:
		if minor != c.minor {
			return false
		}
		if patch != c.patch {
			return patch > c.patch
		}
	default:
		if minor != c.minor || patch != c.patch {
			return false
		}
	}
	return comparePre(v.pre, c.pre) >= 0
}
