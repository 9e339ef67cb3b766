package confseq

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// meanArm is gbstats' SampleMeanStatistic: n users with these sums.
func meanArm(sum, sumSquares float64, n int64) Arm {
	return Arm{N: n, Sum: sum, SumSquares: sumSquares}
}

// TestGbstatsReference holds the sequence to the numbers gbstats (GrowthBook's statistics
// package, packages/stats/tests/frequentist/test_tests.py, TestSequentialTTest) publishes for
// its sequential two-sided test on the relative change: same inputs, same interval to the five
// decimals gbstats rounds to.
func TestGbstatsReference(t *testing.T) {
	a := meanArm(1396.87, 52377.9767, 3000)
	b := meanArm(2422.7, 134698.29, 3461)
	cases := []struct {
		name         string
		tuningN      float64
		estimate, se float64
		lower, upper float64
	}{
		// test_sequential_test_runs: SequentialConfig(sequential_tuning_parameter=1000).
		{"tuning 1000", 1000, 0.50336, 0.33341, -0.55844, 1.56516},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(a, b, HigherIsWorse, Config{Alpha: 0.05, TuningN: c.tuningN})
			if !v.Ready || !v.Effect.Relative {
				t.Fatalf("verdict %+v, want a ready relative estimate", v)
			}
			for _, x := range []struct {
				what      string
				got, want float64
			}{{"estimate", v.Effect.Estimate, c.estimate}, {"stddev", v.Effect.StdErr, c.se},
				{"lower", v.Lower, c.lower}, {"upper", v.Upper, c.upper}} {
				if math.Abs(x.got-x.want) > 0.5e-5 {
					t.Errorf("%s = %.6f, gbstats says %.5f", x.what, x.got, x.want)
				}
			}
			if v.Regression {
				t.Error("an interval that contains zero was called a regression")
			}
		})
	}
}

// TestGbstatsProportion holds the sequence to gbstats' test_sequential_test_runs_prop (the
// default N* of 5,000): gbstats takes a proportion's variance as p(1-p) where an Arm takes the
// sample variance (n-1), so the bounds agree to the effect of n/(n-1) at n = 3,000 (< 1e-4).
func TestGbstatsProportion(t *testing.T) {
	a := Arm{N: 3000, Sum: 1396, SumSquares: 1396}
	b := Arm{N: 3461, Sum: 2422, SumSquares: 2422}
	v := Decide(a, b, HigherIsWorse, Config{Alpha: 0.05})
	want := []float64{0.50386, 0.03386, 0.40098, 0.60675}
	got := []float64{v.Effect.Estimate, v.Effect.StdErr, v.Lower, v.Upper}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-4 {
			t.Errorf("value %d = %.6f, gbstats says %.5f", i, got[i], want[i])
		}
	}
	if !v.Regression {
		t.Error("a +50% rise with the interval far above zero is not a regression")
	}
	if d := Decide(a, b, LowerIsWorse, Config{Alpha: 0.05}); d.Regression {
		t.Error("a rise was called a regression of a metric where lower is worse")
	}
}

// TestTuning checks what the tuning parameter promises: the sequence is tightest near the
// sample size N* it was tuned for (the ordering gbstats' test_sequential_test_tuning_as_expected
// checks), and any sequence is wider than the fixed-sample interval at the same n.
func TestTuning(t *testing.T) {
	const n, s2 = 6461, 1.0
	below, near, above := HalfWidth(s2, n, 10, 0.05), HalfWidth(s2, n, 6461, 0.05), HalfWidth(s2, n, 10000, 0.05)
	if !(near < above && above < below) {
		t.Errorf("half-widths tuned at 10, 6461, 10000: %v %v %v; want the one at 6461 narrowest", below, near, above)
	}
	if fixed := 1.959964 * math.Sqrt(s2/n); near <= fixed {
		t.Errorf("sequence half-width %v not wider than the fixed-sample %v", near, fixed)
	}
	if one, two := OneSidedHalfWidth(s2, n, 6461, 0.05), near; one >= two {
		t.Errorf("one-sided bound %v not closer than the two-sided %v", one, two)
	}
}

func TestNoVerdictBeforeMinimum(t *testing.T) {
	c, tr := Arm{N: 99, Sum: 1, SumSquares: 1}, Arm{N: 500, Sum: 400, SumSquares: 400}
	if v := Decide(c, tr, HigherIsWorse, Config{Alpha: 0.05, MinPerArm: 100}); v.Ready || v.Regression {
		t.Errorf("verdict %+v with 99 control users and a minimum of 100", v)
	}
	if v := Decide(Arm{N: 500}, Arm{N: 500}, HigherIsWorse, Config{Alpha: 0.05}); v.Ready {
		t.Errorf("verdict %+v with no event in either arm", v)
	}
	// No control user has the event yet: the absolute difference still decides.
	v := Decide(Arm{N: 1000}, Arm{N: 1000, Sum: 300, SumSquares: 300}, HigherIsWorse, Config{Alpha: 0.05, MinPerArm: 100})
	if !v.Ready || v.Effect.Relative || !v.Regression {
		t.Errorf("verdict %+v, want a regression on the absolute difference", v)
	}
}

