package version

import (
	"regexp"
	"testing"
)

func TestStringHasTheContractShape(t *testing.T) {
	if s := String(); !regexp.MustCompile(`^flagedge \S+ \S+$`).MatchString(s) {
		t.Errorf("String() = %q, want flagedge <version> <commit>", s)
	}
	Version, Commit = "v1.2.3", "0123456789abcdef0123"
	defer func() { Version, Commit = "", "" }()
	if s := String(); s != "flagedge v1.2.3 0123456789abcdef0123" {
		t.Errorf("with build values: %q", s)
	}
}
