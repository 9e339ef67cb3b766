package flags

import (
	"regexp"
	"sync"
	"sync/atomic"
)

// maxInternedRegexes bounds the shared table of compiled patterns; past it, patterns are
// compiled per flag as usual.
const maxInternedRegexes = 10_000

// regexes holds compiled patterns shared by every snapshot: an edge compiles the same
// patterns for many projects and every version of each, and a compiled regexp.Regexp, safe
// for concurrent use, costs kilobytes.
var regexes struct {
	sync.Map // pattern → *regexp.Regexp
	n        atomic.Int64
}

// compileRegex returns the compiled pattern, shared when possible; nil for an invalid one.
func compileRegex(pattern string) *regexp.Regexp {
	if re, ok := regexes.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil
	}
	if regexes.n.Load() < maxInternedRegexes {
		if prev, loaded := regexes.LoadOrStore(pattern, re); loaded {
			return prev.(*regexp.Regexp)
		}
		regexes.n.Add(1)
	}
	return re
}
