package postgres_test

import (
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/confseq"
)

// TestReleasePlanHistory: each evaluation adds a point to each guardrail whose state changed,
// and none to one whose state did not; a point holds the arms and the interval the plan
// showed then.
func TestReleasePlanHistory(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	n := twoSteps()
	n.Steps[0].MinDurationSeconds = 3600 // the plan stays on its first step
	plan := fx.start(t, n)
	history := func() [][]controlplane.PlanPoint {
		t.Helper()
		h, err := fx.plans.FindReleasePlanHistory(fx.ctx, fx.pid, plan.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != 2 {
			t.Fatalf("history of %d guardrails, want 2", len(h))
		}
		return h
	}
	if h := history(); len(h[0]) != 0 || len(h[1]) != 0 {
		t.Fatalf("points before any evaluation: %+v", h)
	}
	evaluate := func() {
		t.Helper()
		if _, err := fx.plans.EvaluatePlans(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	evaluate()
	evaluate() // nothing changed: no point
	h := history()
	if len(h[0]) != 1 || len(h[1]) != 1 || h[0][0].Control.Users != 0 || h[0][0].Ready || h[0][0].Seq != 0 {
		t.Fatalf("after two evaluations of an empty plan: %+v", h)
	}

	fx.traffic(t, "c", 0, 300, 10, "$exception", false)
	fx.traffic(t, "t", 0, 300, 5, "$exception", true)
	evaluate()
	h = history()
	if len(h[0]) != 2 {
		t.Fatalf("$exception after traffic: %d points, want 2", len(h[0]))
	}
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Results()[0]
	got := h[0][1]
	if got.Seq != 1 || got.Step != 0 || got.Control != (controlplane.ArmSummary{Users: 300, Mean: 0.1}) ||
		got.Treatment != (controlplane.ArmSummary{Users: 300, Mean: 0.2}) {
		t.Errorf("the point after traffic: %+v", got)
	}
	if !got.Ready || !got.Relative || got.Estimate != r.Verdict.Effect.Estimate || got.Lower != r.Verdict.Lower ||
		got.Upper != r.Verdict.Upper || got.Regression != r.Verdict.Regression {
		t.Errorf("the point's interval %+v, the plan's verdict %+v", got, r.Verdict)
	}
	if len(h[1]) != 1 { // no $pageview was sent: the mean guardrail did not change
		t.Errorf("the mean guardrail has %d points, want 1", len(h[1]))
	}
}

// TestReleasePlanHistoryBounded adds 1,200 changed states to one guardrail: it never holds
// more than controlplane.MaxPlanPoints points; they always start at the first, end at the
// latest, and are evenly spaced (every stride-th, the stride doubling as needed), each the
// state it was recorded with; the unchanged guardrail keeps its one point.
func TestReleasePlanHistoryBounded(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	plan := fx.start(t, twoSteps())
	start := time.Now()
	checks := map[int64]int64{498: 1, 499: 2, 997: 2, 998: 4, 1199: 4} // seq: the stride then
	for seq := int64(0); seq < 1200; seq++ {
		plan.Tally.Metrics[0].Control = confseq.Arm{N: seq + 1, Sum: float64(seq)}
		if err := fx.plans.RecordPlanPoints(t.Context(), plan, start.Add(time.Duration(seq)*time.Second)); err != nil {
			t.Fatal(err)
		}
		stride, ok := checks[seq]
		if !ok {
			continue
		}
		h, err := fx.plans.FindReleasePlanHistory(fx.ctx, fx.pid, plan.ID)
		if err != nil {
			t.Fatal(err)
		}
		pts := h[0]
		if len(pts) > controlplane.MaxPlanPoints || len(pts) < controlplane.MaxPlanPoints/2 {
			t.Errorf("seq %d: %d points", seq, len(pts))
		}
		if pts[0].Seq != 0 || pts[len(pts)-1].Seq != seq {
			t.Errorf("seq %d: points from %d to %d", seq, pts[0].Seq, pts[len(pts)-1].Seq)
		}
		for i, pt := range pts {
			if pt.Control.Users != pt.Seq+1 || !pt.At.Equal(start.Add(time.Duration(pt.Seq)*time.Second).Truncate(time.Microsecond)) {
				t.Fatalf("seq %d: point %d holds %+v", seq, pt.Seq, pt)
			}
			if i > 0 && i < len(pts)-1 && pt.Seq-pts[i-1].Seq != stride {
				t.Fatalf("seq %d: points %d and %d, want a stride of %d", seq, pts[i-1].Seq, pt.Seq, stride)
			}
		}
		if len(h[1]) != 1 {
			t.Errorf("seq %d: the unchanged guardrail has %d points", seq, len(h[1]))
		}
	}
}
