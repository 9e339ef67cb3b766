package decide

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flagedge/flagedge/edge/answercache"
	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/edge/evalcount"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/persons"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// storedProps is the control plane's side of the tests: the persons and groups it stores,
// answered over real gRPC to the edge's persons.Store.
type storedProps struct {
	syncpb.UnimplementedSyncServer
	mu      sync.Mutex // guards persons, groups and failing
	persons map[string]map[string]any
	groups  map[string]map[string]any // by group key, of type 0
	failing bool
}

var errDown = errors.New("control plane down")

func (c *storedProps) LookupPerson(ctx context.Context, in *syncpb.LookupPersonRequest) (*syncpb.LookupPersonResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failing {
		return nil, errDown
	}
	props, ok := c.persons[in.DistinctId]
	if !ok {
		return &syncpb.LookupPersonResponse{}, nil
	}
	raw, _ := json.Marshal(props)
	return &syncpb.LookupPersonResponse{Found: true, Properties: raw}, nil
}

func (c *storedProps) LookupGroups(ctx context.Context, in *syncpb.LookupGroupsRequest) (*syncpb.LookupGroupsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failing {
		return nil, errDown
	}
	out := &syncpb.LookupGroupsResponse{}
	for _, g := range in.Groups {
		if props, ok := c.groups[g.GroupKey]; ok && g.GroupTypeIndex == 0 {
			raw, _ := json.Marshal(props)
			out.Groups = append(out.Groups, &syncpb.GroupProperties{GroupKey: g.GroupKey, Properties: raw})
		}
	}
	return out, nil
}

func (c *storedProps) SetHashKeyOverrides(ctx context.Context, in *syncpb.SetHashKeyOverridesRequest) (*syncpb.SetHashKeyOverridesResponse, error) {
	out := map[string]string{}
	for _, k := range in.FlagKeys {
		out[k] = in.HashKey
	}
	return &syncpb.SetHashKeyOverridesResponse{HashKeyOverrides: out}, nil
}

func (c *storedProps) set(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

// serveStored starts c on 127.0.0.1 and returns a client of it.
func serveStored(t *testing.T, c *storedProps) syncpb.SyncClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	syncpb.RegisterSyncServer(srv, c)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return syncpb.NewSyncClient(conn)
}

const (
	answersToken   = "phc_answers"
	clockToken     = "phc_clock"
	backtrackToken = "phc_backtrack"
)

// answersSnapshot is a project whose flags read every input an answer has: stored person and
// group properties, GeoIP, hashing (and experience continuity), payloads.
func answersSnapshot(version int64, everyone string) *syncpb.ProjectSnapshot {
	f := func(id int64, key string, filters string) *syncpb.Flag {
		return &syncpb.Flag{Id: id, Key: key, Active: true, Version: 1, Filters: []byte(filters)}
	}
	continuity := f(6, "continuity", `{"groups": [{"rollout_percentage": 50}]}`)
	continuity.EnsureExperienceContinuity = true
	browserOnly := f(7, "browser-only", `{"groups": [{"rollout_percentage": 100}]}`)
	browserOnly.EvaluationRuntime = "client"
	return &syncpb.ProjectSnapshot{ProjectId: 7, Version: version, ApiToken: answersToken, GroupTypes: map[int32]string{0: "company"},
		Flags: []*syncpb.Flag{
			f(1, "everyone", everyone),
			f(2, "pro-plan", `{"groups": [{"properties": [{"key": "plan", "value": "pro"}]}]}`),
			f(3, "french", `{"groups": [{"properties": [{"key": "$geoip_country_code", "value": "FR"}]}]}`),
			f(4, "mv", `{"groups": [{"rollout_percentage": 100}], "multivariate": {"variants": [{"key": "blue", "rollout_percentage": 50}, {"key": "red", "rollout_percentage": 50}]}, "payloads": {"blue": "{\"c\": 1}"}}`),
			f(5, "enterprise", `{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "tier", "value": "enterprise", "type": "group", "group_type_index": 0}]}]}`),
			continuity,
			browserOnly,
		}}
}