func TestSampleRatioMismatch(t *testing.T) {
	cases := []struct {
		control, treatment int64
		expected           float64
		mismatch           bool
	}{
		{500, 500, 500, false},
		{5000, 5200, 5100, false}, // chi² 3.9: p 0.048, fine at 0.001
		{5000, 5400, 5200, true},  // chi² 15.4: p 9e-5
		{950, 50, 50, false},      // a 5% rollout split as predicted
		{900, 100, 50, true},      // twice the treatment a 5% rollout predicts
		{7, 40, 23.5, false},      // fewer than 8 users in an arm: not checked
		{0, 0, 0, false},          // nothing yet
		{100, 0, 0, false},        // a 0% step predicts no treatment
	}
	for _, c := range cases {
		p, m := SampleRatioMismatch(c.control, c.treatment, c.expected)
		if m != c.mismatch {
			t.Errorf("SampleRatioMismatch(%d, %d, %v) = p %v, mismatch %v; want %v", c.control, c.treatment, c.expected, p, m, c.mismatch)
		}
	}
	// The p-value is the chi-square(1) survival function: chi² = 3.841 gives 0.05.
	if p, _ := SampleRatioMismatch(0, 0, 0); p != 1 {
		t.Errorf("p with no users = %v", p)
	}
	p, _ := SampleRatioMismatch(4902, 5098, 5000) // chi² = 2·98²/5000 = 3.8416
	if math.Abs(p-0.05) > 1e-4 {
		t.Errorf("p at chi² 3.84 = %v, want 0.05", p)
	}
}

// simulation is a plan's guardrail under continuous peeking: users arrive in both arms one
// pair at a time, each sends the event with probability pc or pt, and the verdict is read
// after every `every` users per arm, as a plan evaluator re-reading live counts would.
type simulation struct {
	pc, pt    float64
	minPerArm int64
	every     int64
	horizon   int64 // users per arm after which the plan would have ended
	alpha     float64
	// fixed replaces the confidence sequence by the fixed-sample one-sided z-test, peeked at
	// as often: the mistake the sequence exists to avoid.
	fixed bool
}

// run simulates one plan and returns the users per arm when it declared a regression, or 0
// when it reached the horizon without one.
func (s simulation) run(rng *rand.Rand) int64 {
	var c, t Arm
	// The next user (1-based) of each arm to send the event: gaps between events are
	// geometric, which draws one number per event instead of one per user.
	next := func(from int64, p float64) int64 {
		return from + 1 + int64(math.Floor(math.Log(1-rng.Float64())/math.Log(1-p)))
	}
	nc, nt := next(0, s.pc), next(0, s.pt)
	for n := s.every; n <= s.horizon; n += s.every {
		for ; nc <= n; nc = next(nc, s.pc) {
			c.Sum++
		}
		for ; nt <= n; nt = next(nt, s.pt) {
			t.Sum++
		}
		c.N, t.N, c.SumSquares, t.SumSquares = n, n, c.Sum, t.Sum
		if s.fixed {
			if e := Compare(c, t); n >= s.minPerArm && e.StdErr > 0 && e.Estimate/e.StdErr > 1.644854 {
				return n
			}
			continue
		}
		if Decide(c, t, HigherIsWorse, Config{Alpha: s.alpha, MinPerArm: s.minPerArm}).Regression {
			return n
		}
	}
	return 0
}

// TestAACalibration proves the calibration the plans rely on: 1,000 A/A plans (both arms at
// 2%), each peeked at after every 50 users per arm up to 20,000, roll back at most α of the
// time. A fixed-sample test peeked at this often would roll back far more (see the control
// line, logged for the docs).
func TestAACalibration(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	s := simulation{pc: 0.02, pt: 0.02, minPerArm: 100, every: 50, horizon: 20000, alpha: 0.05}
	const plans = 1000
	rolledBack := 0
	for range plans {
		if s.run(rng) > 0 {
			rolledBack++
		}
	}
	share := float64(rolledBack) / plans
	t.Logf("A/A: %d of %d plans rolled back (%.1f%%), alpha %.0f%%", rolledBack, plans, 100*share, 100*s.alpha)
	if share > s.alpha {
		t.Errorf("A/A plans rolled back %.3f of the time, more than alpha %v", share, s.alpha)
	}
	// The same simulation with a fixed-sample test shows it can see a miscalibrated method.
	s.fixed = true
	naive := 0
	for range plans {
		if s.run(rng) > 0 {
			naive++
		}
	}
	t.Logf("A/A with a fixed-sample z-test peeked at as often: %d of %d rolled back (%.1f%%)", naive, plans, 100*float64(naive)/plans)
	if float64(naive)/plans <= s.alpha {
		t.Errorf("the fixed-sample test peeked at %d times rolled back only %d of %d: the simulation cannot tell", s.horizon/s.every, naive, plans)
	}
}

// TestCatchesRegression: a treatment that raises the event from 2% to 3% of users (+50%) is
// caught, and the exposures it took are logged (median and 90th percentile, per arm).
func TestCatchesRegression(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 2))
	s := simulation{pc: 0.02, pt: 0.03, minPerArm: 100, every: 50, horizon: 60000, alpha: 0.05}
	const plans = 300
	var took []int64
	for range plans {
		if n := s.run(rng); n > 0 {
			took = append(took, n)
		}
	}
	if len(took) < plans*95/100 {
		t.Fatalf("caught %d of %d regressions within %d users per arm, want at least 95%%", len(took), plans, s.horizon)
	}
	slices.Sort(took)
	t.Logf("2%% → 3%%: caught %d of %d; users per arm needed: median %d, p90 %d", len(took), plans,
		took[len(took)/2], took[len(took)*9/10])
}
