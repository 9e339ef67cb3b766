package posthogimport_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
	"github.com/flagedge/flagedge/controlplane/httpapi/httpapitest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/posthogimport"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(pgtest.Main(m, postgres.Migrate))
}

// target is a real flagedge control plane (REST API on a real database, served on
// 127.0.0.1) with a bootstrapped admin's key and project: where an import writes.
type target struct {
	t       *testing.T
	db      *postgres.DB
	url     string
	key     string
	project string
}

func newTarget(t *testing.T) *target {
	t.Helper()
	api := httpapitest.Serve(t)
	return &target{t: t, db: api.DB, url: api.URL, key: api.Key, project: fmt.Sprint(api.ProjectID)}
}

// dst is the import's target, its requests sent through httpClient (nil: a plain client).
func (tg *target) dst(httpClient *http.Client) posthogimport.Target {
	return posthogimport.Target{Client: flagsascode.NewClient(tg.url, tg.key, tg.project, httpClient),
		URL: tg.url, Key: tg.key, Project: tg.project, HTTP: httpClient}
}

func (tg *target) count(query string) int {
	tg.t.Helper()
	var n int
	if err := tg.db.Pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		tg.t.Fatal(err)
	}
	return n
}

// source is a test server speaking PostHog's REST API from the fixtures in testdata (PostHog's
// answer shapes): GET /api/projects/1/<list>/?offset=N answers <list>_N.json, each page's
// next link pointing back at the server. The first request of the second page of the flags,
// and of the static cohort's members, is answered 429 with Retry-After: 1.
type source struct {
	srv      *httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	// throttled are the lists whose second page is answered 429 first: when it was, and when
	// it was asked again.
	throttled map[string]*throttle
}

type throttle struct{ limitedAt, retriedAt time.Time }

func newSource(t *testing.T) *source {
	s := &source{throttled: map[string]*throttle{"feature_flags": {}, "cohorts/23/persons": {}}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer phx_test" {
			http.Error(w, `{"type":"authentication_error","code":"authentication_failed"}`, http.StatusUnauthorized)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/api/projects/1/")
		if !ok || r.URL.Query().Get("limit") != "100" {
			http.NotFound(w, r)
			return
		}
		list := strings.Trim(name, "/")
		file := fmt.Sprintf("testdata/%s_%s.json", list, r.URL.Query().Get("offset"))
		if th := s.throttled[list]; th != nil && r.URL.Query().Get("offset") == "100" {
			s.mu.Lock()
			first := th.limitedAt.IsZero()
			if first {
				th.limitedAt = time.Now()
			} else if th.retriedAt.IsZero() {
				th.retriedAt = time.Now()
			}
			s.mu.Unlock()
			if first {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, `{"type":"throttled_error","code":"throttled","detail":"Request was throttled."}`)
				return
			}
		}
		data, err := os.ReadFile(file)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(strings.ReplaceAll(string(data), "{{BASE}}", s.srv.URL)))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *source) reader(t *testing.T) *posthogimport.Source {
	t.Helper()
	src, err := posthogimport.NewSource(s.srv.URL, "phx_test", "1")
	if err != nil {
		t.Fatal(err)
	}
	src.MinInterval = time.Millisecond
	return src
}