// clockSnapshot is a project with a relative date: its answers change as time passes.
func clockSnapshot() *syncpb.ProjectSnapshot {
	return &syncpb.ProjectSnapshot{ProjectId: 9, Version: 1, ApiToken: clockToken, Flags: []*syncpb.Flag{{Id: 90, Key: "recent", Active: true, Version: 1,
		Filters: []byte(`{"groups": [{"properties": [{"key": "signup", "operator": "is_date_after", "value": "-7d"}]}]}`)}}}
}

// backtrackSnapshot is a project with a pattern only a backtracking engine matches, with a
// time limit: its answers depend on how fast they are computed.
func backtrackSnapshot() *syncpb.ProjectSnapshot {
	return &syncpb.ProjectSnapshot{ProjectId: 10, Version: 1, ApiToken: backtrackToken, Flags: []*syncpb.Flag{{Id: 100, Key: "lookahead", Active: true, Version: 1,
		Filters: []byte(`{"groups": [{"properties": [{"key": "email", "operator": "regex", "value": "^(?=.*@example)"}]}]}`)}}}
}

// answersEnv is an edge's /decide handler with its own holder, counters and persons store
// over the shared control plane, with an answer cache or without.
type answersEnv struct {
	t       *testing.T
	holder  *state.Holder
	counts  *evalcount.Registry
	store   *persons.Store
	answers *answercache.Cache
	reg     *prometheus.Registry
	handler *Handler
}

func newAnswersEnv(t *testing.T, cp syncpb.SyncClient, cached bool) *answersEnv {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &answersEnv{t: t, holder: state.NewHolder("", log, nil), counts: evalcount.NewRegistry(), reg: prometheus.NewRegistry()}
	e.holder.CountEvaluations(e.counts)
	e.apply(answersSnapshot(1, `{"groups": [{"rollout_percentage": 100}]}`), clockSnapshot(), backtrackSnapshot())
	cfg := persons.DefaultConfig()
	cfg.TTL, cfg.NegativeTTL = time.Minute, time.Minute
	store, err := persons.NewStore(cp, cfg, nil, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.store = store
	reader, err := geoip.Open(geoiptest.MustWrite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	locator, err := geocache.NewLocator(reader, 1000, cache.NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locator.Close)
	e.handler = NewHandler(e.holder, store, locator, nil, nil, nil, log)
	if cached {
		if e.answers, err = answercache.New(1<<20, false, nil, e.reg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.answers.Close)
		e.handler.KeepAnswers(e.answers)
	}
	return e
}

func (e *answersEnv) apply(snaps ...*syncpb.ProjectSnapshot) {
	e.t.Helper()
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: snaps, InitialSyncDone: true}); err != nil {
		e.t.Fatal(err)
	}
}

// call answers one request from 10.0.0.1 (headers "Name: value") and returns its body.
func (e *answersEnv) call(ep Endpoint, query, body string, headers ...string) []byte {
	e.t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/flags?" + query)
	req.SetBody([]byte(body))
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1234}, nil)
	if err := e.handler.Serve(&ctx, ep); err != nil {
		e.t.Fatalf("%s %s: %v", query, body, err)
	}
	if got := string(ctx.Response.Header.Peek(string(state.VersionHeader))); got == "" {
		e.t.Errorf("%s %s: no %s header", query, body, state.VersionHeader)
	}
	e.answers.Wait() // what the request kept, and looked up, is found by the next
	e.handler.persons.Wait()
	return append([]byte(nil), ctx.Response.Body()...)
}

