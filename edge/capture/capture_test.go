package capture_test

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestFullSpoolAnswers503 fills a spool with a tiny quota: capture answers 503 (which SDKs
// retry) instead of acknowledging events it cannot keep, and every acknowledged event is in
// the spool.
func TestFullSpoolAnswers503(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if err := holder.Apply(&syncpb.WatchResponse{InitialSyncDone: true,
		Snapshots: []*syncpb.ProjectSnapshot{{ProjectId: 1, Version: 1, ApiToken: "phc_t"}}}); err != nil {
		t.Fatal(err)
	}
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), SegmentBytes: 4096, QuotaBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	h := capture.NewHandler(holder, sp, nil, nil, log, nil)
	body := `{"api_key": "phc_t", "event": "e", "distinct_id": "d", "properties": {"pad": "` + strings.Repeat("x", 1000) + `"}}`
	accepted, refused := 0, 0
	for range 40 {
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/capture/")
		req.SetBodyString(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
		switch err := h.Serve(&ctx, false); {
		case err == nil && ctx.Response.StatusCode() == 200:
			accepted++
		case err == apierror.CaptureUnavailable:
			refused++
		default:
			t.Fatalf("%v: %d %s", err, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("accepted %d, refused %d: the quota should let some in and refuse the rest", accepted, refused)
	}
	var stored int
	c := sp.Acked()
	for {
		done := make(chan struct{})
		close(done)
		recs, next, err := sp.Read(done, c, 1<<20)
		if err != nil || len(recs) == 0 {
			break
		}
		stored += len(recs)
		c = next
	}
	if stored != accepted {
		t.Errorf("%d records in the spool for %d acknowledged requests", stored, accepted)
	}
}
