package evalcount

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/flags"
)

// An answer counted again by its slots counts what CountAnswer counted, whether a tally is
// free or every one is in use.
func TestCountSlotsCountsAsCountAnswer(t *testing.T) {
	results := []flags.Result{
		{Key: "a", Active: true, Enabled: true},
		{Key: "b", Active: true},
		{Key: "failed", Active: true, Enabled: true, Failed: true},
		{Key: "inactive"},
		{Key: "left-out", Active: true, Enabled: true},
		{Key: "mv", Active: true, Enabled: true, Variant: "red"},
	}
	want := []bool{true, true, true, true, false, true}
	defs := []Definition{{Key: "a"}, {Key: "b"}, {Key: "failed"}, {Key: "inactive"}, {Key: "left-out"}, {Key: "mv", Variants: []string{"blue", "red"}}}
	for _, busy := range []bool{false, true} {
		counted, replayed := NewRegistry(), NewRegistry()
		p, q := counted.Install(1, defs), replayed.Install(1, defs)
		p.CountAnswer(results, want)
		slots := q.AnswerSlots(nil, results, want)
		if busy {
			for q.tally() != nil { // hold every tally: CountSlots adds to the counters
			}
		}
		q.CountSlots(slots)
		if busy {
			for i := range replayed.tallies {
				replayed.tallies[i].busy.Store(false)
			}
		}
		if diff := cmp.Diff(take(counted), take(replayed)); diff != "" {
			t.Errorf("busy %v: replayed counts differ (-counted +replayed):\n%s", busy, diff)
		}
	}
}
