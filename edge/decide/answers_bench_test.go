package decide

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/answercache"
	"github.com/flagedge/flagedge/edge/evalcount"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/flags/flagstest"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// BenchmarkAnswerCache (a micro-benchmark) is the handler's work for one request at 1,000
// flags (flagstest.RealisticProject's 50, twenty times), the same user with person properties
// every time: computed (miss: no answer cache) and given from the answer cache (hit), without
// the network; as posthog-js asks (/flags?v=2&config=true, about 260 KB) and as the bench's
// pinned scenario does (/decide?v=3, about 21 KB).
func BenchmarkAnswerCache(b *testing.B) {
	for _, bc := range []struct {
		name, uri string
		ep        Endpoint
		cached    bool
	}{
		{"flags-v2/miss", "/flags/?v=2&config=true", Flags, false},
		{"flags-v2/hit", "/flags/?v=2&config=true", Flags, true},
		{"decide-v3/miss", "/decide/?v=3", Decide, false},
		{"decide-v3/hit", "/decide/?v=3", Decide, true},
	} {
		cached := bc.cached
		b.Run(bc.name, func(b *testing.B) {
			p := flagstest.RealisticProject()
			pb := &syncpb.ProjectSnapshot{ProjectId: 1, Version: 1, ApiToken: "phc_bench", GroupTypes: map[int32]string{0: "company"}}
			for r := range 20 {
				for _, f := range p.Flags {
					pb.Flags = append(pb.Flags, &syncpb.Flag{Id: int64(len(pb.Flags) + 1), Key: fmt.Sprintf("%s-%d", f.Key, r), Active: true,
						Version: int32(f.Version), Filters: f.Filters})
				}
			}
			for _, c := range p.Cohorts {
				pb.Cohorts = append(pb.Cohorts, &syncpb.Cohort{Id: c.ID, Filters: c.Filters})
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			holder := state.NewHolder("", log, nil)
			holder.CountEvaluations(evalcount.NewRegistry())
			if err := holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{pb}, InitialSyncDone: true}); err != nil {
				b.Fatal(err)
			}
			h := NewHandler(holder, nil, nil, nil, nil, nil, log)
			if cached {
				answers, err := answercache.New(64<<20, false, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer answers.Close()
				h.KeepAnswers(answers)
			}
			body, _ := json.Marshal(map[string]any{"token": "phc_bench", "distinct_id": "returning-user",
				"person_properties": flagstest.RealisticPersonProperties(), "groups": map[string]any{"company": "acme"}})
			var ctx fasthttp.RequestCtx
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI(bc.uri)
			req.Header.SetContentType("application/json")
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
			serve := func() {
				ctx.Request.SetBody(body)
				ctx.Response.Reset()
				if err := h.Serve(&ctx, bc.ep); err != nil {
					b.Fatal(err)
				}
			}
			serve()
			h.answers.Wait()
			b.SetBytes(int64(len(ctx.Response.Body())))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				serve()
			}
		})
	}
}