func TestImportFromPostHog(t *testing.T) {
	ctx := context.Background()
	tg := newTarget(t)
	src := newSource(t)
	sum, err := posthogimport.Import(ctx, src.reader(t), tg.dst(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	for list, th := range src.throttled {
		if d := th.retriedAt.Sub(th.limitedAt); th.retriedAt.IsZero() || d < time.Second {
			t.Errorf("the 429 of %s was retried after %v, want Retry-After's 1s", list, d)
		}
	}
	// Keys kept, targeting and activity as in the source.
	for key, active := range map[string]bool{"new-checkout": true, "pricing-test": true, "re-engage": false, "service-config": false, "beta-banner": true} {
		if got := tg.count(fmt.Sprintf(`SELECT count(*) FROM feature_flags WHERE key = '%s' AND active = %v AND NOT deleted`, key, active)); got != 1 {
			t.Errorf("flag %s active=%v: %d rows", key, active, got)
		}
	}
	if n := tg.count(`SELECT count(*) FROM feature_flags WHERE key = 'service-config' AND filters::text LIKE '%s3cret%'`); n != 0 {
		t.Error("the encrypted payload was imported in plain text")
	}
	if n := tg.count(`SELECT count(*) FROM feature_flags WHERE key = 'pricing-test' AND ensure_experience_continuity`); n != 1 {
		t.Error("pricing-test lost its experience continuity")
	}
	if n := tg.count(`SELECT count(*) FROM cohorts WHERE name IN ('Paying users', 'Lapsed', 'Beta testers') AND NOT deleted`); n != 3 {
		t.Errorf("%d of the 3 cohorts imported", n)
	}
	// The static cohort's 150 members (15 of them with a second distinct id) are members in
	// flagedge: a person for each distinct id, as capture would have made them.
	if n := tg.count(`SELECT count(*) FROM cohort_people cp JOIN cohorts c ON c.id = cp.cohort_id
		JOIN person_distinct_ids d ON d.person_id = cp.person_id WHERE c.name = 'Beta testers'
		AND (d.distinct_id LIKE 'beta-%' OR d.distinct_id LIKE 'anon-beta-%')`); n != 165 {
		t.Errorf("%d distinct ids are members of Beta testers, want 165", n)
	}
	if sum.Members.Read != 150 || sum.Members.Pages != 2 || sum.Members.Added != 165 || sum.Members.Created != 165 {
		t.Errorf("members copied: %+v", sum.Members)
	}
	if n := tg.count(`SELECT count(*) FROM early_access_features WHERE name = 'New checkout'`); n != 1 {
		t.Errorf("%d early access features", n)
	}
	if n := tg.count(`SELECT count(*) FROM annotations WHERE content = 'Launched v2' AND scope = 'project'`); n != 1 {
		t.Errorf("%d annotations 'Launched v2'", n)
	}
	var out strings.Builder
	if err := sum.Write(&out, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`re-engage: uses cohort "Lapsed": behavioural filters`,
		"service-config: has encrypted payloads",
		"WARNING: 2 flags imported INACTIVE",
		"static cohorts: 150 members of 1 cohorts read in 2 pages, 165 distinct ids written",
		`annotation not imported: "Dip explained" (scope dashboard_item)`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}

	for _, w := range sum.Translation.Warnings {
		if w.Flag == "beta-banner" {
			t.Errorf("the flag of the static cohort is imported with a warning: %v", w.Reasons)
		}
	}

	// A second import changes nothing, writes no activity and adds no member.
	before := tg.count(`SELECT count(*) FROM activity_log`)
	version := tg.count(`SELECT snapshot_version FROM projects WHERE id = ` + tg.project)
	again, err := posthogimport.Import(ctx, src.reader(t), tg.dst(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Plan.Empty() || again.AnnotationsCreated != 0 {
		var b strings.Builder
		_ = again.Plan.Write(&b)
		t.Errorf("the second import changed something (%d annotations):\n%s", again.AnnotationsCreated, b.String())
	}
	if after := tg.count(`SELECT count(*) FROM activity_log`); after != before {
		t.Errorf("the second import wrote %d activity entries", after-before)
	}
	if again.Members.Added != 0 || again.Members.Created != 0 || again.Members.Read != 150 {
		t.Errorf("the second import's members: %+v", again.Members)
	}
	if after := tg.count(`SELECT snapshot_version FROM projects WHERE id = ` + tg.project); after != version {
		t.Errorf("the second import re-streamed the snapshot %d times", after-version)
	}
}

// cutAfter lets n writes (POST, PATCH) through to the target, then fails every write as a
// lost connection: an import interrupted part way through its writes.
type cutAfter struct {
	n      atomic.Int64
	writes atomic.Int64
}

func (c *cutAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	if (r.Method == http.MethodPost || r.Method == http.MethodPatch) && c.writes.Add(1) > c.n.Load() {
		return nil, errors.New("connection lost")
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestInterruptedImportResumesWithoutDuplicates(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name            string
		writes          int // let through before the cut
		objects, member int // written by then: cohorts and flags, cohort members
	}{
		{"while creating flags", 4, 3, 165}, // the three cohorts, then the members (one batch)
		{"while copying members", 3, 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := newTarget(t)
			src := newSource(t)
			cut := &cutAfter{}
			cut.n.Store(int64(c.writes))
			if _, err := posthogimport.Import(ctx, src.reader(t), tg.dst(&http.Client{Transport: cut}), false); err == nil {
				t.Fatal("the interrupted import did not fail")
			}
			if n := tg.count(`SELECT count(*) FROM cohorts`) + tg.count(`SELECT count(*) FROM feature_flags`); n != c.objects {
				t.Fatalf("the interrupted import wrote %d objects, want %d", n, c.objects)
			}
			if n := tg.count(`SELECT count(*) FROM cohort_people`); n != c.member {
				t.Fatalf("the interrupted import wrote %d members, want %d", n, c.member)
			}
			if _, err := posthogimport.Import(ctx, src.reader(t), tg.dst(nil), false); err != nil {
				t.Fatal(err)
			}
			if n := tg.count(`SELECT count(*) FROM feature_flags`); n != 5 {
				t.Errorf("%d flags after the re-run, want the source's 5", n)
			}
			if n := tg.count(`SELECT count(*) FROM cohorts`); n != 3 {
				t.Errorf("%d cohorts after the re-run, want the source's 3", n)
			}
			if n, m := tg.count(`SELECT count(*) FROM persons`), tg.count(`SELECT count(*) FROM cohort_people`); n != 165 || m != 165 {
				t.Errorf("%d persons and %d members after the re-run, want 165 of each", n, m)
			}
		})
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	tg := newTarget(t)
	src := newSource(t)
	sum, err := posthogimport.Import(context.Background(), src.reader(t), tg.dst(nil), true)
	if err != nil {
		t.Fatal(err)
	}
	if create, _, _ := sum.Plan.Counts(); create != 9 || sum.AnnotationsCreated != 1 || sum.StaticMembers != 150 {
		t.Errorf("the dry run plans %d creations, %d annotations and %d members, want 9, 1 and 150", create, sum.AnnotationsCreated, sum.StaticMembers)
	}
	if n := tg.count(`SELECT count(*) FROM feature_flags`) + tg.count(`SELECT count(*) FROM cohorts`) + tg.count(`SELECT count(*) FROM annotations`) +
		tg.count(`SELECT count(*) FROM persons`); n != 0 {
		t.Errorf("the dry run wrote %d objects", n)
	}
}
