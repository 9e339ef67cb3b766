package flags

import (
	"regexp"
	"testing"
)

// regexCases are patterns with text each must contain (requiredText), or "" for none.
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
}

// The text a regex filter needs is every match's, so that looking for it first never changes
// an answer.
func TestRequiredText(t *testing.T) {
	inputs := []string{"", "alice42@example.com", "alice@Example.com", "https://shop.example.com/checkout/v2", "/checkout/",
		"ab", "abc", "xxabcd", "EXAMPLE", "bcd", "Abcd", ".+", "é\xffz", "éz", "a\nline\nb", "abcabc", "\xff"}
	for _, c := range regexCases {
		if got := requiredText(c.pattern); got != c.need {
			t.Errorf("%q: requiredText %q, want %q", c.pattern, got, c.need)
		}
		for _, s := range inputs {
			checkRegex(t, c.pattern, s)
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
		t.Errorf("%q on %q: %v, want %v (needed text %q)", pattern, s, got, want, c.need)
	}
}

// FuzzRegexRequiredText checks that a pattern's needed text never changes whether it matches.
func FuzzRegexRequiredText(f *testing.F) {
	for _, c := range regexCases {
		f.Add(c.pattern, "alice42@example.com")
	}
	f.Add(`a\x{FFFD}b`, "a\xffb")
	f.Fuzz(checkRegex)
}
