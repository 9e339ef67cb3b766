package bloomkeys

import (
	"fmt"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
)

func TestKeysRoundTrip(t *testing.T) {
	for _, want := range []Key{{DistinctID: "user-1"}, {DistinctID: ""}, {DistinctID: "g1x"}, {Group: true, TypeIndex: 4, GroupKey: "acme"}, {Group: true, GroupKey: ""}} {
		var k []byte
		if want.Group {
			k = GroupKey(nil, want.TypeIndex, want.GroupKey)
		} else {
			k = PersonKey(nil, want.DistinctID)
		}
		got, err := ParseKey(k)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", k, got, err, want)
		}
	}
	// A distinct id that looks like a group key is still a person's key.
	if string(PersonKey(nil, "g0acme")) == string(GroupKey(nil, 0, "acme")) {
		t.Fatal("a person's key equals a group's")
	}
	for _, bad := range []string{"", "x", "g", "g9a"} {
		if _, err := ParseKey([]byte(bad)); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

// TestFalsePositiveRate checks the sizing: a filter holding as many keys as its capacity
// answers about FalsePositiveRate for keys it does not hold, and never misses a key it holds.
func TestFalsePositiveRate(t *testing.T) {
	const n = 50_000
	f := NewFilter(n / 2) // capacity n
	for i := range n {
		f.Add(PersonKey(nil, fmt.Sprintf("member-%d", i)))
	}
	for i := range n {
		if !f.Test(PersonKey(nil, fmt.Sprintf("member-%d", i))) {
			t.Fatalf("member-%d missing", i)
		}
	}
	fp := 0
	const probes = 100_000
	for i := range probes {
		if f.Test(PersonKey(nil, fmt.Sprintf("stranger-%d", i))) {
			fp++
		}
	}
	rate := float64(fp) / probes
	t.Logf("false positives at capacity: %.3f%%; %d bytes for %d keys", 100*rate, f.Cap()/8, n)
	if rate > 2*FalsePositiveRate {
		t.Fatalf("false-positive rate %.4f, want about %.2f", rate, FalsePositiveRate)
	}
}

// TestSizePerMillion states what a filter costs as the control plane builds it: for n keys,
// sized for 2n. Run with -v to read the figures.
func TestSizePerMillion(t *testing.T) {
	const n = 1_000_000
	f := NewFilter(n)
	for i := range n {
		f.Add(PersonKey(nil, fmt.Sprintf("0192e0c4-7d1b-7c3e-9f1a-%012d", i)))
	}
	fp := 0
	const probes = 1_000_000
	for i := range probes {
		if f.Test(PersonKey(nil, fmt.Sprintf("stranger-%d", i))) {
			fp++
		}
	}
	bytes := f.Cap() / 8
	t.Logf("1,000,000 distinct ids: %.2f MB, false positives %.3f%% as built (capacity 2,000,000 keys at %.0f%%)",
		float64(bytes)/1e6, 100*float64(fp)/probes, 100*FalsePositiveRate)
	if bytes > 2_500_000 || float64(fp)/probes > FalsePositiveRate/4 {
		t.Fatalf("%d bytes, %d false positives", bytes, fp)
	}
}

// TestFold: a folded filter holds the keys it held and those added, keeps its size, and a
// broken encoding is refused.
func TestFold(t *testing.T) {
	b := NewFilter(10)
	b.Add(PersonKey(nil, "ann"))
	raw, _ := b.MarshalBinary()
	folded, err := Fold(raw, [][]byte{PersonKey(nil, "bob")})
	if err != nil {
		t.Fatal(err)
	}
	got := &bloom.BloomFilter{}
	if err := got.UnmarshalBinary(folded); err != nil {
		t.Fatal(err)
	}
	if !got.Test(PersonKey(nil, "ann")) || !got.Test(PersonKey(nil, "bob")) || got.Cap() != b.Cap() {
		t.Errorf("folded filter: ann %v, bob %v, %d bits (want both, %d bits)", got.Test(PersonKey(nil, "ann")), got.Test(PersonKey(nil, "bob")), got.Cap(), b.Cap())
	}
	if _, err := Fold([]byte{1, 2, 3}, nil); err == nil {
		t.Error("a broken encoding folded")
	}
}