// results returns the answer cache's requests counted so far by result.
func (e *answersEnv) results() map[string]float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "flagedge_edge_answer_cache_requests_total" {
			for _, m := range f.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

var freshMembersRE = regexp.MustCompile(`,"requestId":"[0-9a-f-]{36}","evaluatedAt":\d+}$`)

// requestID returns the answer's requestId ("" when it has none).
func requestID(answer []byte) string {
	var v struct{ RequestID string }
	json.Unmarshal(answer, &v)
	return v.RequestID
}

// Each request is answered as an edge without an answer cache answers it, and from the cache
// only when it repeats a request whose every input — the body, the query, the client's
// address, the snapshot, the stored person and groups — is unchanged since.
func TestAnswerCacheAnswersAsComputed(t *testing.T) {
	cp := &storedProps{persons: map[string]map[string]any{"known": {"plan": "pro"}},
		groups: map[string]map[string]any{"acme": {"tier": "enterprise"}}}
	client := serveStored(t, cp)
	cached, computed := newAnswersEnv(t, client, true), newAnswersEnv(t, client, false)

	known := `{"token": "` + answersToken + `", "distinct_id": "known"}`
	withProps := `{"token": "` + answersToken + `", "distinct_id": "known", "person_properties": {"plan": "free"}}`
	withGroup := `{"token": "` + answersToken + `", "distinct_id": "known", "groups": {"company": "acme"}}`
	other := `{"token": "` + answersToken + `", "distinct_id": "someone-else"}`
	identified := `{"token": "` + answersToken + `", "distinct_id": "known", "$anon_distinct_id": "anon-1"}`
	type step struct {
		name    string
		before  func()
		decide  bool // /decide, else /flags
		query   string
		body    string
		headers []string
		want    string // hit, miss or bypass
	}
	steps := []step{
		{name: "first", query: "v=2&config=true", body: known, want: "miss"}, // the person looked up and kept
		{name: "again", query: "v=2&config=true", body: known, want: "hit"},
		{name: "person property sent", query: "v=2&config=true", body: withProps, want: "miss"},
		{name: "other user", query: "v=2&config=true", body: other, want: "miss"},
		{name: "other query", query: "v=2", body: known, want: "miss"},
		{name: "decide v3", decide: true, query: "v=3", body: known, want: "miss"},
		{name: "decide v3 again", decide: true, query: "v=3", body: known, want: "hit"},
		{name: "decide v2", decide: true, query: "v=2", body: known, want: "miss"},
		{name: "decide v2, config ignored", decide: true, query: "v=2&config=true", body: known, want: "hit"},
		{name: "from France", query: "v=2&config=true", body: known, headers: []string{"X-Forwarded-For: 203.0.113.9"}, want: "miss"},
		{name: "from France again", query: "v=2&config=true", body: known, headers: []string{"X-Forwarded-For: 203.0.113.9"}, want: "hit"},
		{name: "from Australia", query: "v=2&config=true", body: known, headers: []string{"X-Forwarded-For: 198.51.100.9"}, want: "miss"},
		{name: "browser runtime told by headers", query: "v=2&config=true", body: known, headers: []string{"Origin: https://example.com"}, want: "miss"},
		{name: "another browser page", query: "v=2&config=true", body: known, headers: []string{"Referer: https://example.com/b"}, want: "hit"},
		{name: "group", query: "v=2&config=true", body: withGroup, want: "miss"},
		{name: "group again", query: "v=2&config=true", body: withGroup, want: "hit"},
		{name: "new snapshot", before: func() {
			snap := answersSnapshot(2, `{"groups": [{"rollout_percentage": 0}]}`)
			cached.apply(snap)
			computed.apply(snap)
		}, query: "v=2&config=true", body: known, want: "miss"},
		{name: "after the new snapshot", query: "v=2&config=true", body: known, want: "hit"},
		{name: "same version compiled again, other contents", before: func() {
			snap := answersSnapshot(2, `{"groups": [{"rollout_percentage": 100}]}`)
			cached.apply(snap)
			computed.apply(snap)
		}, query: "v=2&config=true", body: known, want: "miss"},
		{name: "person captured at this edge", before: func() {
			for _, e := range []*answersEnv{cached, computed} {
				e.store.ApplyPersonUpdate(7, "known", flags.Properties{"plan": "free"}, nil, nil)
			}
		}, query: "v=2&config=true", body: known, want: "miss"},
		{name: "after the capture", query: "v=2&config=true", body: known, want: "hit"},
		{name: "override set by an identify", query: "v=2&config=true", body: identified, want: "bypass"},
		{name: "after the override", query: "v=2&config=true", body: known, want: "miss"},
		{name: "identify again: nothing to write", query: "v=2&config=true", body: identified, want: "miss"},
	}
	var firstID string
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		ep := Flags
		if s.decide {
			ep = Decide
		}
		before := cached.results()
		got := cached.call(ep, s.query, s.body, s.headers...)
		want := computed.call(ep, s.query, s.body, s.headers...)
		after := cached.results()
		for _, r := range []string{"hit", "miss", "bypass"} {
			if n := after[r] - before[r]; (r == s.want) != (n == 1) || n > 1 {
				t.Errorf("%s: %s counted %v times, want the request counted as %s", s.name, r, n, s.want)
			}
		}
		if diff := cmp.Diff(string(freshMembersRE.ReplaceAll(want, nil)), string(freshMembersRE.ReplaceAll(got, nil))); diff != "" {
			t.Errorf("%s: answer differs from the computed one (-computed +cached):\n%s", s.name, diff)
		}
		if ep == Flags && !freshMembersRE.Match(got) {
			t.Errorf("%s: answer without fresh requestId and evaluatedAt: %s", s.name, got)
		}
		switch id := requestID(got); {
		case s.name == "first":
			firstID = id
		case s.name == "again" && (id == firstID || id == ""):
			t.Errorf("a hit gave requestId %q, the first answer's %q", id, firstID)
		}
	}
}

