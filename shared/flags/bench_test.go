package flags_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/flags/flagstest"
)

// BenchmarkEvaluate50Flags is the engine's budget: 50 realistic flags for one user, with the
// result slice reused as the edge does.
func BenchmarkEvaluate50Flags(b *testing.B) {
	snap, err := flags.Compile(flagstest.RealisticProject())
	if err != nil {
		b.Fatal(err)
	}
	if snap.Len() != 50 {
		b.Fatalf("%d flags", snap.Len())
	}
	props := flagstest.RealisticPersonProperties()
	groups := map[string]string{"company": "acme"}
	groupProps := map[string]flags.Properties{"company": {"seats": 120.0}}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%d", i)
	}
	out := make([]flags.Result, 0, snap.Len())
	req := flags.Request{PersonProperties: props, Groups: groups, GroupProperties: groupProps}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.DistinctID = ids[i%len(ids)]
		out = snap.Evaluate(&req, out)
	}
}

// BenchmarkEvaluateFlags is BenchmarkEvaluate50Flags at 50, 200 and 1,000 flags of the same
// mix (flagstest.RealisticProjectOf): the engine's per-flag cost.
func BenchmarkEvaluateFlags(b *testing.B) {
	for _, n := range []int{50, 200, 1000} {
		b.Run(fmt.Sprintf("flags=%d", n), func(b *testing.B) {
			snap, err := flags.Compile(flagstest.RealisticProjectOf(n))
			if err != nil {
				b.Fatal(err)
			}
			req := flags.Request{PersonProperties: flagstest.RealisticPersonProperties(), Groups: map[string]string{"company": "acme"},
				GroupProperties: map[string]flags.Properties{"company": {"seats": 120.0}}}
			ids := make([]string, 1024)
			for i := range ids {
				ids[i] = "user-" + strconv.Itoa(i)
			}
			var out []flags.Result
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req.DistinctID = ids[i%len(ids)]
				out = snap.Evaluate(&req, out)
				i++
			}
		})
	}
}
