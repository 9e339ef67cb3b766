package capture_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"

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
	h := capture.NewHandler(holder, sp, nil, nil, nil, nil, nil, log, nil)
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

// poisonEvents are events PostgreSQL once refused, each of which blocked an edge's forwarding
// for good; capture must acknowledge and store them in a form PostgreSQL takes.
var poisonEvents = map[string]string{
	"NUL in a property value":      `{"event":"x","distinct_id":"u1","properties":{"a":"x\u0000y"}}`,
	"NUL in a property key":        `{"event":"x","distinct_id":"u1","properties":{"a\u0000":1}}`,
	"NUL in $set":                  `{"event":"x","distinct_id":"u1","$set":{"a":"\u0000"}}`,
	"NUL in the distinct id":       `{"event":"x","distinct_id":"u\u00001"}`,
	"NUL in the event name":        `{"event":"x\u0000","distinct_id":"u1"}`,
	"raw 0xff byte":                "{\"event\":\"x\xff\",\"distinct_id\":\"u\xff\",\"properties\":{\"a\":\"\xff\"}}",
	"lone surrogate":               `{"event":"x","distinct_id":"u1","properties":{"a":"\ud800"}}`,
	"number out of range":          `{"event":"x","distinct_id":"u1","properties":{"a":1e200000}}`,
	"timestamp out of range":       `{"event":"x","distinct_id":"u1","timestamp":-1000000000000000}`,
	"5,000-character event name":   `{"event":"` + strings.Repeat("e", 5000) + `","distinct_id":"u1"}`,
	"5,000-character distinct id":  `{"event":"x","distinct_id":"` + strings.Repeat("d", 5000) + `"}`,
	"5,000-character anon id":      `{"event":"$identify","distinct_id":"u1","properties":{"$anon_distinct_id":"` + strings.Repeat("a", 5000) + `"}}`,
	"5,000-character alias":        `{"event":"$create_alias","distinct_id":"u1","properties":{"alias":"` + strings.Repeat("a", 5000) + `"}}`,
	"5,000-character group key":    `{"event":"$groupidentify","distinct_id":"u1","properties":{"$group_type":"company","$group_key":"` + strings.Repeat("k", 5000) + `"}}`,
	"5,000-character group type":   `{"event":"$groupidentify","distinct_id":"u1","properties":{"$group_key":"k","$group_type":"` + strings.Repeat("t", 5000) + `"}}`,
	"5,000-character id, cut in é": `{"event":"x","distinct_id":"` + strings.Repeat("é", 2500) + `"}`,
}

// TestPoisonEventsAreMadeStorable sends each poison event and reads what the spool holds: the
// event is acknowledged, and its text is valid UTF-8 without NUL, its ids at most 200
// characters, its numbers within a double's range and its time within years 1 to 9999.
func TestPoisonEventsAreMadeStorable(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if err := holder.Apply(&syncpb.WatchResponse{InitialSyncDone: true,
		Snapshots: []*syncpb.ProjectSnapshot{{ProjectId: 1, Version: 1, ApiToken: "phc_t"}}}); err != nil {
		t.Fatal(err)
	}
	for name, body := range poisonEvents {
		t.Run(name, func(t *testing.T) {
			sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			h := capture.NewHandler(holder, sp, nil, nil, nil, nil, nil, log, nil)
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI("/batch/")
			req.SetBodyString(`{"api_key":"phc_t","batch":[` + body + `]}`)
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
			if err := h.Serve(&ctx, false); err != nil || ctx.Response.StatusCode() != 200 {
				t.Fatalf("%v: %d %s", err, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			done := make(chan struct{})
			close(done)
			recs, _, err := sp.Read(done, sp.Acked(), 1<<20)
			if err != nil || len(recs) != 1 {
				t.Fatalf("spool holds %d records, %v", len(recs), err)
			}
			var batch syncpb.EventBatch
			if err := proto.Unmarshal(recs[0], &batch); err != nil {
				t.Fatal(err)
			}
			if len(batch.Events) != 1 {
				t.Fatalf("%d events stored", len(batch.Events))
			}
			e := batch.Events[0]
			for what, s := range map[string]string{"event": e.Event, "distinct_id": e.DistinctId} {
				if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || utf8.RuneCountInString(s) > 200 || s == "" {
					t.Errorf("%s %q is not storable", what, s)
				}
			}
			if year := time.UnixMicro(e.TimestampUs).Year(); year < 1 || year > 9999 {
				t.Errorf("timestamp in year %d", year)
			}
			checkStorable(t, e.Properties)
		})
	}
}

// checkStorable fails unless raw is JSON that PostgreSQL's jsonb takes, with ids cut.
func checkStorable(t *testing.T, raw []byte) {
	t.Helper()
	if !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\u0000`)) || bytes.Contains(raw, []byte(`\ud800`)) {
		t.Fatalf("properties not storable: %q", raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var props map[string]any
	if err := dec.Decode(&props); err != nil {
		t.Fatalf("properties %q: %v", raw, err)
	}
	for k, v := range props {
		if strings.ContainsRune(k, 0) {
			t.Errorf("key %q holds NUL", k)
		}
		switch v := v.(type) {
		case json.Number:
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				t.Errorf("%s = %s: %v", k, v, err)
			}
		case string:
			if strings.ContainsRune(v, 0) {
				t.Errorf("%s holds NUL", k)
			}
			if slices.Contains([]string{"$anon_distinct_id", "alias", "$group_key", "$group_type"}, k) && utf8.RuneCountInString(v) > 200 {
				t.Errorf("%s is %d characters", k, utf8.RuneCountInString(v))
			}
		}
	}
}

// TestLargeBatchIsSplitIntoRecords: a request of as many events as a batch may hold (a few
// MB, growing with stamping) goes into the spool as records the forwarder can send one by
// one, all of them, and nothing when the spool cannot take them all.
func TestLargeBatchIsSplitIntoRecords(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if err := holder.Apply(&syncpb.WatchResponse{InitialSyncDone: true,
		Snapshots: []*syncpb.ProjectSnapshot{{ProjectId: 1, Version: 1, ApiToken: "phc_t"}}}); err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	body.WriteString(`{"api_key":"phc_t","batch":[`)
	n := capture.Limits.MaxEvents
	for i := range n {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"event":"a","distinct_id":"b","properties":{"p":"` + strings.Repeat("x", 300) + `"}}`)
	}
	body.WriteString(`]}`)
	serve := func(sp *spool.Spool) error {
		h := capture.NewHandler(holder, sp, nil, nil, nil, nil, nil, log, nil)
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/batch/")
		req.SetBodyString(body.String())
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("2001:db8::1")}, nil)
		return h.Serve(&ctx, false)
	}
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := serve(sp); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	events, records := 0, 0
	for c := sp.Acked(); ; {
		recs, next, err := sp.Read(done, c, 64<<20)
		if err != nil || len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if len(r) > 2<<20 {
				t.Fatalf("a record of %d bytes", len(r))
			}
			var b syncpb.EventBatch
			if err := proto.Unmarshal(r, &b); err != nil {
				t.Fatal(err)
			}
			events += len(b.Events)
			records++
		}
		c = next
	}
	if events != n || records < 3 {
		t.Fatalf("%d events in %d records, want %d in several", events, records, n)
	}
	small, err := spool.Open(spool.Options{Dir: t.TempDir(), QuotaBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := serve(small); err != apierror.CaptureUnavailable || small.Pending() != 0 {
		t.Fatalf("into a spool too small: %v, %d bytes kept; want 503 and nothing kept", err, small.Pending())
	}
}
