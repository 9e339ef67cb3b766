package flags

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHasherMatchesSum checks the reused SHA-1 state against sha1.Sum for inputs of every
// length around the block boundaries, past the padded buffer (where it falls back) and with
// multi-byte characters.
func TestHasherMatchesSum(t *testing.T) {
	h := newHasher()
	if h.words == nil {
		t.Error("crypto/sha1's digest is not laid out as stateWords expects: hashes read its binary form, a sixth slower")
	}
	if h.state == nil {
		t.Fatal("the SHA-1 state's binary form is not readable")
	}
	for n := range 300 {
		id := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		for _, c := range []struct {
			prefix string
			sep    bool
			salt   string
		}{{"flag-key", true, ""}, {"flag-key", true, "variant"}, {"holdout-", false, ""}, {"", false, ""}} {
			want := hashString(c.prefix, c.sep, id, c.salt)
			if got := h.hash(c.prefix, c.sep, id, c.salt); got != want {
				t.Fatalf("%q %v %d bytes %q: %v, sha1.Sum gives %v", c.prefix, c.sep, len(id), c.salt, got, want)
			}
			binaryForm := *h
			binaryForm.words = nil
			if got := binaryForm.hash(c.prefix, c.sep, id, c.salt); got != want {
				t.Fatalf("from the binary form: %q %v %d bytes %q: %v, sha1.Sum gives %v", c.prefix, c.sep, len(id), c.salt, got, want)
			}
		}
	}
}

// TestRolloutAndVariantHashes pins what the evaluation may skip or reuse: the variant is
// hashed even at a 100% rollout (which skips the rollout hash), a flag's rollout hash serves
// all its conditions, and a flag never sees the hash of the flag evaluated before it.
func TestRolloutAndVariantHashes(t *testing.T) {
	snap, err := Compile(Project{Flags: []FlagDefinition{
		{ID: 1, Key: "a-full", Active: true, Filters: json.RawMessage(`{"groups": [{"rollout_percentage": 100}],
			"multivariate": {"variants": [{"key": "x", "rollout_percentage": 50}, {"key": "y", "rollout_percentage": 50}]}}`)},
		{ID: 2, Key: "b-two", Active: true, Filters: json.RawMessage(`{"groups": [
			{"properties": [{"key": "plan", "value": "pro"}], "rollout_percentage": 30},
			{"properties": [{"key": "plan", "value": "free", "operator": "is_not"}], "rollout_percentage": 60}]}`)},
		{ID: 3, Key: "c-two", Active: true, Filters: json.RawMessage(`{"groups": [
			{"properties": [{"key": "plan", "value": "pro"}], "rollout_percentage": 30},
			{"properties": [{"key": "plan", "value": "free", "operator": "is_not"}], "rollout_percentage": 60}]}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var out []Result
	seen := map[string]int{}
	for i := range 400 {
		id := fmt.Sprintf("user-%d", i)
		plan := []string{"pro", "free", "team"}[i%3]
		out = snap.Evaluate(&Request{DistinctID: id, PersonProperties: Properties{"plan": plan}}, out)
		wantVariant := "y"
		if fraction(hashString("a-full", true, id, "variant")) < 0.5 {
			wantVariant = "x"
		}
		if r := out[0]; !r.Enabled || r.Variant != wantVariant {
			t.Fatalf("%s: a-full is %v %q, want variant %q", id, r.Enabled, r.Variant, wantVariant)
		}
		seen[out[0].Variant]++
		for j, key := range []string{"b-two", "c-two"} {
			h := fraction(hashString(key, true, id, ""))
			want := (plan == "pro" && h <= 0.3) || (plan != "free" && h <= 0.6)
			if r := out[1+j]; r.Enabled != want {
				t.Errorf("%s plan %s: %s is %v (%s), want %v (hash %.3f)", id, plan, key, r.Enabled, r.Reason, want, h)
			}
		}
	}
	if seen["x"] < 150 || seen["y"] < 150 {
		t.Errorf("variant split %v", seen)
	}
}

// TestHashBounds checks that comparing hash values with the bounds computed at compilation
// answers as comparing PostHog's fractions does: at the bounds, around them, and anywhere.
func TestHashBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var thresholds []float64
	for r := 0; r <= 10000; r += 7 {
		thresholds = append(thresholds, float64(r)/100/100) // rollouts with two decimals, as fractions
	}
	sum := 0.0
	for _, pct := range []float64{33.3, 33.3, 33.4, 12.5, 0.01, 20.99} { // variant bounds: running sums
		sum += pct / 100
		thresholds = append(thresholds, sum)
	}
	thresholds = append(thresholds, 0, 1, 0.5, 1.0/3, math.Nextafter(1, 0), math.Nextafter(0, 1), 1e-18, 1-1e-16)
	for _, th := range thresholds {
		for _, c := range []struct {
			name string
			last int64
			ok   func(f float64) bool
		}{
			{"at most", lastAtMost(th), func(f float64) bool { return f <= th }},
			{"below", lastBelow(th), func(f float64) bool { return f < th }},
		} {
			check := func(x uint64) {
				if x > maxHash {
					return
				}
				if got, want := int64(x) <= c.last, c.ok(fraction(x)); got != want {
					t.Fatalf("%s %v: hash value %d: %v, the fraction %v says %v", c.name, th, x, got, fraction(x), want)
				}
			}
			for d := int64(-3); d <= 3; d++ {
				if x := c.last + d; x >= 0 {
					check(uint64(x))
				}
			}
			for range 200 {
				check(rng.Uint64() >> 4)
			}
			check(0)
			check(maxHash)
		}
	}
}

// TestJoinMatchesFill checks a key block joined with a placed subject against the block fill
// pads from the whole input, for every length of key and subject around the block's limit,
// with both salts, and after the tail held a longer subject (its bytes must not linger).
func TestJoinMatchesFill(t *testing.T) {
	var joined, filled block
	var tl tail
	for k := 1; k <= 56; k++ {
		key := strings.Repeat("k", k-1) + "é"[:1]
		kb := newKeyBlock(key)
		if (kb == nil) != (len(key)+1 > 55) {
			t.Fatalf("key of %d bytes: block %v", len(key), kb != nil)
		}
		for s := 0; s <= 60; s++ {
			for _, salt := range []string{"", "variant"} {
				subj := strings.Repeat("s", s)
				tl.place(strings.Repeat("x", 60), salt) // a longer subject first
				tl.place(subj, salt)
				wantOK := filled.fill(key, true, subj, salt)
				if kb == nil {
					continue
				}
				gotOK := joined.join(kb, len(key)+1, &tl)
				if gotOK != wantOK || (gotOK && joined != filled) {
					t.Fatalf("key %d bytes, subject %d, salt %q: join %v %x, fill %v %x", len(key), s, salt, gotOK, joined, wantOK, filled)
				}
			}
		}
	}
}
