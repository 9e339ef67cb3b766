package jsonenc

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
)

// decodedForm is what a JSON decoder must read back from AppendString(s): s with each byte of
// an invalid UTF-8 sequence replaced by U+FFFD.
func decodedForm(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // ranging yields utf8.RuneError for each invalid byte
	}
	return b.String()
}

func checkString(t *testing.T, s string) {
	t.Helper()
	out := AppendString(nil, s)
	if !json.Valid(out) {
		t.Fatalf("AppendString(%q) = %s: not JSON", s, out)
	}
	var back string
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if want := decodedForm(s); back != want {
		t.Fatalf("AppendString(%q) reads back as %q, want %q", s, back, want)
	}
	if strings.ContainsAny(string(out), "\u2028\u2029") {
		t.Fatalf("AppendString(%q) = %s: U+2028/U+2029 unescaped, invalid in JavaScript", s, out)
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quo"te`, `back\slash`, "new\nline\r\ttab", "\x00\x01\x1f\x7f",
		"héllo wörld ✓ 😀", "\u2028\u2029", "bad \xff byte", "\xed\xa0\x80 surrogate", "cut \xe2\x82",
		"</script>", "\ufffd",
	} {
		checkString(t, s)
	}
	if got := string(AppendString([]byte("x"), "a")); got != `x"a"` {
		t.Errorf("AppendString appends: %s", got)
	}
}

func TestAppendScalars(t *testing.T) {
	var b []byte
	b = AppendBool(b, true)
	b = append(b, ' ')
	b = AppendBool(b, false)
	b = append(b, ' ')
	b = AppendInt(b, -42)
	if string(b) != "true false -42" {
		t.Errorf("got %s", b)
	}
}

func TestAppendUUID(t *testing.T) {
	out := AppendUUID(nil, 0x0123456789abcdef, 0xfedcba9876543210)
	var s string
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	u, err := uuid.Parse(s)
	if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("%s: version %v variant %v err %v", s, u.Version(), u.Variant(), err)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\xff", "\u2028", "😀", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkString(t, s)
		if utf8.ValidString(s) && decodedForm(s) != s {
			t.Fatal("decodedForm changed valid UTF-8")
		}
	})
}
