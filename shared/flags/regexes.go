package flags

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// PostHog's server matches regex filters with a backtracking engine (fancy-regex): it
// accepts lookaround and backreferences, which Go's RE2 does not, and it gives up on a
// pattern that backtracks too much. A pattern RE2 compiles is matched by RE2 (no
// backtracking, no allocation); one only a backtracking engine compiles is matched by
// regexp2 with a time limit; one neither compiles matches nothing, for regex and not_regex
// alike. Matching is a search (not anchored) and case-sensitive.

// maxInternedRegexes bounds the shared table of compiled patterns; past it, patterns are
// compiled per flag as usual.
const maxInternedRegexes = 10_000

// backtrackTimeout bounds one backtracking match; a match that runs out matches nothing.
const backtrackTimeout = 5 * time.Millisecond

// compiledRegex is a compiled pattern: re2 when RE2 compiles it, else back.
type compiledRegex struct {
	re2 *regexp.Regexp
	// need is text every match of re2 contains ("" when none is known): a value without it
	// does not match, which strings.Contains tells faster than a match (regexp finds only a
	// leading literal by itself).
	need string
	// texts, when set, are all the strings re2 matches (a pattern of literals and
	// alternatives, such as /checkout/(new|v2)): it occurs in s when one of them does.
	texts []string
	back  *regexp2.Regexp
}

// match reports whether the pattern occurs in s.
func (c *compiledRegex) match(s string) bool {
	if c.texts != nil {
		for _, t := range c.texts {
			if strings.Contains(s, t) {
				return true
			}
		}
		return false
	}
	if c.re2 != nil {
		if c.need != "" && !strings.Contains(s, c.need) {
			return false
		}
		return c.re2.MatchString(s)
	}
	ok, err := c.back.MatchString(s)
	return ok && err == nil
}

// valid reports whether matching s comes to an answer: a backtracking match that runs out of
// time does not, and then not_regex does not match either.
func (c *compiledRegex) valid(s string) bool {
	if c.re2 != nil {
		return true
	}
	_, err := c.back.MatchString(s)
	return err == nil
}

// regexes holds compiled patterns shared by every snapshot: an edge compiles the same
// patterns for many projects and every version of each, and a compiled pattern, safe for
// concurrent use, costs kilobytes.
var regexes struct {
	sync.Map // pattern → *compiledRegex
	n        atomic.Int64
}

// compileRegex returns the compiled pattern, shared when possible; nil for an invalid one.
func compileRegex(pattern string) *compiledRegex {
	if re, ok := regexes.Load(pattern); ok {
		return re.(*compiledRegex)
	}
	c := &compiledRegex{}
	if re, err := regexp.Compile(pattern); err == nil {
		c.re2, c.need, c.texts = re, requiredText(pattern), literalTexts(pattern)
	} else if back, err := regexp2.Compile(pattern, regexp2.RE2); err == nil {
		back.MatchTimeout = backtrackTimeout
		c.back = back
	} else {
		return nil
	}
	if regexes.n.Load() < maxInternedRegexes {
		if prev, loaded := regexes.LoadOrStore(pattern, c); loaded {
			return prev.(*compiledRegex)
		}
		regexes.n.Add(1)
	}
	return c
}

// Surrogate code points: a pattern may name them (\x{D800}) but never matches one, since
// decoded text holds none, while string(r) of one is U+FFFD, which text can hold.
const surrogateMin, surrogateMax = 0xD800, 0xDFFF

// plainText reports whether a literal's runes are text strings.Contains can look for: valid
// runes other than U+FFFD (which matches any invalid UTF-8 byte) and the surrogates.
func plainText(runes []rune) bool {
	for _, r := range runes {
		if r == utf8.RuneError || !utf8.ValidRune(r) {
			return false
		}
	}
	return true
}

// requiredText returns the longest literal of a pattern's top-level sequence, which every
// match contains, or "" when it has none: literals that fold case, and those holding U+FFFD
// (which matches any invalid UTF-8 byte), are not text strings.Contains can look for.
func requiredText(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return ""
	}
	re = re.Simplify()
	parts := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		parts = re.Sub
	}
	need := ""
	for _, p := range parts {
		if p.Op != syntax.OpLiteral || p.Flags&syntax.FoldCase != 0 || !plainText(p.Rune) {
			continue
		}
		if lit := string(p.Rune); len(lit) > len(need) {
			need = lit
		}
	}
	return need
}

// maxTexts bounds literalTexts: past it, the pattern is matched by RE2.
const maxTexts = 16

// literalTexts returns every string a pattern matches when they are few (a pattern of
// literals, classes of a few characters and alternatives, without anchors or repetition),
// else nil. As for requiredText, literals that fold case or hold U+FFFD disqualify it.
func literalTexts(pattern string) []string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	texts, ok := literalSet(re.Simplify())
	if !ok {
		return nil
	}
	return texts
}

func literalSet(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return []string{""}, true
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 || !plainText(re.Rune) {
			return nil, false
		}
		return []string{string(re.Rune)}, true
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi-lo >= maxTexts || len(out)+int(hi-lo)+1 > maxTexts || lo <= utf8.RuneError && utf8.RuneError <= hi ||
				lo <= surrogateMax && surrogateMin <= hi || hi > utf8.MaxRune {
				return nil, false
			}
			for r := lo; r <= hi; r++ {
				out = append(out, string(r))
			}
		}
		return out, len(out) > 0
	case syntax.OpCapture:
		return literalSet(re.Sub[0])
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			set, ok := literalSet(sub)
			if !ok || len(out)*len(set) > maxTexts {
				return nil, false
			}
			next := make([]string, 0, len(out)*len(set))
			for _, a := range out {
				for _, b := range set {
					next = append(next, a+b)
				}
			}
			out = next
		}
		return out, true
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			set, ok := literalSet(sub)
			if !ok || len(out)+len(set) > maxTexts {
				return nil, false
			}
			out = append(out, set...)
		}
		return out, true
	}
	return nil, false
}
