package jsbundle_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/edge/jsbundle"
)

// TestEmbeddedMatchesManifest checks every embedded bundle against the SHA-256 manifest the
// fetch program wrote from the verified tarball, so a hand-edited bundle fails here (the
// network check, make jsbundle-check, compares the manifest with the tarball itself).
func TestEmbeddedMatchesManifest(t *testing.T) {
	manifest, err := os.ReadFile("dist/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(manifest)), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		want[name] = sum
	}
	names := jsbundle.Names()
	if len(names) != len(want) {
		t.Fatalf("%d bundles embedded, manifest lists %d", len(names), len(want))
	}
	for _, name := range names {
		a := jsbundle.Lookup(name)
		h := sha256.Sum256(a.Body)
		if got := hex.EncodeToString(h[:]); got != want[name] {
			t.Errorf("%s: sha256 %s, manifest %s", name, got, want[name])
		}
	}
	if jsbundle.Version == "" || !strings.HasPrefix(jsbundle.Integrity, "sha512-") {
		t.Errorf("version %q, integrity %q", jsbundle.Version, jsbundle.Integrity)
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		found bool
	}{
		{"array.js", true}, {"array.full.js", true}, {"surveys.js", true}, {"exception-autocapture.js", true},
		{"web-vitals.js", true}, {"dead-clicks-autocapture.js", true}, {"tracing-headers.js", true},
		{"LICENSE", false}, {"SHA256SUMS", false}, {"../PIN", false}, {"toolbar.js", false}, {"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := jsbundle.Lookup(tc.name)
			if (a != nil) != tc.found {
				t.Fatalf("found %v, want %v", a != nil, tc.found)
			}
			if a == nil {
				return
			}
			if !bytes.Contains(a.Body, []byte(jsbundle.Version)) && strings.HasPrefix(tc.name, "array") {
				t.Errorf("%s does not name version %s", tc.name, jsbundle.Version)
			}
			zr, err := gzip.NewReader(bytes.NewReader(a.Gzip()))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(plain, a.Body) {
				t.Fatalf("gzip round trip: %v", err)
			}
			if len(a.ETag) != 34 || a.ETag[0] != '"' {
				t.Errorf("etag %q", a.ETag)
			}
		})
	}
}
