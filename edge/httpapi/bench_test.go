package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/evalcount"
	"github.com/flagedge/flagedge/edge/httpapi"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/flags/flagstest"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// realisticHandler serves flagstest.RealisticProjectOf(n) (RealisticProject's mix of n
// flags) and returns request bodies for distinct users carrying person properties, as
// server-side SDKs send them.
func realisticHandler(b *testing.B, n int) (*httpapi.Server, [][]byte) {
	p := flagstest.RealisticProjectOf(n)
	pb := &syncpb.ProjectSnapshot{ProjectId: 1, Version: 1, ApiToken: token, GroupTypes: map[int32]string{}}
	for i, name := range p.GroupTypes {
		pb.GroupTypes[int32(i)] = name
	}
	for _, f := range p.Flags {
		pb.Flags = append(pb.Flags, &syncpb.Flag{Id: f.ID, Key: f.Key, Active: f.Active, Version: int32(f.Version), Filters: f.Filters})
	}
	for _, c := range p.Cohorts {
		pb.Cohorts = append(pb.Cohorts, &syncpb.Cohort{Id: c.ID, Filters: c.Filters})
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	holder.CountEvaluations(evalcount.NewRegistry()) // as the edge runs: every answered flag counted
	if err := holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{pb}, InitialSyncDone: true}); err != nil {
		b.Fatal(err)
	}
	// The in-flight budget as the edge runs by default: small bodies never touch it.
	api := httpapi.New(httpapi.Config{State: holder, Decide: decide.NewHandler(holder, nil, nil, nil, reqbody.NewBudget(256<<20), nil, log), Logger: log})
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{
			"api_key": token, "distinct_id": fmt.Sprintf("user-%d", i),
			"person_properties": flagstest.RealisticPersonProperties(),
			"groups":            map[string]any{"company": fmt.Sprintf("company-%d", i%50)},
			"group_properties":  map[string]any{"company": map[string]any{"seats": 10 * (i % 20)}},
		})
	}
	return api, bodies
}

// BenchmarkDecideHandler is the server's work for one /decide?v=3 of a new user with person
// properties: routing, body decoding, evaluation of 50, 200 and 1,000 flags of the realistic
// mix, and the response, without the network (a micro-benchmark: bench's pinned scenario is
// the measure of the whole edge).
func BenchmarkDecideHandler(b *testing.B) {
	for _, n := range []int{50, 200, 1000} {
		b.Run(fmt.Sprintf("flags=%d", n), func(b *testing.B) { benchmarkDecideHandler(b, n) })
	}
}

func benchmarkDecideHandler(b *testing.B, n int) {
	api, bodies := realisticHandler(b, n)
	handler := api.Handler()
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/decide/?v=3")
	req.Header.SetContentType("application/json")
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Request.SetBody(bodies[i%len(bodies)])
		ctx.Response.Reset()
		handler(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// BenchmarkDecideInmemory is one /decide?v=3 through fasthttp's client and server over an
// in-memory listener: HTTP parsing and writing on both sides included.
func BenchmarkDecideInmemory(b *testing.B) {
	api, bodies := realisticHandler(b, 50)
	ln := fasthttputil.NewInmemoryListener()
	srv := api.NewFastHTTPServer(testConns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go srv.Serve(ln) //nolint:errcheck // ends when the listener closes
	defer ln.Close()
	client := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://edge/decide/?v=3")
	req.Header.SetContentType("application/json")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.SetBody(bodies[i%len(bodies)])
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v %d", err, resp.StatusCode())
		}
	}
}

// BenchmarkDecideLongFlagKeys is one /decide?v=3 whose flag_keys_to_evaluate lists 50,000
// keys (about 600 KB, within the body limits): what a hostile caller can make the edge do
// for each flag of the answer.
func BenchmarkDecideLongFlagKeys(b *testing.B) {
	api, bodies := realisticHandler(b, 50)
	handler := api.Handler()
	keys := make([]string, 50_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%q", fmt.Sprintf("no-such-flag-%d", i))
	}
	body := append([]byte(`{"flag_keys_to_evaluate":[`+strings.Join(keys, ",")+`],`), bodies[0][1:]...)
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/decide/?v=3")
	req.Header.SetContentType("application/json")
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Request.SetBody(body)
		ctx.Response.Reset()
		handler(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
