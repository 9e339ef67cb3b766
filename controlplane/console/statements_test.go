package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// statementCounter is a pgx tracer that records the SQL statements the pool runs, BEGIN and
// COMMIT included, as PostgreSQL's log_statement = 'all' would log them.
type statementCounter struct {
	mu         sync.Mutex
	statements []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statements = append(c.statements, strings.Join(strings.Fields(data.SQL), " "))
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// during returns the statements run while fn runs.
func (c *statementCounter) during(fn func()) []string {
	c.mu.Lock()
	c.statements = nil
	c.mu.Unlock()
	fn()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statements
}

// newCountedSite is a site whose database pool records the statements it runs.
func newCountedSite(t *testing.T) (*site, *statementCounter) {
	t.Helper()
	counter := &statementCounter{}
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newSiteOn(t, &postgres.DB{Pool: pool, Now: time.Now}), counter
}

// TestFlagStatements bounds the SQL statements of the flag requests people make most, on a
// flag with two conditions, made by its creator, in a project with thousands of stored
// persons: the organisation's admin, and a member for whom the flag's role access (whether
// they may change it) is read with the flag. Each reads and changes the flag with
// the API (personal key) and the console (session).
func TestFlagStatements(t *testing.T) {
	t.Parallel()
	s, counter := newCountedSite(t)
	ctx := context.Background()
	if _, err := postgres.CreateUser(ctx, s.db, "admin@example.com", "member@example.com", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.NewUserService(s.db, bcrypt.MinCost).SetPassword(ctx, "member@example.com", "member password"); err != nil {
		t.Fatal(err)
	}
	admin, err := postgres.NewUserService(s.db, bcrypt.MinCost).CheckPassword(ctx, "admin@example.com", s.password)
	if err != nil {
		t.Fatal(err)
	}
	memberKey, err := postgres.NewAuthService(s.db).CreatePersonalKey(ctx, "member@example.com", "test", []string{"*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Stored persons, more than one batch of the blast radius scan: the page does not scan them.
	if _, err := s.db.Pool.Exec(ctx, `INSERT INTO persons (project_id, properties)
		SELECT $1, jsonb_build_object('email', 'p' || i || '@example.com') FROM generate_series(1, 5000) i`, s.project); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, password, key string
	}{
		{"admin@example.com", s.password, s.adminKey},
		{"member@example.com", "member password", memberKey.Secret},
	} {
		t.Run(tc.user, func(t *testing.T) {
			b := s.browser()
			tok := b.login(tc.user, tc.password)
			flags := fmt.Sprintf("/project/%d/feature_flags", s.project)
			form := func(rollout string) url.Values {
				return url.Values{"csrf_token": {tok}, "key": {"checkout-" + strings.Split(tc.user, "@")[0]}, "active": {"on"},
					"cond_count": {"2"}, "c0_props": {"1"}, "c0_p0_type": {"person"}, "c0_p0_key": {"email"}, "c0_p0_op": {"icontains"},
					"c0_p0_value": {"@example.com"}, "c0_rollout": {rollout}, "c1_props": {"0"}, "c1_rollout": {"10"}, "var_count": {"0"},
					"action": {"save"}}
			}
			p := b.post(flags+"/new", form("50"))
			if p.status != http.StatusSeeOther {
				t.Fatalf("create: %d %.500s", p.status, p.body)
			}
			flagPath, _, _ := strings.Cut(p.location, "?")
			id := flagPath[strings.LastIndex(flagPath, "/")+1:]
			apiPath := fmt.Sprintf("/api/projects/%d/feature_flags/%s", s.project, id)
			api := func(method, key, body string) int {
				req, _ := http.NewRequest(method, s.srv.URL+apiPath, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			// Role access makes the flag one only its creator, admins and the role may change.
			roles := postgres.NewRoleService(s.db)
			asAdmin := controlplane.NewContextWithUser(ctx, admin)
			role, err := roles.CreateRole(asAdmin, controlplaneRole("Owners of "+id))
			if err != nil {
				t.Fatal(err)
			}
			flagID, _ := strconv.ParseInt(id, 10, 64)
			if _, err := roles.CreateRoleAccess(asAdmin, s.project, flagID, role.ID); err != nil {
				t.Fatal(err)
			}
			rollout := `{"filters": {"groups": [{"properties": [{"key": "email", "type": "person", "operator": "icontains",
				"value": "@example.com"}], "rollout_percentage": 60}, {"properties": [], "rollout_percentage": 10}]}}`
			for _, step := range []struct {
				name string
				max  int
				do   func() int
			}{
				{"API GET flag", 4, func() int { return api("GET", tc.key, "") }},
				{"API PATCH rollout", 9, func() int { return api("PATCH", tc.key, rollout) }},
				{"console flag page", 14, func() int { return b.get(flagPath).status }},
				{"console flag save", 10, func() int { return b.post(flagPath, form("70")).status }},
			} {
				var status int
				statements := counter.during(func() { status = step.do() })
				t.Logf("%s: %d statements:\n\t%s", step.name, len(statements), strings.Join(statements, "\n\t"))
				if status != http.StatusOK && status != http.StatusSeeOther {
					t.Errorf("%s: status %d", step.name, status)
				}
				if len(statements) > step.max {
					t.Errorf("%s: %d statements, want at most %d", step.name, len(statements), step.max)
				}
			}
		})
	}
}

// TestDestinationClickStatements bounds the SQL statements of a click on an event
// destination's buttons: the update or deletion checks the admin's reach in its own SQL, so
// the click reads neither the project nor the destination before writing (the session's
// look-up is the only other statement).
func TestDestinationClickStatements(t *testing.T) {
	t.Parallel()
	s, counter := newCountedSite(t)
	b := s.browser()
	tok := b.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/destinations", s.project)
	if p := b.post(base, url.Values{"csrf_token": {tok}, "url": {"https://93.184.215.14"}, "api_key": {"phc_statements_key"}}); p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %.300s", p.status, p.body)
	}
	var id int64
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT id FROM event_destinations`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	one := fmt.Sprintf("%s/%d", base, id)
	for _, step := range []struct {
		name string
		max  int
		path string
		form url.Values
	}{
		{"disable", 6, one + "/enabled", url.Values{"csrf_token": {tok}, "enabled": {"false"}}},
		{"delete", 2, one + "/delete", url.Values{"csrf_token": {tok}}},
	} {
		var p page
		statements := counter.during(func() { p = b.post(step.path, step.form) })
		t.Logf("%s: %d statements:\n\t%s", step.name, len(statements), strings.Join(statements, "\n\t"))
		if p.status != http.StatusSeeOther {
			t.Errorf("%s: status %d", step.name, p.status)
		}
		if len(statements) > step.max {
			t.Errorf("%s: %d statements, want at most %d", step.name, len(statements), step.max)
		}
	}
}