// A person updated at the control plane is answered with its new properties once the edge
// looks it up again (its cached look-up expired): never from an answer computed before.
func TestAnswerCacheFollowsStoredPerson(t *testing.T) {
	cp := &storedProps{persons: map[string]map[string]any{"known": {"plan": "pro"}}}
	client := serveStored(t, cp)
	e := newAnswersEnv(t, client, true)
	cfg := persons.DefaultConfig()
	cfg.TTL = time.Second // each group of calls below must fall within one look-up's life, however loaded the machine
	store, err := persons.NewStore(client, cfg, nil, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.handler.persons = store
	body := `{"token": "` + answersToken + `", "distinct_id": "known"}`
	proPlan := func(answer []byte) bool {
		var v struct{ FeatureFlags map[string]any }
		if err := json.Unmarshal(answer, &v); err != nil {
			t.Fatal(err)
		}
		return v.FeatureFlags["pro-plan"] == true
	}
	for _, want := range []string{"miss", "hit"} {
		before := e.results()[want]
		if !proPlan(e.call(Decide, "v=3", body)) {
			t.Fatalf("%s: pro-plan off for a pro user", want)
		}
		if e.results()[want] != before+1 {
			t.Fatalf("not a %s", want)
		}
	}
	cp.set(func() { cp.persons["known"]["plan"] = "free" })
	time.Sleep(cfg.TTL + 100*time.Millisecond) // the edge's look-up expires
	if proPlan(e.call(Decide, "v=3", body)) {
		t.Error("pro-plan still on after the person's plan changed")
	}
	for range 2 {
		if proPlan(e.call(Decide, "v=3", body)) {
			t.Error("pro-plan on again")
		}
	}
	if got := e.results(); got["hit"] != 3 {
		t.Errorf("results %v: the new answer is not kept", got)
	}
}

// An answer that compared a relative date expires when the comparison could come out
// otherwise: the same request is answered anew once the date it counts back from has moved
// past the person's.
func TestAnswerCacheExpiresWithRelativeDates(t *testing.T) {
	e := newAnswersEnv(t, serveStored(t, &storedProps{}), true)
	// The user turns a week old at turns: the first calls must come before it (3 s leaves room
	// on a loaded machine), the last after it.
	turns := time.Now().Add(3 * time.Second)
	signup := turns.Add(-7 * 24 * time.Hour).UTC().Format(time.RFC3339Nano)
	body := `{"token": "` + clockToken + `", "distinct_id": "u", "person_properties": {"signup": "` + signup + `"}}`
	recent := func() bool {
		var v struct{ FeatureFlags map[string]bool }
		if err := json.Unmarshal(e.call(Decide, "v=3", body), &v); err != nil {
			t.Fatal(err)
		}
		return v.FeatureFlags["recent"]
	}
	if !recent() || !recent() {
		t.Fatal("signed up less than 7 days ago: recent should be on")
	}
	time.Sleep(time.Until(turns.Add(500 * time.Millisecond)))
	if recent() || recent() {
		t.Error("a week and a second later, recent is still on: a stale answer")
	}
	if got := e.results(); got["bypass"] != 0 || got["hit"] != 2 || got["miss"] != 2 {
		t.Errorf("results %v, want 2 misses and 2 hits", got)
	}
}

// A snapshot whose answers depend on how fast they are computed (a pattern matched with a
// time limit) bypasses the cache.
func TestAnswerCacheBypassesTimeLimitedPatterns(t *testing.T) {
	e := newAnswersEnv(t, serveStored(t, &storedProps{}), true)
	body := `{"token": "` + backtrackToken + `", "distinct_id": "u", "person_properties": {"email": "a@example.com"}}`
	for range 3 {
		if answer := e.call(Decide, "v=3", body); !strings.Contains(string(answer), `"lookahead":true`) {
			t.Fatalf("lookahead off: %s", answer)
		}
	}
	if got := e.results(); got["bypass"] != 3 || got["hit"] != 0 {
		t.Errorf("results %v, want 3 bypasses", got)
	}
}

// Answers from the cache count their flag evaluations as computed ones do.
func TestAnswerCacheCountsAsComputed(t *testing.T) {
	cp := &storedProps{persons: map[string]map[string]any{"known": {"plan": "pro"}}}
	client := serveStored(t, cp)
	cached, computed := newAnswersEnv(t, client, true), newAnswersEnv(t, client, false)
	bodies := []string{
		`{"token": "` + answersToken + `", "distinct_id": "known"}`,
		`{"token": "` + answersToken + `", "distinct_id": "known", "flag_keys_to_evaluate": ["mv", "pro-plan"]}`,
		`{"token": "` + answersToken + `", "distinct_id": "other", "person_properties": {"plan": "pro"}}`,
	}
	for range 5 {
		for _, b := range bodies {
			cached.call(Flags, "v=2", b)
			computed.call(Flags, "v=2", b)
		}
	}
	if got := cached.results(); got["hit"] != 12 {
		t.Fatalf("results %v, want 12 hits", got)
	}
	sorted := func(r *evalcount.Registry) map[string]int64 {
		out := map[string]int64{}
		for _, c := range r.Take() {
			out[c.FlagKey+"="+c.Value] += c.N
		}
		return out
	}
	if diff := cmp.Diff(sorted(computed.counts), sorted(cached.counts)); diff != "" {
		t.Errorf("evaluation counts (-computed +cached):\n%s", diff)
	}
}

// An answer computed while a look-up failed is not kept: once the control plane answers, the
// request is answered in full.
func TestAnswerCacheKeepsNoErroredAnswer(t *testing.T) {
	cp := &storedProps{persons: map[string]map[string]any{"known": {"plan": "pro"}}, failing: true}
	e := newAnswersEnv(t, serveStored(t, cp), true)
	body := `{"token": "` + answersToken + `", "distinct_id": "known"}`
	errored := func() bool {
		var v struct{ ErrorsWhileComputingFlags bool }
		if err := json.Unmarshal(e.call(Flags, "v=2", body), &v); err != nil {
			t.Fatal(err)
		}
		return v.ErrorsWhileComputingFlags
	}
	if !errored() {
		t.Fatal("the look-up failed: errorsWhileComputingFlags should be set")
	}
	cp.set(func() { cp.failing = false })
	for range 3 {
		if errored() {
			t.Error("an errored answer given again")
		}
	}
	if got := e.results(); got["bypass"] != 1 || got["miss"] != 1 || got["hit"] != 2 {
		t.Errorf("results %v, want bypass 1 (errored), miss 1, hit 2", got)
	}
}

// A request the answer cache misses reads the person twice — readStored asks whether its
// revision is known, gather looks it up — and counts one membership check; a request it
// answers counts none, since it reads nothing past the cache.
func TestAnswerCacheMissCountsOneMembershipCheck(t *testing.T) {
	client := serveStored(t, &storedProps{persons: map[string]map[string]any{"known": {"plan": "pro"}}})
	e := newAnswersEnv(t, client, true)
	reg := prometheus.NewRegistry()
	store, err := persons.NewStore(client, persons.DefaultConfig(), nil, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.handler.persons = store
	checks := func() float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0.0
		for _, f := range families {
			if f.GetName() == "flagedge_edge_membership_checks_total" {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	body := `{"token": "` + answersToken + `", "distinct_id": "known"}`
	for i, want := range []struct {
		result string
		checks float64
	}{{"miss", 1}, {"hit", 1}} {
		before := e.results()[want.result]
		e.call(Decide, "v=3", body)
		if e.results()[want.result] != before+1 {
			t.Fatalf("request %d: not a %s", i, want.result)
		}
		if got := checks(); got != want.checks {
			t.Errorf("after the %s: %v membership checks, want %v", want.result, got, want.checks)
		}
	}
}
