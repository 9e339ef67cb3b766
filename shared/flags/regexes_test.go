package flags

import (
	"regexp"
	"slices"
	"testing"
)

// regexCases are patterns with text each match contains (requiredText), or "" for none.
var regexCases = []struct{ pattern, need string }{
	{`^[a-z]+\d*@example\.com$`, "@example.com"},
	{`/checkout/(new|v2)`, "/checkout/"},
	{`abc?`, "ab"},
	{`x*abcd|abc`, ""},
	{`(?i)example`, ""},
	{`(?i:a)bcd`, "bcd"},
	{`\Q.+\E`, ".+"},
	{`é\x{FFFD}z`, ""},
	{`(?m)^line$`, "line"},
	{`(abc)+`, ""},
	{`.*`, ""},
	{`a[bc]d|x(y|)z`, ""},
	{`[^a]`, ""},
	{`(?s).`, ""},
	{`^/checkout/(new|v2)`, "/checkout/"},
	{`(|a)`, ""},
	{`[\x{FFF0}-\x{FFFF}]`, ""},
	// Surrogates: named, never matched, and not U+FFFD, which string(r) makes of them.
	{`\x{D800}`, ""},
	{`[\x{D800}-\x{D801}]`, ""},
	{`a\x{DFFF}`, ""},
	{`x|\x{D800}`, ""},
}

// The text a regex filter needs is every match's, and a pattern's few texts are all it
// matches, so that looking for them instead never changes an answer.
func TestRequiredText(t *testing.T) {
	inputs := []string{"", "alice42@example.com", "abd", "acd", "xz", "xyz", "a", "\uFFF5", "alice@Example.com", "https://shop.example.com/checkout/v2", "/checkout/",
		"ab", "abc", "xxabcd", "EXAMPLE", "bcd", "Abcd", ".+", "é\xffz", "éz", "a\nline\nb", "abcabc", "\xff", "\uFFFD", "a\uFFFD"}
	for _, c := range regexCases {
		if got := requiredText(c.pattern); got != c.need {
			t.Errorf("%q: requiredText %q, want %q", c.pattern, got, c.need)
		}
		for _, s := range inputs {
			checkRegex(t, c.pattern, s)
		}
	}
	for pattern, want := range map[string][]string{`/checkout/(new|v2)`: {"/checkout/new", "/checkout/v2"},
		`a[bc]d|x(y|)z`: {"abd", "acd", "xyz", "xz"}, `(|a)`: {"", "a"}, `^/checkout/(new|v2)`: nil, `[a-z]`: nil} {
		if got := literalTexts(pattern); !slices.Equal(got, want) {
			t.Errorf("%q: literalTexts %q, want %q", pattern, got, want)
		}
	}
}

func checkRegex(t *testing.T, pattern, s string) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return
	}
	c := compileRegex(pattern)
	if got, want := c.match(s), re.MatchString(s); got != want {
		t.Errorf("%q on %q: %v, want %v (needed text %q, texts %q)", pattern, s, got, want, c.need, c.texts)
	}
}

// FuzzRegexRequiredText checks that a pattern's needed text, and its texts when it has few,
// never change whether it matches.
func FuzzRegexRequiredText(f *testing.F) {
	for _, c := range regexCases {
		f.Add(c.pattern, "alice42@example.com")
	}
	f.Add(`a\x{FFFD}b`, "a\xffb")
	f.Fuzz(checkRegex)
}
