package evalcount

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/flags"
)

func take(r *Registry) []Count {
	out := r.Take()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.FlagKey != b.FlagKey {
			return a.FlagKey < b.FlagKey
		}
		return a.Value < b.Value
	})
	return out
}

// Counts survive a new snapshot of the project for the flags it keeps unchanged, and those of
// flags it drops or changes are reported once more, then forgotten.
func TestCountsAcrossSnapshots(t *testing.T) {
	r := NewRegistry()
	p := r.Install(1, []Definition{{Key: "a"}, {Key: "mv", Variants: []string{"blue", "red"}}, {Key: "gone"}})
	p.Flag(0).Add(true, "")
	p.Flag(0).Add(false, "")
	p.Flag(1).Add(true, "red")
	p.Flag(1).Add(true, "blue")      // the first variant: its own value, not "true"
	p.Flag(1).Add(true, "holdout-1") // a value the edge does not know
	p.Flag(2).Add(true, "")
	p.Flag(7).Add(true, "") // out of range: nothing
	p.ByKey("nope").Add(true, "")

	next := r.Install(1, []Definition{{Key: "a"}, {Key: "mv", Variants: []string{"blue", "green"}}})
	if next.Flag(0) != p.Flag(0) || next.Flag(1) == p.Flag(1) {
		t.Fatal("an unchanged flag must keep its counters, a changed one get new ones")
	}
	p.Flag(0).Add(true, "") // a request still holding the old snapshot
	next.ByKey("mv").Add(true, "green")

	want := []Count{{1, "a", "false", 1}, {1, "a", "true", 2}, {1, "gone", "true", 1},
		{1, "mv", "blue", 1}, {1, "mv", "green", 1}, {1, "mv", "other", 1}, {1, "mv", "red", 1}}
	if diff := cmp.Diff(want, take(r)); diff != "" {
		t.Errorf("first take (-want +got):\n%s", diff)
	}
	if got := take(r); len(got) != 0 {
		t.Errorf("second take: %v", got)
	}
	next.Flag(0).Add(false, "")
	r.Remove(1)
	if diff := cmp.Diff([]Count{{1, "a", "false", 1}}, take(r)); diff != "" {
		t.Errorf("after removal (-want +got):\n%s", diff)
	}
}

// Counting one evaluation is one atomic add, without allocating.
func TestAddDoesNotAllocate(t *testing.T) {
	p := NewRegistry().Install(1, []Definition{{Key: "mv", Variants: []string{"blue", "red"}}})
	f := p.Flag(0)
	if n := testing.AllocsPerRun(1000, func() { f.Add(true, "red"); f.Add(false, ""); f.Add(true, "") }); n != 0 {
		t.Errorf("%v allocations per evaluation", n)
	}
}

// What answers count through the registry's tallies is taken with the rest: by the next
// Take, whichever project a tally held last, and exactly, however many answers count at once
// (more than there are tallies).
func TestAnswersAreTakenExactly(t *testing.T) {
	r := NewRegistry()
	a := r.Install(1, []Definition{{Key: "a"}, {Key: "mv", Variants: []string{"blue", "red"}}, {Key: "off"}})
	b := r.Install(2, []Definition{{Key: "b"}})
	answerA := []flags.Result{{Active: true, Enabled: true}, {Active: true, Enabled: true, Variant: "blue"}, {Active: false}}
	answerB := []flags.Result{{Active: true}, {Active: true, Enabled: true}} // longer than the project: the rest is not counted
	const workers, answers = 16, 2000
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for n := range answers {
				if (w+n)%3 == 0 {
					b.CountAnswer(answerB, nil)
				} else {
					a.CountAnswer(answerA, []bool{true, true, true})
				}
			}
		}()
	}
	sum := map[string]int64{}
	add := func() {
		for _, c := range r.Take() {
			sum[c.FlagKey+"="+c.Value] += c.N
		}
	}
	for range workers {
		<-done
		add() // while others still count
	}
	add()
	nb := int64(0)
	for w := range workers {
		for n := range answers {
			if (w+n)%3 == 0 {
				nb++
			}
		}
	}
	want := map[string]int64{"a=true": workers*answers - nb, "mv=blue": workers*answers - nb, "b=false": nb}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	a.CountAnswer(answerA, []bool{false, true, true}) // flags left out of the answer are not counted
	if diff := cmp.Diff([]Count{{1, "mv", "blue", 1}}, take(r)); diff != "" {
		t.Errorf("an answer leaving a flag out (-want +got):\n%s", diff)
	}
}

// An answer that finds every tally in use counts each flag on its counters directly.
func TestAnswerCountedWhenEveryTallyIsInUse(t *testing.T) {
	r := NewRegistry()
	p := r.Install(1, []Definition{{Key: "a"}, {Key: "mv", Variants: []string{"blue", "red"}}})
	for i := range r.tallies {
		r.tallies[i].busy.Store(true)
	}
	p.CountAnswer([]flags.Result{{Active: true, Enabled: true}, {Active: true, Enabled: true, Variant: "red"}}, nil)
	for i := range r.tallies {
		if r.tallies[i].project != nil {
			t.Fatal("a tally in use was taken")
		}
		r.tallies[i].busy.Store(false)
	}
	if diff := cmp.Diff([]Count{{1, "a", "true", 1}, {1, "mv", "red", 1}}, take(r)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

// Counting an answer allocates nothing once the tally has held the project.
func TestCountAnswerDoesNotAllocate(t *testing.T) {
	p := NewRegistry().Install(1, []Definition{{Key: "a"}, {Key: "mv", Variants: []string{"blue", "red"}}})
	answer := []flags.Result{{Active: true, Enabled: true}, {Active: true, Enabled: true, Variant: "red"}}
	if n := testing.AllocsPerRun(1000, func() { p.CountAnswer(answer, nil) }); n != 0 {
		t.Errorf("%v allocations per answer", n)
	}
}
