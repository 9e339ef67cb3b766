package state_test

import (
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/flags/flagstest"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestMemoryOf1000Projects holds 1,000 projects of the realistic 50 flags and reports the
// heap they take: the edge's memory budget is 150 MB of RSS for that, with Go's default GOGC
// (the heap may grow to twice what is live) and everything else the edge holds. About 28 MB
// today; the limit catches a regression well before the budget.
func TestMemoryOf1000Projects(t *testing.T) {
	if testing.Short() {
		t.Skip("measures memory over 50,000 flags")
	}
	def := flagstest.RealisticProject()
	h := state.NewHolder("", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for p := range 1000 {
		pb := &syncpb.ProjectSnapshot{ProjectId: int64(p + 1), Version: 1, ApiToken: "phc_" + string(rune('a'+p%26)) + string(rune(p)),
			GroupTypes: map[int32]string{0: "company"}}
		for _, f := range def.Flags {
			pb.Flags = append(pb.Flags, &syncpb.Flag{Id: f.ID, Key: f.Key, Active: true, Version: 1, Filters: append([]byte(nil), f.Filters...)})
		}
		for _, c := range def.Cohorts {
			pb.Cohorts = append(pb.Cohorts, &syncpb.Cohort{Id: c.ID, Filters: c.Filters})
		}
		if err := h.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{pb}}); err != nil {
			t.Fatal(err)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	mb := float64(after.HeapInuse-before.HeapInuse) / 1e6
	t.Logf("1,000 projects × 50 flags: %.1f MB of heap (%.1f KB per flag)", mb, mb*1000/50000)
	if mb > 40 {
		t.Errorf("%.1f MB of heap for 50,000 flags: over budget", mb)
	}
	runtime.KeepAlive(h)
}
