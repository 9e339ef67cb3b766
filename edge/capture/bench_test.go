package capture_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// batchBody is a /batch body of n events shaped like what posthog-node sends.
func batchBody(token string, n, seed int) []byte {
	events := make([]any, n)
	for i := range events {
		events[i] = map[string]any{
			"event": "$pageview", "distinct_id": fmt.Sprintf("user-%d", (seed*n+i)%5000), "type": "capture",
			"timestamp": time.Now().Format(time.RFC3339Nano), "uuid": fmt.Sprintf("0192f3c4-%04x-7000-8000-%012x", seed%65536, i),
			"properties": map[string]any{"$current_url": "https://shop.example.com/products/42?ref=mail", "$lib": "posthog-node",
				"$lib_version": "5.70.0", "$browser": "Chrome", "plan": "pro", "cart_items": i % 7, "$geoip_disable": i%10 == 0},
		}
	}
	b, _ := json.Marshal(map[string]any{"api_key": token, "batch": events, "sent_at": time.Now().Format(time.RFC3339Nano)})
	return b
}

// BenchmarkCaptureBatch100 is the edge accepting /batch requests of 100 events into the spool
// (fsync every 10 ms), from parallel clients: decoding, validation, stamping, spool append.
func BenchmarkCaptureBatch100(b *testing.B) {
	const token = "phc_bench"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if err := holder.Apply(&syncpb.WatchResponse{InitialSyncDone: true,
		Snapshots: []*syncpb.ProjectSnapshot{{ProjectId: 1, Version: 1, ApiToken: token}}}); err != nil {
		b.Fatal(err)
	}
	sp, err := spool.Open(spool.Options{Dir: b.TempDir(), Sync: spool.SyncInterval, SyncInterval: 10 * time.Millisecond, QuotaBytes: 64 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	h := capture.NewHandler(holder, sp, nil, nil, nil, nil, nil, log, nil)
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = batchBody(token, 100, i)
	}
	b.SetBytes(int64(len(bodies[0])))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/batch/")
		req.Header.SetContentType("application/json")
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
		i := 0
		for pb.Next() {
			ctx.Request.SetBody(bodies[i%len(bodies)])
			ctx.Response.Reset()
			if err := h.Serve(&ctx, false); err != nil || ctx.Response.StatusCode() != 200 {
				b.Fatalf("%v: %d %s", err, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "events/s")
}
